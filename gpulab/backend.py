"""Array backend: numpy on the CPU, CuPy on the GPU, chosen per array.

Array code in gpulab calls ``array_module(x)`` instead of importing numpy or
cupy directly, so the same function runs on host and device arrays. CuPy is
imported lazily: importing gpulab must never initialise CUDA, because each
MPI rank has to pick its GPU first (see ``gpulab.cluster``).

Communication code that must move device memory itself (host staging in
``gpulab.bcast.runtime.staging``) talks to a *device* object, ``device_of(x)``: CuPy's
(``CupyDevice``) or the fake GPU of ``gpulab.fakedevice`` that CPU-only tests
use. Both offer the same few calls: new streams and events, pinned host
buffers, and asynchronous device<->host copies.
"""

from __future__ import annotations

import importlib
import socket
import sys

import numpy as np

# where arrays can live, for every --device option and device menu: name -> what it is
DEVICES = {"host": "host (numpy)", "cupy": "GPU (CuPy)", "fake": "fake GPU (CPU stand-in)"}


def cupy_or_none():
    """The cupy module if it is installed and already imported or importable, else None."""
    if "cupy" in sys.modules:
        return sys.modules["cupy"]
    try:
        return importlib.import_module("cupy")
    except Exception:  # not installed, or no CUDA driver
        return None


def gpu_of_this_rank() -> tuple[str, str]:
    """(host name, PCI bus id) of the GPU this process uses: ranks with the same pair share one device."""
    return socket.gethostname(), cupy_or_none().cuda.Device().pci_bus_id


def is_device_array(x) -> bool:
    """True for arrays in GPU memory (the CUDA array interface) and for fake device arrays."""
    return hasattr(x, "__cuda_array_interface__") or hasattr(x, "__gpulab_device__")


def array_module(x):
    """numpy for host arrays, cupy for device arrays (``gpulab.fakedevice.xp`` for fake ones)."""
    if hasattr(x, "__gpulab_device__"):
        from gpulab.fakedevice import xp

        return xp
    if is_device_array(x):
        return sys.modules["cupy"]  # a device array implies cupy is imported
    return np


def to_host(x) -> np.ndarray:
    """Copy a device array to a numpy array; return host arrays unchanged."""
    if is_device_array(x):
        return x.get()
    return np.asarray(x)


def synchronize(x=None) -> None:
    """Wait for the current CUDA stream before handing a device buffer to MPI.

    MPI reads device memory on its own streams: without this, a kernel still
    writing ``x`` could race with the send.
    """
    if hasattr(x, "__gpulab_device__"):
        x.__gpulab_device__.synchronize()
    elif x is None or is_device_array(x):
        cp = sys.modules.get("cupy")
        if cp is not None:
            cp.cuda.get_current_stream().synchronize()


# cudaMemcpyKind values (driver_types.h), stable since CUDA 1.0
_HOST_TO_DEVICE, _DEVICE_TO_HOST = 1, 2
_COPY_STREAMS: dict = {}  # device id -> the stream host staging copies on


class CupyDevice:
    """The device protocol on a real GPU, through CuPy (see ``gpulab.fakedevice.FakeDevice``)."""

    kind = "cuda"

    def __init__(self, cp):
        self.cp = cp

    def stream(self):
        """This GPU's copy stream, made once: creating a stream per broadcast costs more than small copies."""
        device = self.cp.cuda.Device().id
        if device not in _COPY_STREAMS:
            # non-blocking: copies on it need not wait for kernels on the legacy default stream
            _COPY_STREAMS[device] = self.cp.cuda.Stream(non_blocking=True)
        return _COPY_STREAMS[device]

    def event(self, stream):
        event = self.cp.cuda.Event(disable_timing=True)
        event.record(stream)
        return event

    def host_buffer(self, nbytes: int) -> np.ndarray:
        """Pinned (page-locked) host memory: asynchronous copies need it, and it comes from CuPy's pool."""
        import cupyx  # CuPy is optional: only its device gets here

        return cupyx.empty_pinned(nbytes, dtype=np.uint8)

    def d2h(self, host: np.ndarray, dev, stream) -> None:
        if host.nbytes:
            self.cp.cuda.runtime.memcpyAsync(host.ctypes.data, dev.data.ptr, host.nbytes,
                                             _DEVICE_TO_HOST, stream.ptr)

    def h2d(self, dev, host: np.ndarray, stream) -> None:
        if host.nbytes:
            self.cp.cuda.runtime.memcpyAsync(dev.data.ptr, host.ctypes.data, host.nbytes,
                                             _HOST_TO_DEVICE, stream.ptr)

    def current_stream(self):
        return self.cp.cuda.get_current_stream()

    def synchronize(self) -> None:
        self.cp.cuda.get_current_stream().synchronize()


def mpi_view(x):
    """What mpi4py is handed for ``x``: the array itself, or for a fake device array what its
    ``__gpulab_mpi_buffer__`` door gives (it refuses unless the simulated MPI is CUDA-aware and
    the stream is synchronized, so mpi4py can never read fake device memory by accident)."""
    door = getattr(x, "__gpulab_mpi_buffer__", None)
    return x if door is None else door()


def device_of(x):
    """The device object that moves ``x``'s memory, or None for a host array."""
    fake = getattr(x, "__gpulab_device__", None)
    if fake is not None:
        return fake
    if hasattr(x, "__cuda_array_interface__"):
        return CupyDevice(sys.modules["cupy"])
    return None


def module_for(device: str):
    """The array module of ``device``: "host" (numpy), "cupy" or "fake" (``gpulab.fakedevice.xp``)."""
    if device == "host":
        return np
    if device == "cupy":
        cp = cupy_or_none()
        if cp is None:
            raise RuntimeError("device='cupy' needs CuPy and a CUDA driver (pip install gpulab[gpu])")
        return cp
    if device == "fake":
        from gpulab.fakedevice import xp

        return xp
    raise ValueError(f"device must be 'host', 'cupy' or 'fake', got {device!r}")


def to_device(x, device: str):
    """``x`` (host or device) as an array on ``device``: one copy when it moves, none when it is there."""
    if device == "host":
        return to_host(x)
    return module_for(device).asarray(x)


def empty_bytes(nbytes: int, device: str = "host"):
    """``nbytes`` uninitialised bytes on ``device``: "host" (numpy), "cupy" or "fake"."""
    return module_for(device).empty(nbytes, dtype=np.uint8)


def copy_from_host(x, host) -> None:
    """Overwrite ``x`` (host or device) with the host array ``host`` of the same size."""
    if is_device_array(x):
        x.set(np.ascontiguousarray(host))
    else:
        x[...] = host
