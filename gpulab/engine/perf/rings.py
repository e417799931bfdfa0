"""Each collective the engine calls, priced as a ring, and its non-blocking twin.

A collective over ``size`` ranks is a ring: all-reduce 2(g-1) steps and
2(g-1)/g n bytes per rank, all-gather and reduce-scatter half that. The
engine issues each one's non-blocking twin (MPI_Iallreduce...) where it
overlaps: a fitted machine times both (MPICH selects their algorithms apart),
a profile prices both as one ring.
"""

from __future__ import annotations

NONBLOCKING = {op: "i" + op for op in ("all_reduce", "all_gather", "reduce_scatter")}
BLOCKING_OF = {twin: op for op, twin in NONBLOCKING.items()}


def ring(op: str, size: int) -> tuple[int, float]:
    """(latency steps, bytes factor on the full buffer) of a ring collective over ``size`` ranks."""
    if size <= 1:
        return 0, 0.0
    op = BLOCKING_OF.get(op, op)
    if op == "all_reduce":
        return 2 * (size - 1), 2 * (size - 1) / size
    return size - 1, (size - 1) / size  # all_gather, reduce_scatter
