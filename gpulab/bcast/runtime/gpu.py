"""Device buffers in a broadcast: hand them to a CUDA-aware MPI, or stage them through the host.

``run_algorithm`` sends every device array here (CuPy, or the CPU tests'
``gpulab.fakedevice``). The path ("cuda-aware" or "staged", see
``gpulab.mpi_cuda``) is named in measurements and trace events; staged
broadcasts are pipelined in chunks (``gpulab.bcast.runtime.staging``). Host arrays
take the "host" path. Either way the current CUDA stream is synchronized
first: MPI and the copy stream are not ordered after kernels that may still be
writing the buffer.

    bcast(cupy_array, algorithm="chain", chunk_bytes=1 << 20, staging_chunk_bytes=4 << 20)
"""

from __future__ import annotations

import numpy as np

from gpulab.backend import device_of, is_device_array
from gpulab.bcast.runtime.executor import Group
from gpulab.bcast.runtime.staging import DEFAULT_STAGING_CHUNK, Stager
from gpulab.mpi_cuda import check_path, choose_path

DEVICE_OPTIONS = ("path", "staging_chunk_bytes")  # accepted by every algorithm; used for device buffers


def check_device_options(path: str = "auto", staging_chunk_bytes: int | None = None) -> None:
    check_path(path)
    if staging_chunk_bytes is not None and (
            not isinstance(staging_chunk_bytes, (int, np.integer)) or staging_chunk_bytes <= 0):
        raise ValueError(f"staging_chunk_bytes must be a positive integer, got {staging_chunk_bytes!r}")


def path_of(buf, path: str = "auto") -> str:
    """The path a broadcast of ``buf`` takes here: "host", "cuda-aware" or "staged"."""
    if not is_device_array(buf):
        return "host"
    return choose_path(device_of(buf), path)[0]


def run_on_device(run, name: str, data, root: int, comm, options: dict, *, native=None, path: str = "auto",
                  staging_chunk_bytes: int | None = None) -> str:
    """Broadcast the device byte view ``data`` with algorithm ``name``; return the path taken.

    ``run(name, group, buffer, root, options)`` executes the algorithm (it is
    ``entry._run``, passed in to keep the import graph one-way); ``native``, the communicator
    MPI's own Bcast runs on (the caller's, as for host arrays; default ``comm``).
    """
    check_device_options(path, staging_chunk_bytes)
    device = device_of(data)
    taken, _ = choose_path(device, path)
    device.synchronize()  # before MPI or our copy stream touch memory a kernel may still use
    if comm.size == 1:
        return taken
    native = comm if native is None else native
    if taken == "cuda-aware":
        run(name, Group(comm, range(comm.size), comm.rank, name, native, path=taken), data, root, options)
        return taken
    stager = Stager(device, data, comm.rank == root, staging_chunk_bytes or DEFAULT_STAGING_CHUNK)
    try:
        stager.start()
        group = Group(comm, range(comm.size), comm.rank, name, native, path=taken, stager=stager)
        run(name, group, stager.host, root, options)
    finally:
        stager.finish()
    return taken
