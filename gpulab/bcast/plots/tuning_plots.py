"""Plots of the cost model and the tuner: fit, predicted vs measured, crossovers, heat map, scale.

Each function takes plain records (what ``gpulab tune`` writes) and returns a
matplotlib ``Figure`` made without pyplot (a pyplot figure in a notebook would be
shown a second time by the inline backend, drawn again, and kept open);
notebook 03 and ``gpulab tune ... --plot`` both use them.
"""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from gpulab.bcast.algorithms import registry
from gpulab.bcast.cost.hockney import Machine, best_chunk, predict
from gpulab.bcast.measurement.report import compare_rows
from gpulab.bcast.sizes import format_size


def _on(ax, figsize):
    """(figure, axes) to draw on: ax and its figure, or a new figure's one axes."""
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.subplots()


def _size_axis(ax, sizes):
    ax.set_xscale("log", base=2)
    lo, hi = int(np.log2(max(1, min(sizes)))), int(np.ceil(np.log2(max(sizes))))
    ticks = [1 << k for k in range(lo, hi + 1)]
    ticks = ticks[:: max(1, -(-len(ticks) // 8))]  # at most 8 power-of-two ticks
    ax.set_xticks(ticks)
    ax.set_xticklabels([format_size(int(t)) for t in ticks])
    ax.set_xlabel("message size")


def fit_plot(machine_dict: dict, ax=None):
    """Ping-pong one-way times (dots) and the fitted alpha-beta lines per level and regime."""
    machine = Machine.from_dict(machine_dict)
    fig, ax = _on(ax, figsize=(6, 4))
    samples = machine.notes.get("samples", [])
    for via, marker in (("mpi", "o"), ("python", "x")):
        for level in ("intra", "inter"):
            pts = [s for s in samples if s["via"] == via and s["level"] == level]
            if pts:
                ax.plot([s["nbytes"] for s in pts], [s["seconds"] * 1e6 for s in pts], marker, ms=4, alpha=0.6,
                        label=f"{level} ping-pong ({'mpi4py Send/Recv' if via == 'mpi' else 'gpulab Group'})")
    sizes = np.unique([s["nbytes"] for s in samples]) if samples else np.array([8, 1 << 22])
    grid = np.geomspace(sizes.min(), sizes.max(), 200)
    for level, style in (("intra", "-"), ("inter", "--")):
        link = getattr(machine, level)
        ax.plot(grid, [link.regime(n).time(n) * 1e6 for n in grid], style, label=f"{level} fit")
    if machine.intra.switch:
        ax.axvline(machine.intra.switch, color="grey", lw=0.8, ls=":")
    ax.set_yscale("log")
    ax.set_ylabel("one-way time (us)")
    _size_axis(ax, sizes)
    ax.legend(fontsize=7)
    ax.set_title(machine.name)
    return fig


def accuracy_plot(rows: list[dict], label: str = "fit same p", algorithms=None, p_values=None):
    """One panel per algorithm: measured (dots) and predicted (lines) time against size, per p."""
    algorithms = algorithms or list(dict.fromkeys(r["algorithm"] for r in rows))
    p_values = p_values or sorted({r["p"] for r in rows})
    cols = 5
    nrows = -(-len(algorithms) // cols)
    fig = Figure(figsize=(3.2 * cols, 2.8 * nrows), layout="constrained")
    axes = fig.subplots(nrows, cols, squeeze=False)
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, algorithm in zip(axes.flat, algorithms):
        for i, p in enumerate(p_values):
            pts = sorted((r for r in rows if r["algorithm"] == algorithm and r["p"] == p), key=lambda r: r["nbytes"])
            if not pts or f"pred_us[{label}]" not in pts[0]:
                continue
            c = colors[i % len(colors)]
            ax.plot([r["nbytes"] for r in pts], [r.get("max_us", r["avg_us"]) for r in pts], "o", ms=3, color=c,
                    label=f"p={p}")
            ax.plot([r["nbytes"] for r in pts], [r[f"pred_us[{label}]"] for r in pts], "-", lw=1, color=c)
        ax.set_yscale("log")
        ax.set_title(algorithm, fontsize=9)
        _size_axis(ax, [r["nbytes"] for r in rows])
    for ax in axes.flat[len(algorithms):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    axes.flat[0].set_ylabel("us (dots: slowest rank, lines: model)")
    fig.suptitle(f"predicted ({label}) vs measured")
    return fig


def compare_plot(per_p: dict):
    """auto/MPI and best-fixed/MPI time ratios against size, one panel per process count."""
    fig = Figure(figsize=(3.6 * len(per_p), 3.2), layout="constrained")
    axes = fig.subplots(1, len(per_p), squeeze=False)
    for ax, (p, rows) in zip(axes[0], sorted(per_p.items())):
        table = compare_rows(rows)
        sizes = [r["nbytes"] for r in table]
        ax.plot(sizes, [r["auto_over_mpi"] for r in table], "o-", label="auto / MPI_Bcast")
        ax.plot(sizes, [r["best_over_mpi"] for r in table], "s--", ms=3, label="best fixed / MPI_Bcast")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.axhline(1.1, color="red", lw=0.8, ls=":", label="+10%")
        ax.axvline(64 << 10, color="grey", lw=0.8, ls=":")
        ax.set_ylim(0, max(1.5, max(r["auto_over_mpi"] for r in table) * 1.05))
        ax.set_title(f"p = {p}")
        _size_axis(ax, sizes)
    axes[0][0].set_ylabel("time ratio (below 1 = faster than MPI)")
    axes[0][0].legend(fontsize=7)
    return fig


def heatmap(tables: dict, ax=None):
    """The tuning table as size x process count -> algorithm (one colour per algorithm)."""
    fig, ax = _on(ax, figsize=(8, 3))
    ps = sorted(int(p) for p in tables)
    sizes = sorted({s for t in tables.values() for r in t["ranges"] for s in r["measured_at"]})
    pick = {(int(p), s): r["algorithm"] for p, t in tables.items() for r in t["ranges"] for s in r["measured_at"]}
    names = sorted(set(pick.values()))
    grid = np.full((len(ps), len(sizes)), np.nan)
    for (p, s), name in pick.items():
        grid[ps.index(p), sizes.index(s)] = names.index(name)
    cmap = matplotlib.colormaps["tab10"].resampled(max(len(names), 1))
    ax.imshow(grid, aspect="auto", cmap=cmap, vmin=-0.5, vmax=len(names) - 0.5, origin="lower")
    ax.set_yticks(range(len(ps)), [str(p) for p in ps])
    ax.set_xticks(range(len(sizes)), [format_size(s) for s in sizes], rotation=60, fontsize=7)
    ax.set_ylabel("processes")
    ax.set_xlabel("message size")
    handles = [Rectangle((0, 0), 1, 1, color=cmap(i)) for i in range(len(names))]
    ax.legend(handles, names, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_title("algorithm='auto': tuned choice")
    return fig


def scale_plot(machine, nbytes: int, p_values, algorithms, ax=None, **options_by_algorithm):
    """Predicted broadcast time against process count on a machine profile."""
    fig, ax = _on(ax, figsize=(6, 4))
    for algorithm in algorithms:
        times = []
        for p in p_values:
            opts = dict(options_by_algorithm.get(algorithm, {}))
            if registry.get(algorithm).pipelined and "chunk_bytes" not in opts:
                opts["chunk_bytes"] = best_chunk(algorithm, nbytes, p, machine)
            times.append(predict(algorithm, nbytes, p, machine, **opts) * 1e3)
        ax.plot(p_values, times, "o-", ms=3, label=algorithm)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("predicted time (ms)")
    ax.set_title(f"{machine.name}: broadcast of {format_size(nbytes)}")
    ax.legend(fontsize=7)
    return fig


def workload_plot(rows: list[dict]):
    """Layer-wise vs fused start-up broadcast per algorithm, one panel per network."""
    networks = list(dict.fromkeys(r["network"] for r in rows))
    fig = Figure(figsize=(5 * len(networks), 3.5), layout="constrained")
    axes = fig.subplots(1, len(networks), squeeze=False)
    for ax, net in zip(axes[0], networks):
        part = [r for r in rows if r["network"] == net]
        names = list(dict.fromkeys(r["algorithm"] for r in part))
        x = np.arange(len(names))
        for i, mode in enumerate(("layerwise", "fused")):
            t = [next((r["min_s"] for r in part if r["algorithm"] == a and r["mode"] == mode), np.nan) for a in names]
            ax.bar(x + (i - 0.5) * 0.4, t, 0.4, label=mode)
        ax.set_xticks(x, names, rotation=30, fontsize=8)
        ax.set_ylabel("seconds")
        tensors = max(r["tensors"] for r in part)
        ax.set_title(f"{net}: {part[0]['nbytes'] / 1e6:.0f} MB, {tensors} tensors, p={part[0]['p']}")
        ax.legend(fontsize=7)
    return fig


def for_command(what: str, results: dict):
    """The figure ``gpulab tune WHAT --plot`` saves."""
    if what == "fit":
        return fit_plot(results[min(results)]["model"])
    if what == "bcast":
        return heatmap({p: r["table"] for p, r in results.items()})
    if what == "compare":
        return compare_plot({p: r["rows"] for p, r in results.items()})
    if what == "accuracy":
        return accuracy_plot([x for r in results.values() for x in r["rows"]])
    return workload_plot([x for r in results.values() for x in r["rows"]])
