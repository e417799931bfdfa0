"""Plots of broadcast measurements: time and bus bandwidth against message size.

Used by ``gpulab bench --plot`` and by the notebook widgets; takes the records
``gpulab.bench.sweep`` returns (plus an optional ``label`` key per record).
"""

from __future__ import annotations

from collections import defaultdict

from gpulab.bench import format_size


def series(records: list[dict]) -> dict[str, list[dict]]:
    """Records grouped into one line per label (default: the algorithm name), sorted by size."""
    lines = defaultdict(list)
    for record in records:
        lines[record.get("label", record["algorithm"])].append(record)
    return {label: sorted(rows, key=lambda r: r["nbytes"]) for label, rows in lines.items()}


def plot_bcast(records: list[dict], axes=None, title: str | None = None):
    """Two log-log panels: latency (us) and busbw (GB/s) against message size. Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    else:
        fig = axes[0].figure
    for ax in axes:
        ax.clear()
    for label, rows in series(records).items():
        style = {"color": "black", "linestyle": "--", "linewidth": 2} if label == "mpi" else {}
        sizes = [r["nbytes"] for r in rows]
        axes[0].plot(sizes, [r["avg_us"] for r in rows], marker="o", markersize=3, label=label, **style)
        axes[1].plot(sizes, [r["busbw_GBps"] for r in rows], marker="o", markersize=3, label=label, **style)
    for ax, ylabel in zip(axes, ("time per broadcast (us)", "bus bandwidth (GB/s)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ticks = sorted({r["nbytes"] for r in records})
        if ticks:
            ax.set_xticks(ticks[:: max(1, len(ticks) // 8)])
            ax.set_xticklabels([format_size(t) for t in ticks[:: max(1, len(ticks) // 8)]])
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig
