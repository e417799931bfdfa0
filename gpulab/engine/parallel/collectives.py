"""Collectives over one axis communicator: the only place the engine talks MPI.

They come as dual pairs, because the backward of one is the other:

    all_gather(shard)  forward  <->  reduce_scatter(grad)  backward   (weights over depth)
    all_reduce(partial) forward <->  (identity)            backward   (sums over col / row)

Each has a non-blocking twin (``iall_gather``, ``iall_reduce``,
``ireduce_scatter``) that returns a ``Handle``; ``handle.wait()`` gives the
result. All return at once (no copy, no MPI call) when the group has one
member, and take numpy or CuPy arrays (made contiguous). Device arrays reach
MPI directly when it is CUDA-aware, else staged through pinned host memory
(``gpulab.engine.parallel.exchange``); the path is in every traced call and timeline
event. ``all_reduce`` works in place on a contiguous array.

``with trace() as calls:`` records every call that reaches MPI as a dict
(op, group name, group size, nbytes = the size of the full buffer: the summed
array, the gathered result, the array to be scattered; path; sent_bytes and
received_bytes, what this rank puts on and takes off the wire with the
bandwidth-optimal ring algorithm: 2(p-1)/p of the buffer for all-reduce, (p-1)/p
for all-gather and reduce-scatter, the message for a send or receive, whatever
algorithm the MPI library picks for the call), which is how the
tests check ``gpulab.engine.perf.volume``'s byte counts against real runs. Inside
``gpulab.engine.parallel.timeline.record()`` every call also becomes a timed event.

Progress: MPICH moves a non-blocking collective forward only while the rank
is inside some MPI call. ``with polling():`` makes every compute kernel
(``timeline.kernel``) end with ``progress()``, an MPI_Test of each collective
in flight, so collectives advance between kernels instead of all at the final
``wait()``; ``ProgressThread`` enters MPI from a sleeping background thread
instead, so they advance during kernels too (docs/engine_overlap.md compares
both with MPICH's own progress thread).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from time import perf_counter

from gpulab.backend import array_module
from gpulab.engine.parallel import timeline
from gpulab.engine.parallel.exchange import Exchange
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())

_records: list | None = None
_in_flight: list[Handle] = []  # non-blocking collectives not yet seen complete
# set while ``_in_flight`` is not empty: a ProgressThread waits on it (without the GIL) in between
_pending = threading.Event()


@contextmanager
def trace():
    """Record the collectives issued inside the ``with`` block (this process only)."""
    global _records
    outer, _records = _records, []
    try:
        yield _records
    finally:
        _records = outer


def wire_bytes(op: str, size: int, nbytes: int) -> tuple[float, float]:
    """(sent, received) bytes of one rank in a ring collective over ``size`` ranks on a buffer of
    ``nbytes`` (for all-gather the gathered result, for reduce-scatter the array scattered)."""
    if op == "send":
        return float(nbytes), 0.0
    if op == "recv":
        return 0.0, float(nbytes)
    moved = (2 if op == "all_reduce" else 1) * (size - 1) / size * nbytes
    return moved, moved


def _note(op: str, comm, nbytes: int, path: str) -> None:
    if _records is not None:
        sent, received = wire_bytes(op, comm.Get_size(), int(nbytes))
        _records.append({"op": op, "group": comm.Get_name(), "size": comm.Get_size(),
                         "nbytes": int(nbytes), "path": path, "sent_bytes": sent, "received_bytes": received})


def _mpi():
    return MPI


def _op(name: str):
    MPI = _mpi()
    return {"sum": MPI.SUM, "max": MPI.MAX}[name]


def _blocking(op, comm, nbytes, ex: Exchange, call) -> None:
    start = perf_counter()
    call()
    ex.finish()
    tl = timeline.current()
    if tl is not None:
        end = perf_counter()
        tl.add("comm", start, end, op=op, group=comm.Get_name(), size=comm.Get_size(),
               nbytes=int(nbytes), path=ex.path, blocked=[[start, end]], **{"async": False})


class Handle:
    """A collective in flight; ``wait()`` completes it and returns the result."""

    def __init__(self, result, request=None, event: dict | None = None, tl=None, exchange=None):
        self._result, self._request, self._event, self._timeline = result, request, event, tl
        self._exchange = exchange
        if request is not None:
            _in_flight.append(self)
            _pending.set()

    def _done(self, blocked_from: float | None) -> None:
        self._exchange.finish()  # a staged result reaches the device here
        end = perf_counter()
        self._request = None
        _in_flight.remove(self)
        if not _in_flight:
            _pending.clear()
        if self._event is not None:  # recorded now: the event ends when completion was seen
            self._event["end"] = end
            if blocked_from is not None:
                self._event["blocked"].append([blocked_from, end])
            self._timeline.events.append(self._event)

    @property
    def nbytes(self) -> int:
        """Size of the result buffer (valid or not yet)."""
        return int(self._result.nbytes)

    def test(self) -> bool:
        """Let MPI progress; True once the collective is complete (then ``wait()`` is free)."""
        if self._request is not None and self._request.Test():
            self._done(None)
        return self._request is None

    def wait(self):
        if self._request is not None:
            start = perf_counter()
            self._request.Wait()
            self._done(start)
        return self._result


def _start(op, comm, nbytes, result, ex: Exchange, call) -> Handle:
    """Issue a non-blocking collective: ``call()`` returns its MPI request."""
    start = perf_counter()
    request = call()
    tl = timeline.current()
    event = None if tl is None else {
        "kind": "comm", "start": start, "end": None, "op": op, "group": comm.Get_name(),
        "size": comm.Get_size(), "nbytes": int(nbytes), "path": ex.path, "async": True,
        "blocked": [[start, perf_counter()]]}  # the call itself; the wait is added at the end
    return Handle(result, request, event, tl, ex)


def progress() -> None:
    """Test every collective in flight once (each MPI_Test also drives MPICH's progress engine)."""
    if not _in_flight:
        return
    start = perf_counter()
    for handle in list(_in_flight):
        handle.test()
    tl = timeline.current()
    if tl is not None:
        tl.add("poll", start, perf_counter())


@contextmanager
def polling(enabled: bool = True):
    """Inside the block, every ``timeline.kernel`` ends with ``progress()``."""
    outer = timeline.set_after_kernel(progress if enabled else None)
    try:
        yield
    finally:
        timeline.set_after_kernel(outer)


class ProgressThread:
    """A background thread that, while a non-blocking collective is in flight, enters MPI every
    ``interval`` seconds (MPI_Iprobe on a private copy of ``comm``): MPICH then advances every
    collective in flight while the main thread is inside a numpy kernel (which releases the GIL).
    It sleeps between probes, so unlike MPICH's own progress thread (MPIR_CVAR_ASYNC_PROGRESS=1,
    which spins) it does not take a core, and with nothing in flight it waits on an event without
    waking at all: each wake-up takes the GIL from the main thread, which on ranks that outnumber
    the cores can wait until the thread is scheduled (docs/engine_overlap.md has the A/B).

        progress = ProgressThread(mesh.comm)    # collective: every rank of comm
        with progress.running():
            ...                                 # overlapped work
        progress.free()
    """

    def __init__(self, comm, interval: float = 1e-3):
        self.comm, self.interval = comm.Dup(), interval

    def _loop(self, stop) -> None:
        while True:
            _pending.wait()  # a blocking wait: no GIL, no wake-ups while nothing is in flight
            if stop.is_set():
                return
            self.comm.Iprobe()
            time.sleep(self.interval)

    @contextmanager
    def running(self):
        stop = threading.Event()
        thread = threading.Thread(target=self._loop, args=(stop,), daemon=True, name="gpulab-progress")
        thread.start()
        try:
            yield
        finally:
            stop.set()
            _pending.set()  # wake the thread to see the stop
            thread.join()
            if not _in_flight:
                _pending.clear()

    def free(self) -> None:
        self.comm.Free()


def in_flight() -> int:
    """How many non-blocking collectives this process has not yet seen complete."""
    return len(_in_flight)


def _reduce_setup(x, comm):
    x = array_module(x).ascontiguousarray(x)
    ex = Exchange(x)
    _note("all_reduce", comm, x.nbytes, ex.path)
    return x, ex, ex.inout(x)


def all_reduce(x, comm, op: str = "sum"):
    """Sum (or max) ``x`` over the group, in place; returns the (contiguous) result."""
    if comm.Get_size() == 1:
        return x
    x, ex, buf = _reduce_setup(x, comm)
    _blocking("all_reduce", comm, x.nbytes, ex, lambda: comm.Allreduce(_mpi().IN_PLACE, buf, op=_op(op)))
    return x


def iall_reduce(x, comm, op: str = "sum") -> Handle:
    if comm.Get_size() == 1:
        return Handle(x)
    x, ex, buf = _reduce_setup(x, comm)
    return _start("all_reduce", comm, x.nbytes, x, ex, lambda: comm.Iallreduce(_mpi().IN_PLACE, buf, op=_op(op)))


def _gather_setup(shard, comm):
    xp = array_module(shard)
    shard = xp.ascontiguousarray(shard).reshape(-1)
    out = xp.empty(shard.size * comm.Get_size(), dtype=shard.dtype)  # member i's part at i*n
    ex = Exchange(shard)
    _note("all_gather", comm, out.nbytes, ex.path)
    return out, ex, ex.send(shard), ex.recv(out)


def all_gather(shard, comm):
    """Concatenate every member's 1-D ``shard`` (same size on all) in group-rank order."""
    if comm.Get_size() == 1:
        return shard.reshape(-1)
    out, ex, send, recv = _gather_setup(shard, comm)
    _blocking("all_gather", comm, out.nbytes, ex, lambda: comm.Allgather(send, recv))
    return out


def iall_gather(shard, comm) -> Handle:
    if comm.Get_size() == 1:
        return Handle(shard.reshape(-1))
    out, ex, send, recv = _gather_setup(shard, comm)
    return _start("all_gather", comm, out.nbytes, out, ex, lambda: comm.Iallgather(send, recv))


def _scatter_setup(flat, comm):
    xp = array_module(flat)
    size = comm.Get_size()
    if flat.size % size:
        raise ValueError(f"reduce_scatter: buffer of {flat.size} values does not split evenly "
                         f"over {size} ranks")
    flat = xp.ascontiguousarray(flat).reshape(-1)
    out = xp.empty(flat.size // size, dtype=flat.dtype)
    ex = Exchange(flat)
    _note("reduce_scatter", comm, flat.nbytes, ex.path)
    return flat, out, ex, ex.send(flat), ex.recv(out)


def reduce_scatter(flat, comm):
    """Sum ``flat`` over the group and keep this member's 1/size slice (block i on member i)."""
    if comm.Get_size() == 1:
        return flat.reshape(-1)
    flat, out, ex, send, recv = _scatter_setup(flat, comm)
    _blocking("reduce_scatter", comm, flat.nbytes, ex, lambda: comm.Reduce_scatter_block(send, recv, op=_op("sum")))
    return out


def ireduce_scatter(flat, comm) -> Handle:
    if comm.Get_size() == 1:
        return Handle(flat.reshape(-1))
    flat, out, ex, send, recv = _scatter_setup(flat, comm)
    return _start("reduce_scatter", comm, flat.nbytes, out, ex,
                  lambda: comm.Ireduce_scatter_block(send, recv, op=_op("sum")))
