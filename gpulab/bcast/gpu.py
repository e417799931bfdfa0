"""Device buffers in a broadcast: hand them to a CUDA-aware MPI, or stage them through the host.

``run_algorithm`` sends every device array here (CuPy, or the CPU tests'
``gpulab.fakedevice``). Two paths, named in measurements and trace events:

- "cuda-aware": the MPI library reads and writes GPU memory itself (Open MPI
  or MPICH built with CUDA, MVAPICH2-GDR, Cray MPICH with GPU support on).
- "staged": it cannot, so the bytes go through pinned host memory, pipelined
  in chunks (``gpulab.bcast.staging``).
Host arrays take the "host" path. Either way the current CUDA stream is
synchronized first: MPI and the copy stream are not ordered after kernels
that may still be writing the buffer.

Which path: the ``path=`` option, else ``GPULAB_CUDA_AWARE=1`` / ``=0``, else
the MPI library is asked (``mpi_cuda_support()``), else staged, which is
always safe: handing a device pointer to an MPI that is not CUDA-aware
crashes or silently reads garbage.

    bcast(cupy_array, algorithm="chain", chunk_bytes=1 << 20, staging_chunk_bytes=4 << 20)
"""

from __future__ import annotations

import ctypes
import functools
import os
import re

import numpy as np

from gpulab.backend import device_of, is_device_array
from gpulab.bcast.group import Group
from gpulab.bcast.staging import DEFAULT_STAGING_CHUNK, Stager

PATHS = ("cuda-aware", "staged")
DEVICE_OPTIONS = ("path", "staging_chunk_bytes")  # accepted by every algorithm; used for device buffers


def check_device_options(path: str = "auto", staging_chunk_bytes: int | None = None) -> None:
    if path not in ("auto", *PATHS):
        raise ValueError(f"path must be 'auto', 'cuda-aware' or 'staged', got {path!r}")
    if staging_chunk_bytes is not None and (
            not isinstance(staging_chunk_bytes, (int, np.integer)) or staging_chunk_bytes <= 0):
        raise ValueError(f"staging_chunk_bytes must be a positive integer, got {staging_chunk_bytes!r}")


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
    from mpi4py import MPI

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
    check_device_options(path)
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


def path_of(buf, path: str = "auto") -> str:
    """The path a broadcast of ``buf`` takes here: "host", "cuda-aware" or "staged"."""
    if not is_device_array(buf):
        return "host"
    return choose_path(device_of(buf), path)[0]


def run_on_device(run, name: str, data, root: int, comm, options: dict, *, path: str = "auto",
                  staging_chunk_bytes: int | None = None) -> str:
    """Broadcast the device byte view ``data`` with algorithm ``name``; return the path taken.

    ``run(name, group, buffer, root, options)`` executes the algorithm (it is
    ``algorithms._run``, passed in to keep the import graph one-way).
    """
    check_device_options(path, staging_chunk_bytes)
    device = device_of(data)
    taken, _ = choose_path(device, path)
    device.synchronize()  # before MPI or our copy stream touch memory a kernel may still use
    if comm.size == 1:
        return taken
    if taken == "cuda-aware":
        run(name, Group(comm, range(comm.size), comm.rank, name, comm, path=taken), data, root, options)
        return taken
    stager = Stager(device, data, comm.rank == root, staging_chunk_bytes or DEFAULT_STAGING_CHUNK)
    try:
        stager.start()
        group = Group(comm, range(comm.size), comm.rank, name, comm, path=taken, stager=stager)
        run(name, group, stager.host, root, options)
    finally:
        stager.finish()
    return taken
