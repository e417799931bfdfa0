"""The calculator's figures: memory per stage against the device, the iteration's parts, 1D vs 3D traffic."""

from __future__ import annotations

from matplotlib.figure import Figure

from gpulab.engine.perf.memory_model import KINDS

COLORS = {"weights": "#4c72b0", "gradients": "#55a868", "optimizer": "#c44e52", "activations": "#8172b2",
          "weight_cache": "#ccb974", "working_set": "#937860", "comm_buffers": "#64b5cd"}
LABELS = {"weights": "weights", "gradients": "gradients", "optimizer": "optimizer state",
          "activations": "activations", "weight_cache": "gathered weights", "working_set": "backward working set",
          "comm_buffers": "comm. buffers"}


def memory_figure(stages: list[dict], limit: float, device: float, title: str = "") -> Figure:
    """One stacked bar per pipeline stage (GB per GPU), the usable limit and the device's memory as lines."""
    fig = Figure(figsize=(6.4, 3.4), layout="constrained")
    ax = fig.add_subplot()
    x = [s["stage"] for s in stages]
    bottom = [0.0] * len(stages)
    for kind in KINDS:
        heights = [s[kind] / 1e9 for s in stages]
        ax.bar(x, heights, bottom=bottom, color=COLORS[kind], label=LABELS[kind])
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.axhline(limit / 1e9, color="black", linestyle="--", label=f"usable ({limit / 1e9:.0f} GB)")
    ax.axhline(device / 1e9, color="grey", linestyle=":", label=f"device ({device / 1e9:.0f} GB)")
    ax.set_xlabel("pipeline stage")
    ax.set_ylabel("GB per GPU")
    ax.set_xticks(x)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def time_figure(split: dict, mfu: float, title: str = "") -> Figure:
    """The predicted iteration as one horizontal stacked bar: compute, exposed communication, bubble."""
    fig = Figure(figsize=(6.4, 1.9), layout="constrained")
    ax = fig.add_subplot()
    left = 0.0
    for (part, seconds), color in zip(split.items(), ("#4c72b0", "#c44e52", "#bbbbbb")):
        ax.barh([0], [seconds], left=left, color=color, label=f"{part} {seconds:.3g} s")
        left += seconds
    ax.set_yticks([])
    ax.set_xlabel("seconds per iteration")
    ax.set_title(f"{title}MFU {mfu:.1%}", fontsize=10)
    fig.legend(fontsize=7, ncol=3, loc="outside lower center")  # below the axis: it covers neither bar nor title
    return fig


def volume_figure(rows: list[dict], title: str = "") -> Figure:
    """Per-GPU bytes on the wire per iteration against the GPU count: 1D tensor parallelism and 3D."""
    fig = Figure(figsize=(6.4, 3.2), layout="constrained")
    ax = fig.add_subplot()
    for key, label, marker in (("1d", "1D tensor parallelism (Megatron-style, row = GPUs)", "o"),
                               ("3d", "AxoNN 3D (row x col x depth the model picks)", "s")):
        pts = [(r["gpus"], r[key] / 1e9) for r in rows if r[key] is not None]
        if pts:
            ax.plot(*zip(*pts), marker=marker, label=label)
    for r in rows:
        if r["3d"] is not None:
            ax.annotate("x".join(map(str, r["3d_shape"][:3])), (r["gpus"], r["3d"] / 1e9), fontsize=6,
                        textcoords="offset points", xytext=(2, -9))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs splitting one model replica")
    ax.set_ylabel("GB sent per GPU per iteration")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    return fig
