"""The NCCL baseline: ``ncclBroadcast`` through CuPy's bindings, for side-by-side comparison.

Awan et al. (EuroMPI 2018) compare MPI-side broadcasts with NCCL's. This module gives
the harness the NCCL side with the same signature as the MPI algorithms:

    nccl_bcast(cupy_array, root, comm)        # in place, returns the array
    measure_bcast(comm, "nccl", nbytes)       # in gpulab.bcast.measurement.measure, on CuPy buffers

One NCCL communicator per MPI communicator, created on first use (rank 0
makes the unique id, MPI broadcasts it) and cached on the MPI communicator.
NCCL needs one GPU per rank: several ranks on one device make
``ncclCommInitRank`` fail with a bare "invalid usage", so gpulab checks first
and says which ranks share which GPU (``gpus_shared``); on a one-GPU machine
the baseline runs with p = 1 only. On a machine without CuPy or NCCL,
``nccl_bcast`` raises ``NcclUnavailable`` with the reason.
"""

from __future__ import annotations

import functools

from gpulab.backend import cupy_or_none, gpu_of_this_rank, is_device_array
from gpulab.bcast.entry import byte_view
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())


@functools.cache
def _comm_key() -> int:
    """The attribute key that caches a communicator's NCCL communicator (created at first use)."""
    return MPI.Comm.Create_keyval()


class NcclUnavailable(RuntimeError):
    """CuPy, a GPU or CuPy's NCCL bindings are missing here."""


def nccl_module():
    """``cupy.cuda.nccl`` if usable here, else raise NcclUnavailable saying why."""
    cp = cupy_or_none()
    if cp is None:
        raise NcclUnavailable("the NCCL baseline needs CuPy (pip install gpulab[gpu]) and a CUDA driver")
    try:
        from cupy.cuda import nccl  # not every CuPy build has it
    except ImportError as error:
        raise NcclUnavailable(f"CuPy has no NCCL bindings here: {error}") from None
    if not getattr(nccl, "available", True):
        raise NcclUnavailable("CuPy was built without NCCL (cupy.cuda.nccl.available is False)")
    return nccl


def available() -> bool:
    try:
        nccl_module()
        return cupy_or_none().cuda.runtime.getDeviceCount() > 0
    except Exception:  # no driver, no device, no NCCL
        return False


def sharing(devices: list) -> str | None:
    """Why NCCL cannot run on ranks whose GPUs are ``devices`` (each rank's (host, PCI bus id), in rank
    order), or None: ``ncclCommInitRank`` refuses two ranks on one GPU, with an error that says only
    "invalid usage"."""
    first: dict = {}
    for rank, device in enumerate(devices):
        if device in first:
            return (f"ranks {first[device]} and {rank} share the GPU {device[1]} on {device[0]}: NCCL needs "
                    "a GPU per rank (on a machine with one GPU, run the NCCL baseline on 1 rank)")
        first[device] = rank
    return None


def gpus_shared(comm: MPI.Comm) -> str | None:
    """``sharing`` for the ranks of ``comm``, each on its current CUDA device (collective)."""
    return sharing(comm.allgather(gpu_of_this_rank()))


def communicator(comm: MPI.Comm):
    """The NCCL communicator over the same ranks as ``comm`` (collective on first use)."""
    nc = comm.Get_attr(_comm_key())
    if nc is None:
        nccl = nccl_module()
        why = gpus_shared(comm)
        if why:  # every rank has the same answer: all raise, none waits in NCCL
            raise NcclUnavailable(why)
        uid = nccl.get_unique_id() if comm.rank == 0 else None
        nc = nccl.NcclCommunicator(comm.size, comm.bcast(uid, root=0), comm.rank)
        comm.Set_attr(_comm_key(), nc)
    return nc


def nccl_bcast(buf, root: int = 0, comm: MPI.Comm | None = None):
    """Broadcast the CuPy array ``buf`` in place from ``root`` with ``ncclBroadcast``; return ``buf``.

    Returns when the data is on every GPU (the stream is synchronized), the
    same contract as the MPI algorithms, so the harness times the same thing.
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    nccl = nccl_module()
    if not is_device_array(buf) or hasattr(buf, "__gpulab_device__"):
        raise TypeError("the NCCL baseline broadcasts CuPy (device) arrays only")
    if not 0 <= root < comm.size:
        raise ValueError(f"root must be a rank in [0, {comm.size}), got {root!r}")
    data = byte_view(buf)
    stream = cupy_or_none().cuda.get_current_stream()
    nc = communicator(comm)
    if data.nbytes:
        nc.bcast(data.data.ptr, data.nbytes, nccl.NCCL_UINT8, root, stream.ptr)
    stream.synchronize()
    return buf
