"""Checked point-to-point messaging inside an ordered group of ranks.

Every algorithm is written against a ``Group``: an ordered list of ranks of a
communicator (all of it, or one node's ranks, or the node leaders in the
hierarchical algorithm). Algorithms address peers by their index in the group,
so the same code runs on any subset without creating communicators.

Every receive checks that the number of bytes that arrived is the number this
rank expected, and raises ``BcastSizeError`` on the rank that sees a
mismatch (ranks that passed buffers of different sizes) instead of silently
leaving part of the buffer stale. A pipeline's last chunk travels with a tag
of its own, so a mismatch by whole chunks (900 against 1200 bytes in chunks
of 300: every chunk the expected size) raises too, at the chunk where the
sender's and the receiver's ideas of "last" differ, instead of leaving the
longer rank waiting for a chunk that never comes. (An empty buffer is no
chunk at all, so a pipeline still misses an empty buffer against a full one:
marking it would cost every empty broadcast a message per hop.)

Broadcasts run on a private duplicate of the user's communicator
(``run_algorithm`` swaps in ``private_comm(comm)``): there chunks can be
received with ``MPI.ANY_TAG`` (to read which one is last) without ever
matching the user's own messages.

Device buffers (``gpulab.bcast.gpu``): on the "cuda-aware" path the group
hands device memory to MPI as is; on the "staged" path the algorithm runs on
a host mirror and the group calls the ``stager``'s hooks around each message
(copy out before the root sends, copy in after a rank receives). Trace events
say which path (``"path"``: "host", "cuda-aware" or "staged").
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Sequence

from gpulab.backend import mpi_view
from gpulab.bcast import trace
from gpulab.launch import lazy_mpi

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


# the user communicator's handle -> its private duplicate (a dict: 0.08 us a lookup against
# Get_attr's 0.3, on every broadcast); the attribute frees the duplicate, and forgets it so that a
# recycled handle is never mistaken for it, when the user's communicator is freed
_private: dict = {}


def _forget(comm: MPI.Comm, keyval: int, duplicate: MPI.Comm) -> None:
    del _private[comm.handle]
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


@dataclass
class Group:
    comm: MPI.Comm
    members: Sequence[int]  # comm ranks, in group order
    me: int  # my index in members
    algorithm: str = ""
    native: MPI.Comm | None = None  # a communicator of exactly these members, for MPI's own Bcast
    path: str = "host"  # how the buffer reaches MPI: "host", "cuda-aware" or "staged"
    stager: object | None = None  # gpulab.bcast.staging.Stager on the "staged" path

    @property
    def size(self) -> int:
        return len(self.members)

    def subgroup(self, members: Sequence[int], algorithm: str, native: MPI.Comm | None = None) -> "Group":
        return Group(self.comm, members, members.index(self.comm.rank), algorithm, native,
                     self.path, self.stager)

    def _event(self, dst: int, nbytes: int, phase: str, step: int) -> dict:
        return trace.record({"algorithm": self.algorithm, "phase": phase, "step": step,
                             "src": self.comm.rank, "dst": self.members[dst], "nbytes": nbytes,
                             "t_start": MPI.Wtime(), "t_end": None, "path": self.path})

    def send(self, dst: int, data, phase: str, step: int) -> None:
        if self.stager is not None:
            self.stager.before_send(data)
        event = self._event(dst, data.nbytes, phase, step) if trace.active() else None
        self.comm.Send(mpi_buffer(data), self.members[dst], TAG)
        if event:
            event["t_end"] = MPI.Wtime()

    def isend(self, dst: int, data, phase: str, step: int, last: bool = False) -> "Pending":
        """``last``: this is a pipeline's last chunk (sent with LAST_TAG)."""
        if self.stager is not None:
            self.stager.before_send(data)
        event = self._event(dst, data.nbytes, phase, step) if trace.active() else None
        tag = LAST_TAG if last else TAG
        return Pending(self.comm.Isend(mpi_buffer(data), self.members[dst], tag), event=event)

    def recv(self, src: int, data) -> None:
        self.irecv(src, data).wait()

    def irecv(self, src: int, data, last: bool | None = None) -> "Pending":
        """``last``: None for a whole message; for a pipeline's chunk, whether it is the last one.

        A chunk is received with any tag and ``wait()`` checks it; only a communicator
        that carries nothing but gpulab's broadcasts (``private_comm``) allows that.
        """
        on_done = None
        if self.stager is not None:
            self.stager.before_recv(data)
            on_done = lambda: self.stager.after_recv(data)  # noqa: E731
        tag = TAG if last is None else MPI.ANY_TAG
        request = self.comm.Irecv(mpi_buffer(data), self.members[src], tag)
        return Pending(request, expected=data.nbytes, peer=self.members[src], rank=self.comm.rank,
                       last=last, on_done=on_done)

    def sendrecv(self, dst: int, senddata, src: int, recvdata, phase: str, step: int) -> None:
        incoming = self.irecv(src, recvdata)
        self.isend(dst, senddata, phase, step).wait()
        incoming.wait()


@dataclass
class Pending:
    """A posted send or receive; ``wait()`` completes it and checks a receive's size."""

    request: MPI.Request
    expected: int | None = None  # bytes a receive must get; None for sends
    peer: int = -1
    rank: int = -1
    last: bool | None = None  # a pipeline chunk's receive: whether it must be the sender's last
    event: dict | None = None
    on_done: Callable[[], None] | None = None  # after a receive checked out (host staging's copy-in)

    def wait(self) -> None:
        status = MPI.Status()
        try:
            self.request.Wait(status)
        except MPI.Exception as error:
            if error.Get_error_class() == MPI.ERR_TRUNCATE:
                raise BcastSizeError(
                    f"rank {self.rank} expected {self.expected} bytes from rank {self.peer} but was "
                    f"sent more: do all ranks pass buffers of the same size?") from None
            raise
        if self.expected is not None:
            got = status.Get_count(MPI.BYTE)
            if got != self.expected:
                raise BcastSizeError(
                    f"rank {self.rank} expected {self.expected} bytes from rank {self.peer} but got "
                    f"{got}: do all ranks pass buffers of the same size?")
        if self.last is not None and (status.Get_tag() == LAST_TAG) != self.last:
            raise BcastSizeError(
                f"rank {self.rank} expected {self.expected} bytes from rank {self.peer} "
                + ("to end the message, but the sender had more" if self.last else
                   "and more after them, but the sender's message ended there")
                + ": do all ranks pass buffers of the same size?")
        if self.event is not None:
            self.event["t_end"] = MPI.Wtime()
        if self.on_done is not None:
            self.on_done()


def wait_all(pending: list[Pending]) -> None:
    for item in pending:
        item.wait()
