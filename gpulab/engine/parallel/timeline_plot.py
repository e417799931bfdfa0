"""Draw gathered timelines as a per-rank Gantt chart, and a breakdown bar chart.

    everyone = timeline.gather(tl, comm, root=0)           # rank 0: one event list per rank
    fig = gantt(everyone, title="(2, 1, 2, 1) overlap all")
    fig = breakdown([measured_row, ...], predicted=[...])  # compute / exposed / hidden per run

One row per rank: kernels (matmuls, attention, GELU) in grey on the upper
half; each collective on the lower half in its group's colour, pale while it
is in flight and solid while the rank is blocked waiting for it (so a pale
bar under grey kernels is communication hidden behind computation); phases
(forward, backward, grad-sync, step) shaded behind. With pipeline stages,
each micro-batch's forward and backward is shaded in its own rank's row and
labelled (F3, B3): the white gaps at the start and end of each row are the
pipeline bubble. Matplotlib only, no
Jupyter: the notebooks and ``gpulab.widgets.mesh_explorer`` display it.
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch

GROUP_COLORS = {"col": "#1f77b4", "row": "#d62728", "depth": "#2ca02c", "data": "#9467bd",
                "batch": "#8c564b", "tensor": "#7f7f7f", "pipe": "#ff7f0e", "embed": "#17becf"}
MICRO_COLORS = {"forward": "#ffe4b0", "backward": "#c6dcff"}  # pipeline micro-batches, per rank
PHASE_COLORS = {"forward": "#fff7e0", "backward": "#e8f1ff", "grad-sync": "#f3e8ff", "step": "#eeeeee",
                "recompute": "#ffd6d6"}  # full recomputation: a block's forward again, inside backward


def gantt(events_per_rank: list[list[dict]], *, title: str = "", ax=None, ms: bool = True) -> Figure:
    scale = 1e3 if ms else 1.0
    n = len(events_per_rank)
    if ax is None:
        fig = Figure(figsize=(11, 0.55 * n + 1.4), layout="constrained")
        ax = fig.subplots()
    else:
        fig = ax.figure
    t0 = min((e["start"] for events in events_per_rank for e in events), default=0.0)
    for e in events_per_rank[0]:
        if e["kind"] == "phase" and "micro" not in e:
            ax.axvspan((e["start"] - t0) * scale, (e["end"] - t0) * scale,
                       color=PHASE_COLORS.get(e["name"], "#f5f5f5"), zorder=0)
    for rank, events in enumerate(events_per_rank):
        y = n - 1 - rank  # rank 0 on top
        for e in events:
            if e["kind"] == "phase" and "micro" in e:  # a pipeline micro-batch, in this rank's row
                x0, width = (e["start"] - t0) * scale, (e["end"] - e["start"]) * scale
                ax.broken_barh([(x0, width)], (y - 0.48, 0.96), facecolors=MICRO_COLORS[e["name"]],
                               edgecolors="#999999", linewidth=0.5, zorder=1)
                chunk = f".{e['chunk']}" if "chunk" in e else ""  # interleaved: which model chunk
                ax.text(x0 + width / 2, y + 0.3, f"{e['name'][0].upper()}{e['micro']}{chunk}", ha="center",
                        va="center", fontsize=7, zorder=4)
        kernels = [((e["start"] - t0) * scale, (e["end"] - e["start"]) * scale)
                   for e in events if e["kind"] == "compute"]
        ax.broken_barh(kernels, (y + 0.05, 0.4), facecolors="#555555", zorder=2)
        for e in events:
            if e["kind"] != "comm":
                continue
            color = GROUP_COLORS.get(e["group"], "#333333")
            ax.broken_barh([((e["start"] - t0) * scale, (e["end"] - e["start"]) * scale)],
                           (y - 0.45, 0.4), facecolors=color, alpha=0.3, zorder=2)
            ax.broken_barh([((s - t0) * scale, (t - s) * scale) for s, t in e["blocked"]],
                           (y - 0.45, 0.4), facecolors=color, zorder=3)
    ax.set_yticks(range(n), [f"rank {n - 1 - y}" for y in range(n)])
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xlabel("time (ms)" if ms else "time (s)")
    ax.set_title(title)
    used = sorted({e["group"] for events in events_per_rank for e in events if e["kind"] == "comm"})
    handles = [Patch(color="#555555", label="kernel")]
    handles += [Patch(color=GROUP_COLORS.get(g, "#333333"), label=f"{g} (solid: waiting)") for g in used]
    handles += [Patch(color=c, label=p) for p, c in PHASE_COLORS.items()]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    return fig


def breakdown(rows: list[dict], predicted: list[dict] | None = None, *, title: str = "", ax=None) -> Figure:
    """Stacked bars per run: compute, exposed and hidden communication (ms); predictions as dots.

    ``rows``: dicts with "label" and a timeline summary under "summary" (``bench.measure`` rows
    plus a label; with ``iter_s_interval``, runs in rounds, an error bar each); ``predicted``:
    ``perfmodel.predict`` results in the same order.
    """
    if ax is None:
        fig = Figure(figsize=(max(6, 0.9 * len(rows) + 2), 3.8), layout="constrained")
        ax = fig.subplots()
    else:
        fig = ax.figure
    x = list(range(len(rows)))
    comp = [r["summary"]["compute_s"] * 1e3 for r in rows]
    exposed = [r["summary"]["exposed_comm_s"] * 1e3 for r in rows]
    hidden = [r["summary"]["hidden_comm_s"] * 1e3 for r in rows]
    ax.bar(x, comp, color="#555555", label="compute")
    ax.bar(x, exposed, bottom=comp, color="#d62728", label="exposed communication")
    ax.bar(x, hidden, bottom=[c + e for c, e in zip(comp, exposed)], color="#d62728", alpha=0.3,
           label="hidden communication (in flight while computing)")
    spans = [r.get("iter_s_interval") for r in rows]
    if spans and all(spans):  # runs measured in rounds: the median iteration and its interval
        mid = [s["median"] * 1e3 for s in spans]
        ax.errorbar(x, mid, yerr=[[m - s["low"] * 1e3 for m, s in zip(mid, spans)],
                                  [s["high"] * 1e3 - m for m, s in zip(mid, spans)]],
                    fmt="none", ecolor="#1f77b4", capsize=5, label="measured iteration: median, 95% interval")
    if predicted:
        ax.plot(x, [p["iter_s"] * 1e3 for p in predicted], "o", color="black", label="predicted iteration")
        ax.plot(x, [p["compute_s"] * 1e3 for p in predicted], "_", color="white", markersize=18,
                markeredgewidth=2, label="predicted compute")
    ax.set_xticks(x, [r["label"] for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ms per iteration")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig
