"""Trace mode: record who sent what to whom, in which logical step.

    with tracing() as events:          # or run with GPULAB_TRACE=1
        bcast(buf, algorithm="chain")
    everything = gather_trace(events, comm)   # on rank 0

Each event is a dict: algorithm, phase (e.g. "scatter", "allgather"), step
(the logical round inside that phase), src and dst (ranks of the communicator
the user passed), nbytes, and t_start/t_end (``MPI.Wtime`` seconds on the
sending rank, t_end when the send completed). Only senders record, so every
message appears exactly once. ``phase_order`` is the one rule for the order of
a trace's phases, in ``gather_trace`` and in the pattern drawings. Free of MPI
(the notebook kernel draws traces too): the algorithms record, and
``gather_trace`` communicates over the communicator it is handed.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

_events: list | None = [] if os.environ.get("GPULAB_TRACE") else None
on_switch: list = []  # what to forget when tracing starts or stops (the fast path's plans do not record)


def phase_order(events: list[dict], phase=lambda e: (e["algorithm"], e["phase"])) -> dict:
    """Each phase's position, phases in the order their first message started.

    Steps are numbered within a phase, so phases are ordered by time: a
    hierarchical broadcast's intra-node phase comes after its inter-node one.
    """
    order = {}
    for event in sorted(events, key=lambda e: e["t_start"]):
        order.setdefault(phase(event), len(order))
    return order


def active() -> bool:
    return _events is not None


def extend(events: list[dict]) -> None:
    """Add one broadcast's events (the executor records them after its last message, so that
    recording costs no time between messages)."""
    _events.extend(events)


@contextmanager
def tracing():
    """Record this rank's sends into the yielded list while the block runs."""
    global _events
    previous, _events = _events, []
    _switched(previous is None)
    try:
        yield _events
    finally:
        _events = previous
        _switched(previous is None)


def _switched(changed: bool) -> None:
    if changed:
        for forget in on_switch:
            forget()


def events() -> list:
    """The events recorded so far in GPULAB_TRACE mode (empty when tracing is off)."""
    return list(_events or [])


def gather_trace(events: list, comm) -> list | None:
    """All ranks' events, sorted by phase order, step and source, on rank 0 (None elsewhere)."""
    gathered = comm.gather(events, root=0)
    if gathered is None:
        return None
    merged = [event for per_rank in gathered for event in per_rank]
    order = phase_order(merged)
    return sorted(merged, key=lambda e: (order[e["algorithm"], e["phase"]], e["step"], e["src"], e["dst"]))
