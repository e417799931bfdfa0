"""Sequence parallelism's two collectives: (b, T, c) arrays cut along the sequence T over a group.

    part = reduce_scatter_seq(y, row_comm)   # sum over the group, keep this member's T/size positions
    full = all_gather_seq(part, row_comm)    # every member's positions again, in order: (b, T, c)

Megatron-LM's sequence parallelism (Korthikanti et al. 2022) replaces the
tensor-parallel group's all-reduce by these two: the reduce-scatter where the
sum is taken, the all-gather where the next layer needs every position. A
ring all-reduce is exactly a reduce-scatter followed by an all-gather, so the
bytes are the same; what changes is that between the two every member keeps
only its T/size positions (LayerNorm, residual, dropout work on them alone).
The member of group rank i holds positions [i T/size, (i+1) T/size).
"""

from __future__ import annotations

from gpulab.backend import array_module
from gpulab.engine.parallel import collectives as coll


def local_positions(T: int, comm) -> slice:
    """The positions this member holds."""
    n = T // comm.Get_size()
    return slice(comm.Get_rank() * n, (comm.Get_rank() + 1) * n)


def reduce_scatter_seq(x, comm):
    """(b, T, c), partial over ``comm`` -> (b, T/size, c), summed, this member's positions."""
    size = comm.Get_size()
    if size == 1:
        return x
    b, T, c = x.shape
    xp = array_module(x)
    flat = xp.ascontiguousarray(x.transpose(1, 0, 2)).reshape(-1)  # T outermost: chunk i = positions of i
    return coll.reduce_scatter(flat, comm).reshape(T // size, b, c).transpose(1, 0, 2)


def all_gather_seq(x, comm):
    """(b, T/size, c) on every member -> (b, T, c), positions in group-rank order."""
    size = comm.Get_size()
    if size == 1:
        return x
    b, t, c = x.shape
    xp = array_module(x)
    flat = xp.ascontiguousarray(x.transpose(1, 0, 2)).reshape(-1)
    return coll.all_gather(flat, comm).reshape(t * size, b, c).transpose(1, 0, 2)
