"""Schedules and the one executor that runs them, inside an ordered group of ranks.

Every algorithm describes what one rank does as a *schedule*: a tuple of
``Op``s (send, receive, ... with the peer, the byte range, whether a chunk is
a pipeline's last, and the phase and step a trace shows), computed once per
(algorithm, p, root, rank, size, options) and cached by the algorithm's
module. ``execute`` runs one; it is the only code that calls MPI for
gpulab's own algorithms, so what runs, the trace and the drawings of it agree.

A ``Group`` is an ordered list of ranks of a communicator (all of it, or one
node's ranks, or the node leaders in the hierarchical algorithm).
Schedules address peers by their index in the group, so the same schedule
runs on any subset without creating communicators (``Group.ranks`` maps them).

Every receive checks that the number of bytes that arrived is the number this
rank expected (from the receive's status), and raises ``BcastSizeError`` on the
rank that sees a mismatch (ranks that passed buffers of different sizes) instead of silently
leaving part of the buffer stale. A pipeline's last chunk travels with a tag
of its own, so a mismatch by whole chunks (900 against 1200 bytes in chunks
of 300: every chunk the expected size) raises too, at the chunk where the
sender's and the receiver's ideas of "last" differ, instead of leaving the
longer rank waiting for a chunk that never comes. (An empty buffer is no
chunk at all, so a pipeline still misses an empty buffer against a full one:
marking it would cost every empty broadcast a message per hop.)

gpulab's algorithms run on a private duplicate of the user's communicator
(``private_comm(comm)``): there chunks can be received with ``MPI.ANY_TAG``
(to read which one is last) without ever matching the user's own messages.
MPI's own Bcast (``Group.native``) is a collective and runs on the user's
communicator itself, as a program calling it directly would.

Device buffers (``gpulab.bcast.runtime.gpu``): on the "cuda-aware" path the executor
hands device memory to MPI as is; on the "staged" path the schedule runs on
a host mirror and the executor calls the ``stager``'s hooks around each message
(copy out before the root sends, copy in after a rank receives). Trace events
say which path (``"path"``: "host", "cuda-aware" or "staged").
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from gpulab.backend import mpi_view
from gpulab.bcast.runtime import trace, waiting
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())

# One tag for all gpulab broadcast traffic but a pipeline's last chunk: MPI's non-overtaking
# rule keeps successive broadcasts on one communicator apart without per-call tags.
TAG = 26466
LAST_TAG = 26468


class BcastSizeError(RuntimeError):
    """A rank received a different number of bytes than its own buffer expects."""


def mpi_buffer(data) -> list:
    """The ``[buffer, MPI.BYTE]`` spec for mpi4py (fake device arrays through their door, ``mpi_view``)."""
    return [mpi_view(data), MPI.BYTE]


# the user communicator's handle -> its private duplicate (a dict: cheaper than Get_attr, on every
# broadcast); the attribute frees the duplicate, and forgets it so that a recycled handle is never
# mistaken for it, when the user's communicator is freed
_private: dict = {}
on_free: list = []  # what else to forget when a user's communicator is freed (cached plans)


def _forget(comm: MPI.Comm, keyval: int, duplicate: MPI.Comm) -> None:
    del _private[comm.handle]
    for forget in on_free:
        forget()
    duplicate.Free()


@functools.cache
def _freed_with() -> int:
    """The attribute key whose deletion (when the user's communicator is freed) frees the duplicate."""
    return MPI.Comm.Create_keyval(delete_fn=_forget)


def private_comm(comm: MPI.Comm) -> MPI.Comm:
    """The duplicate of ``comm`` that carries gpulab's broadcasts (``Dup``, collective, on the
    first broadcast over ``comm``; looked up afterwards)."""
    duplicate = _private.get(comm.handle)
    if duplicate is None:
        duplicate = _private[comm.handle] = comm.Dup()
        comm.Set_attr(_freed_with(), duplicate)
    return duplicate


# What a schedule's operation does (``Op.kind``):
SEND = "send"  # blocking Send: the next operation waits until the buffer may be reused
ISEND = "isend"  # Isend, completed by the next WAITALL (or at the end): sends that overlap
RECV = "recv"  # blocking Recv, checked
POST = "post"  # Irecv posted ahead of time (a pipeline's receive window) ...
WAIT = "wait"  # ... completed, oldest first, and checked here
SENDRECV = "sendrecv"  # one Sendrecv: send [lo, hi) to peer while receiving [rlo, rhi) from src
WAITALL = "waitall"  # complete every ISEND so far


class Op(NamedTuple):
    """One step of one rank's part of a broadcast; peers are ranks of the group's communicator.

    ``last``: None for a whole message (sent and received with TAG); for a
    pipeline's chunk, whether it is the message's last (LAST_TAG; its receive
    takes any tag and checks which). ``phase`` and ``step`` are what a trace
    records for a send. A schedule is a tuple of these, in the order a rank runs them.
    """

    kind: str
    peer: int
    lo: int
    hi: int
    last: bool | None = None
    phase: str = ""
    step: int = 0
    src: int = -1  # SENDRECV only: the rank received from, into [rlo, rhi)
    rlo: int = 0
    rhi: int = 0


@dataclass
class Group:
    """An ordered list of ranks of ``comm`` that runs schedules; ``me`` is my index in ``members``."""

    comm: MPI.Comm
    members: Sequence[int]  # comm ranks, in group order
    me: int  # my index in members
    algorithm: str = ""
    native: MPI.Comm | None = None  # a communicator of exactly these members, for MPI's own Bcast
    path: str = "host"  # how the buffer reaches MPI: "host", "cuda-aware" or "staged"
    stager: object | None = None  # gpulab.bcast.runtime.staging.Stager on the "staged" path
    # the receives' status, made once: a remembered broadcast reuses its Group (one broadcast at a time)
    status: MPI.Status = field(default_factory=lambda: MPI.Status(), repr=False, compare=False)

    @property
    def size(self) -> int:
        return len(self.members)

    def subgroup(self, members: Sequence[int], algorithm: str, native: MPI.Comm | None = None) -> Group:
        return Group(self.comm, members, members.index(self.comm.rank), algorithm, native,
                     self.path, self.stager)

    def ranks(self, schedule: tuple[Op, ...]) -> tuple[Op, ...]:
        """A schedule written in group indices, with communicator ranks as peers."""
        if isinstance(self.members, range) and self.members.start == 0:
            return schedule
        return _to_ranks(schedule, tuple(self.members))

    def send(self, dst: int, data, phase: str, step: int) -> None:
        """One blocking send to group index ``dst`` (what the ping-pong of ``measurement.pingpong_fit`` times)."""
        execute(self, (Op(SEND, self.members[dst], 0, data.nbytes, None, phase, step),), data)

    def recv(self, src: int, data) -> None:
        """One checked blocking receive from group index ``src``."""
        execute(self, (Op(RECV, self.members[src], 0, data.nbytes),), data)


@functools.lru_cache(maxsize=4096)
def _to_ranks(schedule: tuple[Op, ...], members: tuple[int, ...]) -> tuple[Op, ...]:
    return tuple(op._replace(peer=members[op.peer], src=members[op.src] if op.src >= 0 else -1)
                 for op in schedule)


def _size_error(rank: int, op: Op, got: int | None) -> BcastSizeError:
    """The error a rank raises when a receive does not match its own buffer (``got`` None: truncated;
    the size right: the chunk's last-tag was not the one expected)."""
    peer, expected = (op.src, op.rhi - op.rlo) if op.kind == SENDRECV else (op.peer, op.hi - op.lo)
    if got is None:
        return BcastSizeError(f"rank {rank} expected {expected} bytes from rank {peer} but was "
                              f"sent more: do all ranks pass buffers of the same size?")
    if got != expected:
        return BcastSizeError(f"rank {rank} expected {expected} bytes from rank {peer} but got "
                              f"{got}: do all ranks pass buffers of the same size?")
    return BcastSizeError(f"rank {rank} expected {expected} bytes from rank {peer} "
                          + ("to end the message, but the sender had more" if op.last else
                             "and more after them, but the sender's message ended there")
                          + ": do all ranks pass buffers of the same size?")


def execute(g: Group, schedule: tuple[Op, ...], data) -> None:
    """Run this rank's ``schedule`` on the byte view ``data`` (peers are ranks of ``g.comm``).

    The loop is the broadcast's whole per-message cost in Python, so it does
    little: one MPI call, one status read and two comparisons per receive.
    Trace events and the staging hooks cost only when they are on.
    """
    if not schedule:
        return
    comm, status, any_tag, byte = g.comm, g.status, MPI.ANY_TAG, MPI.BYTE
    wait, wait_all = waiting.waiter(waiting.mode())
    events = [] if trace.active() else None
    hooks = g.stager is not None or events is not None
    if type(data) is memoryview:  # a host array's bytes, exported once (the repeated broadcast)
        buf = data
    else:
        buf = mpi_view(data)  # once: the door of a fake device array is not free
        if isinstance(buf, np.ndarray):
            buf = memoryview(buf)  # slices at half numpy's cost; a CuPy array goes to MPI as it is
    sends, posted, sent_events = [], deque(), []
    op = None
    try:
        for op in schedule:
            kind, peer, lo, hi, last, _, _, src, rlo, rhi = op
            if hooks:
                _before(g, op, data, events, sent_events)
            if kind == SEND:
                comm.Send(buf[lo:hi], peer, LAST_TAG if last else TAG)
            elif kind == ISEND:
                sends.append(comm.Isend(buf[lo:hi], peer, LAST_TAG if last else TAG))
            elif kind == RECV:
                comm.Recv(buf[lo:hi], peer, TAG, status)
                if status.Get_count(byte) != hi - lo:
                    raise _size_error(comm.rank, op, status.Get_count(byte))
            elif kind == POST:
                posted.append(comm.Irecv(buf[lo:hi], peer, any_tag))
            elif kind == WAIT:
                wait(posted.popleft(), status)
                if status.Get_count(byte) != hi - lo or (status.Get_tag() == LAST_TAG) != last:
                    raise _size_error(comm.rank, op, status.Get_count(byte))
            elif kind == SENDRECV:
                comm.Sendrecv(buf[lo:hi], peer, TAG, buf[rlo:rhi], src, TAG, status)
                if status.Get_count(byte) != rhi - rlo:
                    raise _size_error(comm.rank, op, status.Get_count(byte))
            else:  # WAITALL
                _complete(sends, sent_events, wait_all)
            if hooks:
                _after(g, op, data, events)
        _complete(sends, sent_events, wait_all)
    except MPI.Exception as error:
        if error.Get_error_class() == MPI.ERR_TRUNCATE:
            raise _size_error(comm.rank, op, None) from None
        raise
    finally:
        if events:
            trace.extend(events)


def host_bytes(buf: np.ndarray) -> memoryview | None:
    """A writable C-contiguous host array's bytes as one flat memoryview, else None (an array holding
    Python objects too: its bytes are pointers, meaningless on another rank).

    One buffer export per call, which MPI then reuses: a byte view through numpy
    (``byte_view``) costs a reshape, a view and another export per message.
    """
    if buf.dtype.hasobject:
        return None
    try:
        view = memoryview(buf)
    except ValueError:  # a dtype with no buffer format (datetime64)
        return None
    if view.readonly or not view.c_contiguous:
        return None
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def runner(g: Group, schedule: tuple[Op, ...], nbytes: int):
    """What a repeated broadcast of ``nbytes`` calls with a host array: ``run(buf) -> bool``, False
    when nothing was sent (a read-only or strided array: the full checks then say what is wrong).

    The plan's runner of gpulab.bcast.runtime.fastpath: a schedule of blocking sends and receives
    only gets a loop as lean as a tree written by hand in mpi4py (steps unpacked once, the array
    itself handed to MPI when every message is the whole buffer, a single message without the loop);
    anything else is ``execute`` itself. It records no trace: no runner is made while tracing is on.
    """
    def in_bytes(buf) -> bool:
        data = host_bytes(buf)
        if data is None:
            return False
        execute(g, schedule, data)
        return True

    if g.stager is not None or not schedule or any(op.kind not in (SEND, RECV) for op in schedule):
        return in_bytes
    steps = tuple((op.kind == SEND, op.peer, None if (op.lo, op.hi) == (0, nbytes) else slice(op.lo, op.hi),
                   op.hi - op.lo, LAST_TAG if op.last else TAG, op) for op in schedule)
    send, recv, status, rank = g.comm.Send, g.comm.Recv, g.status, g.comm.rank
    count, byte = status.Get_count, MPI.BYTE
    refused = (BufferError, KeyError, ValueError)  # mpi4py, before any message: a dtype it cannot map

    def truncated(error, op):
        if error.Get_error_class() == MPI.ERR_TRUNCATE:
            return _size_error(rank, op, None)
        return error

    if len(steps) == 1 and steps[0][2] is None:
        is_send, peer, _, size, tag, op = steps[0]
        if is_send:
            def run(buf) -> bool:
                if not buf.flags.carray:  # not C-contiguous, writable and aligned
                    return in_bytes(buf)
                try:
                    send(buf, peer, tag)
                except refused:
                    return in_bytes(buf)
                return True
        else:
            def run(buf) -> bool:
                if not buf.flags.carray:  # not C-contiguous, writable and aligned
                    return in_bytes(buf)
                try:
                    recv(buf, peer, TAG, status)
                except refused:
                    return in_bytes(buf)
                except MPI.Exception as error:
                    raise truncated(error, op) from None
                if count(byte) != size:
                    raise _size_error(rank, op, count(byte))
                return True
        return run

    whole = all(part is None for _, _, part, _, _, _ in steps)

    def run(buf) -> bool:
        if whole:
            if not buf.flags.carray:
                return in_bytes(buf)
            data = buf
        else:
            data = host_bytes(buf)
            if data is None:
                return False
        op = None
        try:
            for is_send, peer, part, size, tag, op in steps:
                if is_send:
                    send(data if part is None else data[part], peer, tag)
                else:
                    recv(data if part is None else data[part], peer, TAG, status)
                    if count(byte) != size:
                        raise _size_error(rank, op, count(byte))
        except refused:
            if op is not steps[0][5] or data is not buf:
                raise
            return in_bytes(buf)  # the array's dtype has no MPI name: its bytes, before any message
        except MPI.Exception as error:
            raise truncated(error, op) from None
        return True

    return run


def c_plan(c, g: Group, schedule: tuple[Op, ...], nbytes: int):
    """The C entry's copy of a schedule (gpulab.bcast.runtime.fastpath), for what it runs as ``runner``
    does: blocking sends and receives of the whole buffer (or none: a one-rank communicator), no
    stager; None for anything else."""
    if c is None or g.stager is not None or nbytes > 2**31 - 1 or any(
            op.kind not in (SEND, RECV) or (op.lo, op.hi) != (0, nbytes) for op in schedule):
        return None
    rank = g.comm.rank
    # each step's tag as ``runner`` uses it: a send's own, TAG for every receive
    steps = tuple((op.kind == SEND, op.peer, (LAST_TAG if op.last else TAG) if op.kind == SEND else TAG)
                  for op in schedule)
    return c.make_plan(g.comm, steps, nbytes, lambda step, got: _size_error(rank, schedule[step], got))


def _complete(sends: list, sent_events: list, wait_all) -> None:
    if sends:
        wait_all(sends)
        sends.clear()
    if sent_events:
        end = MPI.Wtime()
        for event in sent_events:
            event["t_end"] = end
        sent_events.clear()


def _before(g: Group, op: Op, data, events: list | None, sent_events: list) -> None:
    """The staging hooks before a message, and its trace event (senders record, once each)."""
    kind = op.kind
    if kind in (SEND, ISEND, SENDRECV):
        if g.stager is not None:
            g.stager.before_send(data[op.lo:op.hi])
        if events is not None:
            events.append({"algorithm": g.algorithm, "phase": op.phase, "step": op.step,
                           "src": g.comm.rank, "dst": op.peer, "nbytes": op.hi - op.lo,
                           "t_start": MPI.Wtime(), "t_end": None, "path": g.path})
            if kind == ISEND:
                sent_events.append(events[-1])
    if g.stager is not None and kind in (RECV, POST, SENDRECV):
        g.stager.before_recv(data[op.rlo:op.rhi] if kind == SENDRECV else data[op.lo:op.hi])


def _after(g: Group, op: Op, data, events: list | None) -> None:
    """A finished receive's copy-in (staged path); a finished blocking send's end time (trace)."""
    kind = op.kind
    if events is not None and kind in (SEND, SENDRECV):
        events[-1]["t_end"] = MPI.Wtime()
    if g.stager is not None and kind in (RECV, WAIT, SENDRECV):
        g.stager.after_recv(data[op.rlo:op.rhi] if kind == SENDRECV else data[op.lo:op.hi])
