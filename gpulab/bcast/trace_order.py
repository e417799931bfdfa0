"""The order of a broadcast trace's phases: one rule for ``gather_trace`` and for the pattern drawings.

Free of MPI on purpose (importing anything under gpulab.bcast starts MPI): the
notebook kernel draws traces too, and must not initialise MPI.
"""

from __future__ import annotations


def phase_order(events: list[dict], phase=lambda e: (e["algorithm"], e["phase"])) -> dict:
    """Each phase's position, phases in the order their first message started.

    Steps are numbered within a phase, so phases are ordered by time: a
    hierarchical broadcast's intra-node phase comes after its inter-node one.
    """
    order = {}
    for event in sorted(events, key=lambda e: e["t_start"]):
        order.setdefault(phase(event), len(order))
    return order
