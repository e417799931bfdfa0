"""Which algorithm ``bcast(..., algorithm="auto")`` runs.

Until a tuning table exists this follows MPICH's published defaults
(MPIR_CVAR_BCAST_SHORT_MSG_SIZE = 12288, MPIR_CVAR_BCAST_LONG_MSG_SIZE =
524288, MPIR_CVAR_BCAST_MIN_PROCS = 8).
"""

from __future__ import annotations

SHORT_MSG = 12288
LONG_MSG = 524288
MIN_PROCS = 8


def select(nbytes: int, comm) -> tuple[str, dict]:
    """(algorithm name, options) for a broadcast of ``nbytes`` over ``comm``, with the reason in MPICH's terms."""
    p = comm.size
    if nbytes < SHORT_MSG or p < MIN_PROCS:
        return "binomial", {}
    if p & (p - 1) == 0 and nbytes < LONG_MSG:
        return "scatter_allgather_rd", {}
    return "scatter_allgather_ring", {}
