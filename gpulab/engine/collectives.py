"""Collectives over one axis communicator: the only place the engine talks MPI.

They come as dual pairs, because the backward of one is the other:

    all_gather(shard)  forward  <->  reduce_scatter(grad)  backward   (weights over depth)
    all_reduce(partial) forward <->  (identity)            backward   (sums over col / row)

Each has a non-blocking twin (``iall_gather``, ``iall_reduce``,
``ireduce_scatter``) that returns a ``Handle``; ``handle.wait()`` gives the
result. All return at once (no copy, no MPI call) when the group has one
member, take numpy or CuPy arrays (made contiguous), and synchronize the CUDA
stream before handing a device buffer to MPI. ``all_reduce`` works in place
on a contiguous array.

``with trace() as calls:`` records every call that reaches MPI as a dict
(op, group name, group size, nbytes = the size of the full buffer: the summed
array, the gathered result, the array to be scattered), which is how the
tests check ``gpulab.engine.volume``'s byte counts against real runs.
"""

from __future__ import annotations

from contextlib import contextmanager

from gpulab.backend import array_module, synchronize

_records: list | None = None


@contextmanager
def trace():
    """Record the collectives issued inside the ``with`` block (this process only)."""
    global _records
    outer, _records = _records, []
    try:
        yield _records
    finally:
        _records = outer


def _note(op: str, comm, nbytes: int) -> None:
    if _records is not None:
        _records.append({"op": op, "group": comm.Get_name(), "size": comm.Get_size(),
                         "nbytes": int(nbytes)})


def _mpi():
    from mpi4py import MPI  # imported on first use: the CLI must stay free of MPI at import

    return MPI


def _op(name: str):
    MPI = _mpi()
    return {"sum": MPI.SUM, "max": MPI.MAX}[name]


class Handle:
    """A collective in flight; ``wait()`` completes it and returns the result."""

    def __init__(self, result, request=None):
        self._result, self._request = result, request

    def wait(self):
        if self._request is not None:
            self._request.Wait()
            self._request = None
        return self._result


def all_reduce(x, comm, op: str = "sum"):
    """Sum (or max) ``x`` over the group, in place; returns the (contiguous) result."""
    if comm.Get_size() == 1:
        return x
    x = array_module(x).ascontiguousarray(x)
    _note("all_reduce", comm, x.nbytes)
    synchronize(x)
    comm.Allreduce(_mpi().IN_PLACE, x, op=_op(op))
    return x


def iall_reduce(x, comm, op: str = "sum") -> Handle:
    if comm.Get_size() == 1:
        return Handle(x)
    x = array_module(x).ascontiguousarray(x)
    _note("all_reduce", comm, x.nbytes)
    synchronize(x)
    return Handle(x, comm.Iallreduce(_mpi().IN_PLACE, x, op=_op(op)))


def _gather_setup(shard, comm):
    xp = array_module(shard)
    shard = xp.ascontiguousarray(shard).reshape(-1)
    out = xp.empty(shard.size * comm.Get_size(), dtype=shard.dtype)  # member i's part at i*n
    _note("all_gather", comm, out.nbytes)
    synchronize(shard)
    return shard, out


def all_gather(shard, comm):
    """Concatenate every member's 1-D ``shard`` (same size on all) in group-rank order."""
    if comm.Get_size() == 1:
        return shard.reshape(-1)
    shard, out = _gather_setup(shard, comm)
    comm.Allgather(shard, out)
    return out


def iall_gather(shard, comm) -> Handle:
    if comm.Get_size() == 1:
        return Handle(shard.reshape(-1))
    shard, out = _gather_setup(shard, comm)
    return Handle(out, comm.Iallgather(shard, out))


def _scatter_setup(flat, comm):
    xp = array_module(flat)
    size = comm.Get_size()
    if flat.size % size:
        raise ValueError(f"reduce_scatter: buffer of {flat.size} values does not split evenly "
                         f"over {size} ranks")
    flat = xp.ascontiguousarray(flat).reshape(-1)
    out = xp.empty(flat.size // size, dtype=flat.dtype)
    _note("reduce_scatter", comm, flat.nbytes)
    synchronize(flat)
    return flat, out


def reduce_scatter(flat, comm):
    """Sum ``flat`` over the group and keep this member's 1/size slice (block i on member i)."""
    if comm.Get_size() == 1:
        return flat.reshape(-1)
    flat, out = _scatter_setup(flat, comm)
    comm.Reduce_scatter_block(flat, out, op=_op("sum"))
    return out


def ireduce_scatter(flat, comm) -> Handle:
    if comm.Get_size() == 1:
        return Handle(flat.reshape(-1))
    flat, out = _scatter_setup(flat, comm)
    return Handle(out, comm.Ireduce_scatter_block(flat, out, op=_op("sum")))
