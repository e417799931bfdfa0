"""A communicator for a learner's code: Send/Recv that log every message and give up at a deadline.

    with Traffic(comm, seconds=10) as t:     # on every rank
        learner_bcast(buf, root, t.comm)    # t.comm.Send / Recv / Isend / Irecv / Sendrecv
    log = t.log                             # this rank's sends and receives, in order

A learner's wrong broadcast usually leaves a rank waiting for a message that
never comes. Here every wait ends at the deadline with ``Stuck`` (naming the
peer and the tag waited for), so a check can say what went wrong instead of
hanging. On leaving the block all ranks receive whatever was sent but never
received (each such message is logged, with its sender and size), so nothing
stays in flight, then the private communicator is freed.
"""

from __future__ import annotations

import time

import numpy as np

from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())
POLL = 1e-4  # seconds between tests of a pending request: short against a message, long against a core


class Stuck(RuntimeError):
    """A receive or send of the learner's code did not complete by the deadline (``event``: its log entry)."""

    def __init__(self, message: str, event: dict | None = None):
        super().__init__(message)
        self.event = event


class ExerciseRule(AttributeError):
    """The learner called something the exercise does not provide (a collective in a Send/Recv exercise)."""


def _buffer(buf):
    """(mpi4py buffer spec, the array) for an array or an [array, MPI type] list."""
    array = buf[0] if isinstance(buf, (list, tuple)) else buf
    return buf, np.asarray(array)


def _offset(array: np.ndarray, base: np.ndarray | None) -> int | None:
    """Where ``array``'s memory starts inside ``base``'s, in bytes (None when it is not inside)."""
    if base is None:
        return None
    start = array.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return start if 0 <= start and start + array.nbytes <= base.nbytes else None


class Request:
    """A pending Isend/Irecv of the learner: ``Wait()`` completes it, or raises Stuck at the deadline."""

    def __init__(self, traffic: Traffic, request, event: dict):
        self.traffic, self.request, self.event = traffic, request, event

    def Test(self) -> bool:
        return self.request.Test()

    def Wait(self) -> None:
        self.traffic._wait(self.request, self.event)

    wait = Wait


class LoggedComm:
    """What the learner's function gets: rank, size and point-to-point calls, logged and bounded."""

    def __init__(self, traffic: Traffic):
        self._t = traffic
        self.rank, self.size = traffic.comm_dup.Get_rank(), traffic.comm_dup.Get_size()

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.size

    def Send(self, buf, dest: int, tag: int = 0) -> None:
        self.Isend(buf, dest, tag).Wait()

    def Isend(self, buf, dest: int, tag: int = 0) -> Request:
        spec, array = _buffer(buf)
        event = self._t._note("send", dest, tag, array)
        request = self._t.comm_dup.Isend(spec, dest=dest, tag=tag)
        self._t.sends.append(request)
        return Request(self._t, request, event)

    def Recv(self, buf, source: int, tag: int = 0, status=None) -> None:
        self.Irecv(buf, source, tag).Wait()

    def Irecv(self, buf, source: int, tag: int = 0) -> Request:
        spec, array = _buffer(buf)
        event = self._t._note("recv", source, tag, array)
        return Request(self._t, self._t.comm_dup.Irecv(spec, source=source, tag=tag), event)

    def Sendrecv(self, sendbuf, dest: int, sendtag: int = 0, recvbuf=None, source: int = 0,
                 recvtag: int = 0) -> None:
        out = self.Isend(sendbuf, dest, sendtag)
        self.Recv(recvbuf, source, recvtag)
        out.Wait()

    def __getattr__(self, name: str):
        raise ExerciseRule(f"this exercise gives your function Send, Recv, Isend, Irecv and Sendrecv "
                           f"(and rank, size); comm.{name} is not part of it")


class Traffic:
    """This rank's logged, bounded point-to-point calls on a private duplicate of ``comm`` (a context manager)."""

    def __init__(self, comm, seconds: float = 10.0, base: np.ndarray | None = None):
        self.parent, self.seconds, self.base = comm, seconds, base
        self.log: list[dict] = []  # {"kind", "peer", "tag", "nbytes", "offset", "done", "seq"}
        self.unreceived: list[dict] = []  # messages to this rank that its code never received
        self.sends: list = []

    def __enter__(self) -> Traffic:
        self.comm_dup = self.parent.Dup()
        self.parent.Barrier()  # one start for every rank's deadline
        self.deadline = time.monotonic() + self.seconds
        self.comm = LoggedComm(self)
        return self

    def _note(self, kind: str, peer: int, tag: int, array: np.ndarray) -> dict:
        size = self.comm_dup.Get_size()
        if not isinstance(peer, (int, np.integer)) or not 0 <= peer < size:
            raise ValueError(f"{kind} {'to' if kind == 'send' else 'from'} rank {peer!r}: "
                             f"the ranks are 0..{size - 1}")
        event = {"kind": kind, "peer": int(peer), "tag": int(tag), "nbytes": int(array.nbytes),
                 "offset": _offset(array, self.base), "done": False, "seq": len(self.log)}
        self.log.append(event)
        return event

    def _wait(self, request, event: dict) -> None:
        while not request.Test():
            if time.monotonic() > self.deadline:
                if event["kind"] == "recv":
                    request.Cancel()
                    status = MPI.Status()
                    request.Wait(status)
                    if not status.Is_cancelled():  # it arrived just now
                        break
                raise Stuck(f"{'sending to' if event['kind'] == 'send' else 'receiving from'} rank "
                            f"{event['peer']} (tag {event['tag']}, {event['nbytes']} B) did not complete "
                            f"within {self.seconds:g} s", event)
            time.sleep(POLL)
        event["done"] = True

    def __exit__(self, *exc) -> None:
        self._drain()
        self.comm_dup.Free()

    def _drain(self, seconds: float = 30.0) -> None:
        """Receive every message still in flight on the private communicator, logging it, until all ranks
        together have received as many messages as they sent (every rank takes part; a rank whose code
        raised has stopped sending)."""
        status, give_up = MPI.Status(), time.monotonic() + seconds
        received = sum(e["done"] for e in self.log if e["kind"] == "recv")
        while True:
            while self.comm_dup.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, status):
                scratch = np.empty(status.Get_count(MPI.BYTE), np.uint8)
                self.comm_dup.Recv([scratch, MPI.BYTE], status.Get_source(), status.Get_tag())
                self.unreceived.append({"src": status.Get_source(), "tag": status.Get_tag(),
                                        "nbytes": int(scratch.nbytes)})
            if self.parent.allreduce(len(self.sends) - received - len(self.unreceived)) == 0:
                return
            if time.monotonic() > give_up:
                raise Stuck("messages still in flight after the check drained the communicator")
            time.sleep(POLL)
