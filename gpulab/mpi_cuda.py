"""Does this MPI library read GPU memory? The path every device buffer takes to MPI.

Two paths, named in broadcast results, trace events and engine timelines:

- "cuda-aware": the MPI library reads and writes GPU memory itself (Open MPI
  or MPICH built with CUDA, MVAPICH2-GDR, Cray MPICH with GPU support on).
- "staged": it cannot, so the bytes go through pinned host memory
  (``gpulab.bcast.runtime.staging`` pipelines a broadcast in chunks;
  ``gpulab.engine.parallel.exchange`` stages the engine's collectives whole).

``choose_path``: an explicit ``path=``, else ``GPULAB_CUDA_AWARE=1`` / ``=0``,
else the MPI library is asked (``mpi_cuda_support()``), else staged, which is
always safe: handing a device pointer to an MPI that is not CUDA-aware
crashes or silently reads garbage.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re

from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())

PATHS = ("cuda-aware", "staged")


def check_path(path: str) -> None:
    if path not in ("auto", *PATHS):
        raise ValueError(f"path must be 'auto', 'cuda-aware' or 'staged', got {path!r}")


def _libmpi_handles() -> list:
    """The MPI shared libraries already loaded into this process (mpi4py loads them privately)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if re.search(r"/libmpi[^/]*\.so", line)})
    except OSError:  # not Linux
        paths = []
    handles = []
    for path in [*paths, None]:  # None: the global symbol namespace
        try:
            handles.append(ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY) if path else ctypes.CDLL(None))
        except OSError:
            pass
    return handles


@functools.cache
def mpi_cuda_support() -> tuple[bool, str]:
    """(does this MPI library read CUDA device memory, how we know). Asked once per process.

    1. MPI 4.1's standard answer: the ``mpi_memory_alloc_kinds`` info of
       COMM_WORLD lists "cuda" or "cuda:device" (MPICH >= 4.2 lists them
       when built with CUDA; Open MPI only when asked with
       ``mpiexec --memory-alloc-kinds``).
    2. The vendors' extensions, through ctypes (mpi4py does not wrap them):
       MPICH's ``MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &flag)`` (asked
       first: ``MPIX_Query_cuda_support`` asserts in MPICH 3.x builds without
       GPU support), then ``MPIX_Query_cuda_support()`` (Open MPI, MVAPICH).
    Both report run-time support, e.g. 0 when MPIR_CVAR_ENABLE_GPU=0.
    """
    kinds = None
    try:
        info = MPI.COMM_WORLD.Get_info()
        kinds = info.Get("mpi_memory_alloc_kinds")
        info.Free()
    except Exception:  # MPI older than 4.1
        pass
    if kinds and {"cuda", "cuda:device"} & {k.strip() for k in kinds.split(",")}:
        return True, f"mpi_memory_alloc_kinds={kinds}"
    for lib in _libmpi_handles():
        gpu_query = getattr(lib, "MPIX_GPU_query_support", None)
        if gpu_query is not None:
            flag = ctypes.c_int(0)
            if gpu_query(ctypes.c_int(0), ctypes.byref(flag)) == 0:  # CUDA = 0, MPI_SUCCESS = 0
                return bool(flag.value), f"MPIX_GPU_query_support(CUDA) = {flag.value}"
        query = getattr(lib, "MPIX_Query_cuda_support", None)
        if query is not None:
            value = query()
            return bool(value), f"MPIX_Query_cuda_support() = {value}"
    return False, f"no CUDA support reported (mpi_memory_alloc_kinds={kinds!r}, no MPIX query found)"


def choose_path(device, path: str = "auto") -> tuple[str, str]:
    """("cuda-aware" or "staged", the reason) for device buffers of ``device``."""
    check_path(path)
    if path != "auto":
        return path, f"path={path!r} requested"
    forced = os.environ.get("GPULAB_CUDA_AWARE", "")
    if forced in ("0", "1"):
        return ("cuda-aware" if forced == "1" else "staged"), f"GPULAB_CUDA_AWARE={forced}"
    if forced:
        raise ValueError(f"GPULAB_CUDA_AWARE must be 0 or 1, got {forced!r}")
    if device.kind == "fake":
        aware, why = device.mpi_cuda_aware, "fake device: GPULAB_FAKE_MPI_CUDA_AWARE simulates the MPI"
    else:
        aware, why = mpi_cuda_support()
    return ("cuda-aware" if aware else "staged"), why
