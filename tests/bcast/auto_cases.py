"""In the ranks: what ``algorithm="auto"`` decides and moves on the job's layout (tests/bcast/test_auto_sources.py)."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from gpulab.bcast import bcast, gather_trace, select, tracing


def auto_decides_and_moves(world: MPI.Comm, nbytes: int) -> dict:
    """One ``auto`` broadcast of ``nbytes``: the data arrives, and the trace saw what ``select`` named."""
    expected = (np.arange(nbytes, dtype=np.uint32) * 2654435761 >> 13).astype(np.uint8)
    buf = expected.copy() if world.rank == 0 else np.zeros(nbytes, dtype=np.uint8)
    with tracing() as events:
        bcast(buf, comm=world)
    assert np.array_equal(buf, expected), f"rank {world.rank}: wrong bytes after auto's broadcast"
    ran = gather_trace(events, world)
    decision = select(nbytes, world)
    return {"name": decision.name, "options": decision.options, "source": decision.source,
            "reason": decision.reason, "ran": sorted({e["algorithm"] for e in ran}) if ran is not None else None}
