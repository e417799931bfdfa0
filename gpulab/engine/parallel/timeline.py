"""Per-rank timelines: when each rank computed, and when each collective was in flight or waited on.

    with timeline.record() as tl:              # this process only, like collectives.trace()
        gpt.forward_backward(idx, targets)
    summarize(tl.events)                       # compute / exposed / hidden communication, seconds
    everyone = gather(tl, comm, root=0)        # rank 0: [events of rank 0, of rank 1, ...]

Events are dicts with ``start`` and ``end`` (seconds, ``perf_counter``):

- ``{"kind": "compute", "name": "h.0.attn.c_attn fwd"}``: a kernel (a matmul,
  attention), recorded by ``with kernel(name):`` around it;
- ``{"kind": "comm", "op", "group", "size", "nbytes", "async", "blocked":
  [[s, e], ...]}``: a collective from its call until this rank saw it complete
  (the end of a blocking call, a ``wait()``, or a progress poll that found it
  done); ``blocked`` lists the intervals the rank spent inside MPI for it;
- ``{"kind": "poll"}``: time spent in progress polls (MPI_Test between kernels);
- ``{"kind": "phase", "name": "forward" | "backward" | "grad-sync" | "step"}``; with
  pipeline stages, each micro-batch's forward and backward is a phase with
  ``"micro": i``.

What counts (``summarize``): exposed communication = time the rank sat
inside MPI (the union of ``blocked`` intervals and polls); hidden
communication = time a collective was in flight while the rank did something
else; compute = wall time minus exposed. "In flight" ends when the rank
*observed* completion, so without MPI progress (no polls, no progress thread)
a non-blocking collective looks in flight while nothing moves: the proof
that overlap is real is exposed time and iteration time falling (docs/engine_overlap.md).
"""

from __future__ import annotations

from contextlib import contextmanager
from time import perf_counter

from gpulab.backend import synchronize

_current: Timeline | None = None
_after_kernel = None  # set by collectives.polling(): progress MPI between kernels


class Timeline:
    """The events of one process, in the order they ended."""

    def __init__(self):
        self.events: list[dict] = []

    def add(self, kind: str, start: float, end: float, **fields) -> dict:
        event = {"kind": kind, "start": start, "end": end, **fields}
        self.events.append(event)
        return event


@contextmanager
def record():
    """Record this process's events inside the ``with`` block (nested blocks see their own)."""
    global _current
    outer, _current = _current, Timeline()
    try:
        yield _current
    finally:
        _current = outer


def current() -> Timeline | None:
    return _current


def set_after_kernel(fn):
    """Call ``fn()`` after every kernel (None: nothing); returns the previous setting."""
    global _after_kernel
    previous, _after_kernel = _after_kernel, fn
    return previous


@contextmanager
def kernel(name: str):
    """A compute kernel: recorded when a timeline is on; afterwards MPI gets a progress poll
    when ``collectives.polling()`` is on (the "test-polling between kernels" of overlap).

    On a GPU, kernels only start when Python returns: a recorded kernel waits
    for the GPU (the CUDA stream) so that the timeline shows when the work ran,
    not when it was launched. Recording thus costs some CPU/GPU overlap.
    """
    start = perf_counter()
    yield
    if _current is not None:
        synchronize()
        _current.add("compute", start, perf_counter(), name=name)
    if _after_kernel is not None:
        _after_kernel()


@contextmanager
def phase(name: str, **fields):
    """A stretch of the step (``fields``: e.g. ``micro``, the pipeline micro-batch it computes)."""
    start = perf_counter()
    yield
    if _current is not None:
        _current.add("phase", start, perf_counter(), name=name, **fields)


# --- summaries ---------------------------------------------------------------------------------

def _union(intervals) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def _length(intervals) -> float:
    return sum(e - s for s, e in _union(intervals))


def _clip(intervals, lo: float, hi: float):
    return [(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi]


def summarize(events: list[dict], start: float | None = None, end: float | None = None) -> dict:
    """Seconds of wall, compute, exposed and hidden communication in [start, end] (default: all
    events), plus per group: time in flight and time exposed."""
    if not events:
        return {"wall_s": 0.0, "compute_s": 0.0, "exposed_comm_s": 0.0, "hidden_comm_s": 0.0,
                "poll_s": 0.0, "kernel_s": 0.0, "groups": {}}
    lo = min(e["start"] for e in events) if start is None else start
    hi = max(e["end"] for e in events) if end is None else end
    comm = [e for e in events if e["kind"] == "comm"]
    polls = _clip([(e["start"], e["end"]) for e in events if e["kind"] == "poll"], lo, hi)
    blocked = _clip([tuple(b) for e in comm for b in e["blocked"]], lo, hi) + polls
    flight = _clip([(e["start"], e["end"]) for e in comm], lo, hi) + polls
    exposed = _length(blocked)
    groups: dict[str, dict] = {}
    for e in comm:
        g = groups.setdefault(e["group"], {"calls": 0, "bytes": 0, "flight_s": 0.0, "exposed_s": 0.0})
        g["calls"] += 1
        g["bytes"] += e["nbytes"]
        g["flight_s"] += _length(_clip([(e["start"], e["end"])], lo, hi))
        g["exposed_s"] += _length(_clip([tuple(b) for b in e["blocked"]], lo, hi))
    return {"wall_s": hi - lo, "compute_s": hi - lo - exposed, "exposed_comm_s": exposed,
            "hidden_comm_s": _length(flight) - exposed, "poll_s": _length(polls),
            "kernel_s": _length(_clip([(e["start"], e["end"]) for e in events
                                       if e["kind"] == "compute"], lo, hi)),
            "groups": groups}


def mean_summary(summaries: list[dict]) -> dict:
    """The per-key mean of several ``summarize`` results (ranks or iterations); groups too."""
    keys = [k for k in summaries[0] if k != "groups"]
    out = {k: sum(s[k] for s in summaries) / len(summaries) for k in keys}
    names = sorted({g for s in summaries for g in s["groups"]})
    out["groups"] = {g: {k: sum(s["groups"].get(g, {}).get(k, 0) for s in summaries) / len(summaries)
                         for k in ("calls", "bytes", "flight_s", "exposed_s")} for g in names}
    return out


def gather(tl: Timeline, comm, root: int = 0):
    """Every rank's events on ``root`` (None elsewhere), on one clock: each rank's times are
    shifted so that the end of a common barrier is time 0 (perf_counter differs per node)."""
    comm.Barrier()
    zero = perf_counter()
    shifted = [{**e, "start": e["start"] - zero, "end": e["end"] - zero,
                **({"blocked": [[s - zero, t - zero] for s, t in e["blocked"]]} if "blocked" in e else {})}
               for e in tl.events]
    return comm.gather(shifted, root=root)
