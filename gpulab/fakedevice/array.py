"""Fake device arrays: numpy memory behind a wall, with CuPy's rules for math and transfers.

What CuPy allows, a ``FakeDeviceArray`` allows: math through ``xp`` (the
namespace ``gpulab.backend.array_module`` returns for it), operators, numpy
functions (``__array_function__``, as CuPy implements it), indexing with
device arrays, ``get()``/``set()`` and ``float()``/``int()``/``item()``
(explicit, synchronizing reads). What CuPy refuses, it refuses: a numpy
array mixed into device math, ``np.asarray`` of device memory, and any
buffer protocol, so mpi4py cannot read it either. Results of reductions are
0-d device arrays, as on CuPy.
"""

from __future__ import annotations

import operator

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from gpulab.fakedevice.device import FAKE, POISON, FakeDevice

_HIDDEN = frozenset({"data", "ctypes"})  # ndarray attributes that would expose host memory
_VIEWS = frozenset({"reshape", "view", "transpose", "swapaxes", "squeeze", "T"})  # no kernel: same memory
_TRANSFERS = frozenset({"asarray", "array"})  # xp functions that may copy host data in, like cupy.asarray


def _unwrap(value, allow_host: bool = False):
    if isinstance(value, FakeDeviceArray):
        return value._data
    if isinstance(value, np.ndarray) and not allow_host:
        raise TypeError("a host (numpy) array in device math: move it to the device first (xp.asarray), "
                        "CuPy refuses the mix too")
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v, allow_host) for v in value)
    if isinstance(value, dict):
        return {k: _unwrap(v, allow_host) for k, v in value.items()}
    return value


def _wrap(result, device: FakeDevice):
    if isinstance(result, np.ndarray):
        return FakeDeviceArray(result, device)
    if isinstance(result, np.generic):  # CuPy's reductions return 0-d device arrays, not host scalars
        return FakeDeviceArray(np.asarray(result), device)
    if isinstance(result, tuple):
        return tuple(_wrap(r, device) for r in result)
    return result


def kernel(func, *args, allow_host: bool = False, **kwargs):
    """Run numpy's ``func`` on the device's memory, in stream order, and wrap what it returns."""
    return _wrap(FAKE.kernel(lambda: func(*_unwrap(args, allow_host), **_unwrap(kwargs, allow_host))), FAKE)


def _view(func, source: FakeDeviceArray, *args, **kwargs):
    """A new view of ``source``'s device memory (a pointer and a shape): no kernel runs."""
    out = _wrap(func(*_unwrap((source, *args)), **_unwrap(kwargs)), FAKE)
    if isinstance(out, FakeDeviceArray) and np.may_share_memory(out._data, source._data):
        out.base = source.base if source.base is not None else source  # as ndarray.base: the owner
    return out


def _basic(key) -> bool:
    """Whether indexing with ``key`` makes a view (slices, integers) rather than a gather kernel."""
    keys = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or isinstance(k, (slice, int, np.integer)) for k in keys)


class FakeDeviceArray(NDArrayOperatorsMixin):
    """Device memory that host code reads only through explicit copies (see ``gpulab.fakedevice``)."""

    def __init__(self, data: np.ndarray, device: FakeDevice):
        self._data, self.__gpulab_device__ = data, device
        self.base = None  # the array whose memory this one views, as ndarray.base

    shape = property(lambda self: self._data.shape)
    dtype = property(lambda self: self._data.dtype)
    size = property(lambda self: self._data.size)
    nbytes = property(lambda self: self._data.nbytes)
    ndim = property(lambda self: self._data.ndim)
    flags = property(lambda self: self._data.flags)
    strides = property(lambda self: self._data.strides)
    itemsize = property(lambda self: self._data.itemsize)

    def __len__(self) -> int:
        return len(self._data)

    def __getattr__(self, name):
        """ndarray's methods and views (``sum``, ``reshape``, ``T``...), run as kernels on the device."""
        if name.startswith("_") or name in _HIDDEN:
            raise AttributeError(f"fake device arrays have no {name!r}")
        attr = getattr(self._data, name)
        if name in _VIEWS:
            if callable(attr):
                return lambda *args, **kwargs: _view(lambda data: getattr(data, name)(*args, **kwargs), self)
            return _view(lambda data: getattr(data, name), self)
        if callable(attr):
            return lambda *args, **kwargs: kernel(attr, *args, **kwargs)
        return _wrap(attr, self.__gpulab_device__)

    def __getitem__(self, key):
        return (_view if _basic(key) else kernel)(operator.getitem, self, key)

    def __setitem__(self, key, value) -> None:
        kernel(operator.setitem, self, key, value)

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        if out is not None:
            kwargs["out"] = out
        result = kernel(getattr(ufunc, method), *inputs, **kwargs)
        return (out[0] if len(out) == 1 else out) if out is not None else result

    def __array_function__(self, func, types, args, kwargs):
        return kernel(func, *args, **kwargs)

    def __array__(self, *args, **kwargs):
        raise TypeError("fake device memory cannot be read by host code: use .get() or an explicit copy")

    def __float__(self) -> float:
        return float(self.get())  # like CuPy: an explicit, synchronizing read of a 0-d array

    def __int__(self) -> int:
        return int(self.get())

    def __bool__(self) -> bool:
        return bool(self.get())

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


class DeviceNumpy:
    """What ``array_module`` gives for fake device arrays: numpy's functions, run on the fake device.

    Creation functions make device arrays; ``asarray``/``array`` also copy host
    data in (as ``cupy.asarray`` does); dtypes, constants and ufuncs are
    numpy's own (ufuncs reach the device through ``__array_ufunc__``).
    """

    __name__ = "gpulab.fakedevice.xp"

    def __getattr__(self, name):
        attr = getattr(np, name)
        if isinstance(attr, (type, np.ufunc)) or not callable(attr):
            return attr
        if name in ("empty", "empty_like"):  # an allocation, not a kernel: nothing queued
            return lambda *args, **kwargs: _poisoned(_wrap(attr(*_unwrap(args), **_unwrap(kwargs)), FAKE))
        return lambda *args, **kwargs: kernel(attr, *args, allow_host=name in _TRANSFERS, **kwargs)


def _poisoned(x: FakeDeviceArray) -> FakeDeviceArray:
    x._data.view(np.uint8).reshape(-1)[:] = POISON  # uninitialised memory shows when read before written
    return x


xp = DeviceNumpy()


def empty(shape, dtype=np.uint8) -> FakeDeviceArray:
    """Uninitialised fake device memory (poisoned, so reading it before writing shows)."""
    return xp.empty(shape, dtype=dtype)


def from_host(host) -> FakeDeviceArray:
    """Fake device memory holding a copy of ``host``, written synchronously (like ``cupy.asarray``)."""
    host = np.ascontiguousarray(host)
    out = empty(host.shape, host.dtype)
    out.set(host)
    FAKE.current.synchronize()
    return out
