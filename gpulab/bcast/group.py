"""Checked point-to-point messaging inside an ordered group of ranks.

Every algorithm is written against a ``Group``: an ordered list of ranks of a
communicator (all of it, or one node's ranks, or the node leaders in the
hierarchical algorithm). Algorithms address peers by their index in the group,
so the same code runs on any subset without creating communicators.

Every receive checks that the number of bytes that arrived is the number this
rank expected, and raises ``BcastSizeError`` on the rank that sees a
mismatch (ranks that passed buffers of different sizes) instead of silently
leaving part of the buffer stale.

Device buffers (``gpulab.bcast.gpu``): on the "cuda-aware" path the group
hands device memory to MPI as is; on the "staged" path the algorithm runs on
a host mirror and the group calls the ``stager``'s hooks around each message
(copy out before the root sends, copy in after a rank receives). Trace events
say which path (``"path"``: "host", "cuda-aware" or "staged").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from mpi4py import MPI

from gpulab.bcast import trace

# One tag for all gpulab broadcast traffic: MPI's non-overtaking rule keeps
# successive broadcasts on one communicator apart without per-call tags.
TAG = 26466


class BcastSizeError(RuntimeError):
    """A rank received a different number of bytes than its own buffer expects."""


def mpi_buffer(data) -> list:
    """The ``[buffer, MPI.BYTE]`` spec for mpi4py.

    A fake device array (``gpulab.fakedevice``) opens only through its
    ``__gpulab_mpi_buffer__`` door, which refuses unless the simulated MPI is
    CUDA-aware and the stream is synchronized: mpi4py can never read it by accident.
    """
    door = getattr(data, "__gpulab_mpi_buffer__", None)
    return [data if door is None else door(), MPI.BYTE]


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

    def isend(self, dst: int, data, phase: str, step: int) -> "Pending":
        if self.stager is not None:
            self.stager.before_send(data)
        event = self._event(dst, data.nbytes, phase, step) if trace.active() else None
        return Pending(self.comm.Isend(mpi_buffer(data), self.members[dst], TAG), event=event)

    def recv(self, src: int, data) -> None:
        self.irecv(src, data).wait()

    def irecv(self, src: int, data) -> "Pending":
        on_done = None
        if self.stager is not None:
            self.stager.before_recv(data)
            on_done = lambda: self.stager.after_recv(data)  # noqa: E731
        request = self.comm.Irecv(mpi_buffer(data), self.members[src], TAG)
        return Pending(request, expected=data.nbytes, peer=self.members[src], rank=self.comm.rank,
                       on_done=on_done)

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
        if self.event is not None:
            self.event["t_end"] = MPI.Wtime()
        if self.on_done is not None:
            self.on_done()


def wait_all(pending: list[Pending]) -> None:
    for item in pending:
        item.wait()
