"""Array backend: numpy on the CPU, CuPy on the GPU, chosen per array.

Array code in gpulab calls ``array_module(x)`` instead of importing numpy or
cupy directly, so the same function runs on host and device arrays. CuPy is
imported lazily: importing gpulab must never initialise CUDA, because each
MPI rank has to pick its GPU first (see ``gpulab.cluster``).
"""

from __future__ import annotations

import importlib
import sys

import numpy as np


def cupy_or_none():
    """The cupy module if it is installed and already imported or importable, else None."""
    if "cupy" in sys.modules:
        return sys.modules["cupy"]
    try:
        return importlib.import_module("cupy")
    except Exception:  # not installed, or no CUDA driver
        return None


def is_device_array(x) -> bool:
    """True for arrays that live in GPU memory (anything exposing the CUDA array interface)."""
    return hasattr(x, "__cuda_array_interface__")


def array_module(x):
    """numpy for host arrays, cupy for device arrays."""
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
    if x is None or is_device_array(x):
        cp = sys.modules.get("cupy")
        if cp is not None:
            cp.cuda.get_current_stream().synchronize()
