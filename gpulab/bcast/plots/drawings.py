"""Drawings of broadcast measurements and traces, into a matplotlib ``Figure`` without pyplot.

They work the same in a notebook, a test and a script:

    sweep_figure(records).savefig("bcast.png")          # time and busbw against size
    pattern_figure(events, p, title="chain")             # who sends to whom in which step
    pattern_figure(planned_events("binomial", 8, 1024), 8)   # the same, from the schedules, no MPI
"""

from __future__ import annotations

from collections import defaultdict

from matplotlib.figure import Figure

from gpulab.bcast.runtime.trace import phase_order
from gpulab.bcast.sizes import format_size


def series_of(row: dict) -> str:
    """The legend label of a measurement row: its run number, algorithm and options, and for
    device buffers the device and the path taken (``[cupy staged]``)."""
    options = ",".join(f"{k}={format_size(v) if k.endswith('bytes') else v}"
                       for k, v in sorted(row.get("options", {}).items()) if k != "path")
    label = row["algorithm"] + (f"({options})" if options else "")
    if row.get("device", "host") != "host":
        label += f" [{row['device']} {row['path']}]"
    return f"#{row['run']} {label}" if "run" in row else label


def sweep_figure(rows: list[dict], fig: Figure | None = None) -> Figure:
    """Two panels against message size: average time (log-log) and bus bandwidth.

    Rows measured in several rounds (``results.over_rounds``: the bench's, the explorer's) are drawn at
    their median with a band for the median's 95% interval (``avg_interval_us``); a row's ``model_us`` (a cost
    model's time, the explorer's) is drawn dotted in its line's colour."""
    fig = fig or Figure(figsize=(10, 4), layout="constrained")
    fig.clear()
    ax_time, ax_bw = fig.subplots(1, 2)
    series = defaultdict(list)
    for row in rows:
        series[series_of(row)].append(row)
    for label, points in series.items():
        points.sort(key=lambda r: r["nbytes"])
        sizes = [r["nbytes"] for r in points]
        # MPI's own Bcast is the reference: draw it dashed so the eye finds it
        style = "--" if points[0]["algorithm"] == "mpi" else "-"
        line, = ax_time.plot(sizes, [r["avg_us"] for r in points], style, marker="o", ms=3, label=label)
        ax_bw.plot(sizes, [r["busbw_GBps"] for r in points], style, marker="o", ms=3, label=label)
        if any("model_us" in r for r in points):  # the cost model's time for the last rank, dotted
            ax_time.plot(sizes, [r.get("model_us", float("nan")) for r in points], ":", color=line.get_color())
        if any(_rounds(r) > 1 for r in points):
            low, high = ([r.get("avg_interval_us", {}).get(end, r["avg_us"]) for r in points]
                         for end in ("low", "high"))
            ax_time.fill_between(sizes, low, high, color=line.get_color(), alpha=0.2, lw=0)
            ax_bw.fill_between(sizes, [n / t / 1e3 for n, t in zip(sizes, high)],
                               [n / t / 1e3 for n, t in zip(sizes, low)], color=line.get_color(), alpha=0.2, lw=0)
    for ax in (ax_time, ax_bw):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.grid(True, which="both", alpha=0.3)
    ax_time.set_yscale("log")
    sure = min((r["avg_interval_us"]["confidence"] for r in rows if _rounds(r) > 1), default=None)
    ax_time.set_ylabel("average time (us)" if sure is None else "time (us): median of rounds, band: its "
                       + ("95% interval" if sure >= 0.95 else f"interval ({sure:.0%} sure: few rounds)"))
    ax_bw.set_ylabel("bus bandwidth (GB/s)")
    if series:
        p = rows[-1].get("p", "?")
        ax_time.set_title(f"broadcast time, p={p}")
        ax_bw.set_title("busbw = bytes / time (broadcast)")
        ax_bw.legend(fontsize=7, loc="best")
    return fig


def _rounds(row: dict) -> int:
    return row.get("avg_interval_us", {}).get("n", 1)


def phase_label(event: dict) -> str:
    """A trace event's phase as drawn: with its level for a two-level broadcast ("inter tree",
    "intra tree": the same phase name and step at two levels are two different rounds)."""
    level = event.get("algorithm", "").partition("/")[2]
    return f"{level} {event['phase']}" if level else event["phase"]


def step_columns(events: list[dict]) -> list[tuple[str, int]]:
    """The logical rounds in order: (phase label, step) pairs, phases in the order they first happen."""
    order = phase_order(events, phase=phase_label)
    return sorted({(phase_label(e), e["step"]) for e in events}, key=lambda k: (order[k[0]], k[1]))


def planned_events(algorithm: str, p: int, nbytes: int, root: int = 0, **options) -> list[dict]:
    """The messages of a flat algorithm's broadcast as trace events, read from the schedules that
    ``execute`` runs (no MPI): what a trace of it records, but for the times. ``t_start`` is the
    send's position in its rank's schedule, which orders the phases as a trace's times do."""
    from gpulab.bcast.algorithms.registry import get  # on use: importing the drawings stays light

    return [{"algorithm": algorithm, "phase": op.phase, "step": op.step, "src": me, "dst": op.peer,
             "nbytes": op.hi - op.lo, "t_start": float(i), "t_end": float(i), "path": "host"}
            for me in range(p) for i, op in enumerate(get(algorithm).build(p, root, me, nbytes, **options))
            if op.phase]  # only sends carry a phase


def pattern_figure(events: list[dict], p: int, *, title: str = "", ax=None) -> Figure:
    """Who sends to whom in which step: one row per rank, one column per logical round, an arrow per message."""
    if ax is None:
        fig = Figure(figsize=(7, 0.45 * p + 1.5), layout="constrained")
        ax = fig.subplots()
    fig = ax.figure
    columns = step_columns(events)
    col = {key: i for i, key in enumerate(columns)}
    phases = list(dict.fromkeys(phase for phase, _ in columns))
    colors = {phase: f"C{i}" for i, phase in enumerate(phases)}
    for rank in range(p):
        ax.axhline(rank, color="0.85", lw=1, zorder=0)
    for e in events:
        x = col[phase_label(e), e["step"]]
        ax.annotate("", xy=(x + 0.8, e["dst"]), xytext=(x, e["src"]),
                    arrowprops=dict(arrowstyle="->", color=colors[phase_label(e)], lw=1.2))
    for phase in phases:  # legend entries for the phases
        ax.plot([], [], color=colors[phase], label=phase)
    ax.set_xlim(-0.3, max(len(columns), 1) + 0.1)
    ax.set_ylim(p - 0.5, -0.5)  # rank 0 on top
    ax.set_yticks(range(p))
    ax.set_ylabel("rank")
    ax.set_xticks([i + 0.4 for i in range(len(columns))])
    ax.set_xticklabels([str(i) for i in range(len(columns))], fontsize=7)
    ax.set_xlabel("logical step")
    total = sum(e["nbytes"] for e in events)
    ax.set_title(f"{title}  ({len(events)} messages, {format_size(total)} moved)".strip(), fontsize=9)
    if len(phases) > 1:
        ax.legend(fontsize=7, loc="lower right")
    return fig
