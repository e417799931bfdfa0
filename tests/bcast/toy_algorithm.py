"""A toy broadcast added the way docs/adding_an_algorithm.md says: a schedule builder and one record.

The reverse chain is the pipelined chain walked backwards (root -> vr p-1 -> vr p-2 -> ... -> vr 1).
Nothing in gpulab names it: the tests register it, check that everything picks it up, and remove it.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager

import numpy as np

from gpulab.bcast.algorithms import registry
from gpulab.bcast.algorithms.pipelined import forward_chunks
from gpulab.bcast.algorithms.registry import Algorithm
from gpulab.bcast.algorithms.tree_shapes import DEFAULT_CHUNK
from gpulab.bcast.algorithms.trees import absolute

NAME = "reverse_chain"


@functools.lru_cache(maxsize=4096)
def reverse_chain(p: int, root: int, me: int, nbytes: int, chunk_bytes: int = DEFAULT_CHUNK):
    """Pipelined chain walked backwards: root -> vr p-1 -> vr p-2 -> ... -> vr 1."""
    order = [0, *range(p - 1, 0, -1)]  # relative ranks in the order the chunks travel
    hop = order.index((me - root) % p)
    parent = None if hop == 0 else absolute(order[hop - 1], root, p)
    children = [absolute(order[hop + 1], root, p)] if hop + 1 < p else []
    return tuple(forward_chunks(0, nbytes, parent, children, chunk_bytes, "chain", hop))


RECORD = registry.pipeline_record(NAME, reverse_chain)


@contextmanager
def registered(record: Algorithm = RECORD):
    """The toy in the registry for the duration of a ``with`` block only."""
    registry.register(record)
    try:
        yield record
    finally:
        registry.unregister(record.name)


# (dtype, shape) x options: empty, one byte, chunks that do not divide the message, the default chunk
CASES = [(("uint8", (0,)), {}), (("int8", (1,)), {}), (("float64", (3, 2, 1999)), {}),
         (("complex64", (33,)), {"chunk_bytes": 7}), (("int32", (1000,)), {"chunk_bytes": 999}),
         (("uint8", (95952,)), {"chunk_bytes": 4096})]


def check_toy(world) -> dict:
    """On every rank: register the toy, broadcast each case with it and with MPI_Bcast from every
    root (on world and an odd/even split), compare the bytes, unregister. {"checked", "wrong"}."""
    from mpi4py import MPI

    from gpulab.bcast import ALGORITHMS

    comms = [("world", world)] + ([("split", world.Split(world.rank % 2, -world.rank))] if world.size > 2 else [])
    checked, wrong = 0, []
    with registered():
        for comm_name, comm in comms:
            for root in range(comm.size):
                for (dtype, shape), options in CASES:
                    rng = np.random.default_rng(1000 * root + checked)
                    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
                    data = rng.integers(0, 256, nbytes, dtype=np.uint8).view(dtype).reshape(shape)
                    mine = data.copy() if comm.rank == root else np.zeros_like(data)
                    theirs = data.copy() if comm.rank == root else np.zeros_like(data)
                    assert ALGORITHMS[NAME](mine, root, comm, **options) is mine
                    comm.Bcast([theirs.view(np.uint8), MPI.BYTE], root)
                    if mine.tobytes() != theirs.tobytes():
                        wrong.append(f"{NAME} on {comm_name} (p={comm.size}) root={root} {options} "
                                     f"{dtype}{shape}: rank {world.rank} differs from MPI_Bcast")
                    checked += 1
    return {"checked": checked, "wrong": wrong, "left_registered": NAME in ALGORITHMS}
