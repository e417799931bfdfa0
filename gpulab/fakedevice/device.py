"""The fake GPU's streams, events and copies (see ``gpulab.fakedevice``)."""

from __future__ import annotations

import os
from collections import deque

import numpy as np

POISON = 0xA5  # what an uninitialised staging buffer holds


def _kernel_mark() -> None:
    """The queue entry of a kernel: its math already ran eagerly; this marks the stream busy."""


class FakeStream:
    """An in-order queue of copies (and kernel marks) that run only when something waits for them."""

    def __init__(self, name: str = "stream"):
        self.name, self._queue, self._done = name, deque(), 0

    def enqueue(self, op) -> None:
        self._queue.append(op)

    def run_until(self, count: int) -> None:
        while self._done < count:
            op = self._queue.popleft()
            self._done += 1
            op()

    @property
    def issued(self) -> int:
        return self._done + len(self._queue)

    def synchronize(self) -> None:
        self.run_until(self.issued)

    @property
    def pending(self) -> int:
        return len(self._queue)


class FakeEvent:
    """A mark in a stream; ``synchronize()`` runs the stream's work up to the mark."""

    def __init__(self, stream: FakeStream):
        self._stream, self._mark = stream, stream.issued

    def synchronize(self) -> None:
        self._stream.run_until(self._mark)


class FakeDevice:
    """The device protocol (see ``gpulab.backend.CupyDevice``) for fake device memory."""

    kind = "fake"

    def __init__(self):
        self.current = FakeStream("current")

    @property
    def mpi_cuda_aware(self) -> bool:
        """Whether the simulated MPI library reads device memory (``GPULAB_FAKE_MPI_CUDA_AWARE=1``)."""
        return os.environ.get("GPULAB_FAKE_MPI_CUDA_AWARE", "0") == "1"

    def stream(self) -> FakeStream:
        return FakeStream()

    def current_stream(self) -> FakeStream:
        return self.current

    def event(self, stream: FakeStream) -> FakeEvent:
        return FakeEvent(stream)

    def host_buffer(self, nbytes: int) -> np.ndarray:
        """A staging buffer: fresh and poisoned every time, so no stale copy can look right."""
        return np.full(nbytes, POISON, dtype=np.uint8)

    def d2h(self, host: np.ndarray, dev, stream: FakeStream) -> None:
        _check_pair(host, dev)
        stream.enqueue(lambda: np.copyto(host, dev._data.view(host.dtype).reshape(host.shape)))

    def h2d(self, dev, host: np.ndarray, stream: FakeStream) -> None:
        _check_pair(host, dev)
        target = dev._data
        stream.enqueue(lambda: np.copyto(target, host.view(target.dtype).reshape(target.shape)))

    def kernel(self, run):
        """Run a kernel on the current stream: after the work queued there, leaving the stream busy.

        The math runs at once (eagerly), then a mark is queued, so handing the
        result to MPI without synchronizing fails as it would on a GPU.
        """
        self.current.synchronize()  # stream order: earlier copies on this stream land first
        result = run()
        self.current.enqueue(_kernel_mark)
        return result

    def synchronize(self) -> None:
        self.current.synchronize()


def _check_pair(host: np.ndarray, dev) -> None:
    if not hasattr(dev, "__gpulab_device__") or not isinstance(host, np.ndarray):
        raise TypeError(f"a copy needs a host numpy array and a fake device array, got "
                        f"{type(host).__name__} and {type(dev).__name__}")
    if host.nbytes != dev.nbytes:
        raise ValueError(f"copy between {host.nbytes} host bytes and {dev.nbytes} device bytes")


FAKE = FakeDevice()  # one fake GPU per process, as with one GPU per rank
