"""A fake GPU for CPU-only machines: memory that host code cannot read, and lazy streams.

Staging device buffers through host memory is easy to get subtly wrong:
forget one copy, copy the wrong chunk, read a host buffer before the
device-to-host copy finished, or hand memory to MPI while a kernel still
writes it. On a real GPU such bugs show up only sometimes. This module makes
them show up every time, on any laptop:

- ``FakeDeviceArray`` wraps a numpy array but offers no buffer protocol, no
  ``__array__``, no ``__cuda_array_interface__`` and no ``__dlpack__``: numpy
  and mpi4py cannot read it. Bytes move only through explicit copies
  (``FAKE.d2h`` / ``FAKE.h2d``, or ``get()`` / ``set()`` as on CuPy arrays).
- Copies are enqueued on a ``FakeStream`` and run *lazily*: only when that
  stream, or an event recorded after the copy, is synchronized. Code that
  skips a synchronize sees stale bytes, which is the worst case a real GPU
  may produce.
- Host staging buffers start filled with a poison byte, not zeros.
- A "CUDA-aware" MPI is simulated by ``GPULAB_FAKE_MPI_CUDA_AWARE=1``: only
  then may the broadcast hand a fake array to MPI (through
  ``__gpulab_mpi_buffer__``), and only when no work is pending on the current
  stream, so a missing synchronize fails loudly.

    from gpulab import fakedevice
    x = fakedevice.from_host(np.arange(10.0))   # like cupy.asarray
    x.get()                                      # like cupy's .get(): a numpy copy
"""

from __future__ import annotations

import os

import numpy as np

POISON = 0xA5  # what an uninitialised staging buffer holds


class FakeStream:
    """An in-order queue of copies that run only when something waits for them."""

    def __init__(self, name: str = "stream"):
        self.name, self._ops, self._done = name, [], 0

    def enqueue(self, op) -> None:
        self._ops.append(op)

    def run_until(self, count: int) -> None:
        while self._done < count:
            op = self._ops[self._done]
            self._done += 1
            op()

    def synchronize(self) -> None:
        self.run_until(len(self._ops))

    @property
    def pending(self) -> int:
        return len(self._ops) - self._done


class FakeEvent:
    """A mark in a stream; ``synchronize()`` runs the stream's work up to the mark."""

    def __init__(self, stream: FakeStream):
        self._stream, self._mark = stream, len(stream._ops)

    def synchronize(self) -> None:
        self._stream.run_until(self._mark)


class FakeDeviceArray:
    """Device memory that only explicit copies can read or write (see the module docstring)."""

    def __init__(self, data: np.ndarray, device: "FakeDevice"):
        self._data, self.__gpulab_device__ = data, device

    shape = property(lambda self: self._data.shape)
    dtype = property(lambda self: self._data.dtype)
    size = property(lambda self: self._data.size)
    nbytes = property(lambda self: self._data.nbytes)
    ndim = property(lambda self: self._data.ndim)
    flags = property(lambda self: self._data.flags)

    def __len__(self) -> int:
        return len(self._data)

    def reshape(self, *shape) -> "FakeDeviceArray":
        return FakeDeviceArray(self._data.reshape(*shape), self.__gpulab_device__)

    def view(self, dtype) -> "FakeDeviceArray":
        return FakeDeviceArray(self._data.view(dtype), self.__gpulab_device__)

    def __getitem__(self, key) -> "FakeDeviceArray":
        # only slices: they are views, like device pointers with an offset; an element read is a host read
        keys = key if isinstance(key, tuple) else (key,)
        if not all(isinstance(k, slice) and k.step in (None, 1) for k in keys):
            raise TypeError("fake device memory: only contiguous slices; copy to the host to read elements")
        return FakeDeviceArray(self._data[key], self.__gpulab_device__)

    def __array__(self, *args, **kwargs):
        raise TypeError("fake device memory cannot be read by host code: use .get() or an explicit copy")

    def get(self) -> np.ndarray:
        """A host copy, after the work queued on the current stream (as CuPy's ``get()``)."""
        self.__gpulab_device__.current.synchronize()
        return self._data.copy()

    def set(self, host) -> None:
        """Copy ``host`` in, asynchronously on the current stream (CuPy's ``set`` with a stream)."""
        self.__gpulab_device__.h2d(self, np.ascontiguousarray(host), self.__gpulab_device__.current)

    def __gpulab_mpi_buffer__(self) -> np.ndarray:
        """What a CUDA-aware MPI would read: allowed only when the simulated MPI is CUDA-aware."""
        device = self.__gpulab_device__
        if not device.mpi_cuda_aware:
            raise RuntimeError("device buffer handed to an MPI that is not CUDA-aware (it would crash "
                               "or read garbage): stage it through host memory")
        if device.current.pending:
            raise RuntimeError("device buffer handed to MPI while the current stream still has work "
                               "queued: synchronize the stream first")
        return self._data

    def __repr__(self) -> str:
        return f"FakeDeviceArray(shape={self.shape}, dtype={self.dtype})"


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

    def event(self, stream: FakeStream) -> FakeEvent:
        return FakeEvent(stream)

    def host_buffer(self, nbytes: int) -> np.ndarray:
        """A staging buffer: fresh and poisoned every time, so no stale copy can look right."""
        return np.full(nbytes, POISON, dtype=np.uint8)

    def d2h(self, host: np.ndarray, dev: FakeDeviceArray, stream: FakeStream) -> None:
        _check_pair(host, dev)
        stream.enqueue(lambda: np.copyto(host, dev._data.view(host.dtype).reshape(host.shape)))

    def h2d(self, dev: FakeDeviceArray, host: np.ndarray, stream: FakeStream) -> None:
        _check_pair(host, dev)
        target = dev._data
        stream.enqueue(lambda: np.copyto(target, host.view(target.dtype).reshape(target.shape)))

    def synchronize(self) -> None:
        self.current.synchronize()


def _check_pair(host: np.ndarray, dev: FakeDeviceArray) -> None:
    if not isinstance(dev, FakeDeviceArray) or not isinstance(host, np.ndarray):
        raise TypeError(f"a copy needs a host numpy array and a fake device array, got "
                        f"{type(host).__name__} and {type(dev).__name__}")
    if host.nbytes != dev.nbytes:
        raise ValueError(f"copy between {host.nbytes} host bytes and {dev.nbytes} device bytes")


FAKE = FakeDevice()  # one fake GPU per process, as with one GPU per rank


def empty(shape, dtype=np.uint8) -> FakeDeviceArray:
    """Uninitialised fake device memory (poisoned, so reading it before writing shows)."""
    data = np.empty(shape, dtype=dtype)
    data.view(np.uint8).reshape(-1)[:] = POISON
    return FakeDeviceArray(data, FAKE)


def from_host(host) -> FakeDeviceArray:
    """Fake device memory holding a copy of ``host``, written synchronously (like ``cupy.asarray``)."""
    host = np.ascontiguousarray(host)
    out = empty(host.shape, host.dtype)
    out.set(host)
    FAKE.current.synchronize()
    return out
