"""Find and run ``mpiexec``: the one beside this Python (the ``mpich`` wheel) by default.

A cluster user points gpulab at the site's MPI with ``GPULAB_MPIEXEC``
(for example ``srun`` or ``/opt/cray/pe/mpich/bin/mpiexec``); extra launcher
flags go in ``GPULAB_MPIEXEC_ARGS``. ``pin_gpu`` gives each rank of a job the
GPU of its node-local rank (engines, ``gpulab train``, ``gpulab bench``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import sys
from pathlib import Path

# Environment variables that MPI launchers set in every rank they start.
_LAUNCHER_VARS = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


def find_mpiexec() -> str:
    override = os.environ.get("GPULAB_MPIEXEC")
    if override:
        return override
    beside_python = Path(sys.executable).parent / "mpiexec"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if found is None:
        raise FileNotFoundError(
            "no mpiexec found: install the MPI wheel (`pip install mpich`), load your site's MPI "
            "module, or set GPULAB_MPIEXEC to the launcher")
    return found


def mpiexec_command(n: int, python_args: list[str]) -> list[str]:
    """The argv that starts ``python *python_args`` on ``n`` ranks.

    Inside ``with EmulatedCluster(...)`` (or with $GPULAB_CLUSTER set) the ranks go to the
    emulated nodes instead (see gpulab.emulated).
    """
    if n < 1:
        raise ValueError(f"number of ranks must be >= 1, got {n}")
    from gpulab.emulated import active_cluster  # standard library only; starts nothing

    cluster = active_cluster()
    if cluster is not None:
        return cluster.mpiexec_command(n, python_args)
    launcher = shlex.split(find_mpiexec())
    extra = shlex.split(os.environ.get("GPULAB_MPIEXEC_ARGS", ""))
    return [*launcher, "-n", str(n), *extra, sys.executable, *python_args]


def inside_mpi_job() -> bool:
    """True when this process was started by an MPI launcher (checked without initialising MPI)."""
    return any(var in os.environ for var in _LAUNCHER_VARS)


def pin_gpu(comm=None) -> dict:
    """Learn the node-local rank and make one GPU visible to this rank; return where it runs.

    Must run before CUDA is initialised (before cupy allocates anything): the CUDA
    runtime reads CUDA_VISIBLE_DEVICES once. GPUs are counted from the driver's
    /proc entries, because asking CUDA would initialise it.
    """
    from mpi4py import MPI

    comm = comm or MPI.COMM_WORLD
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)  # the ranks sharing this node's memory
    local_rank, local_size = local.Get_rank(), local.Get_size()
    local.Free()
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if not visible and "CUDA_VISIBLE_DEVICES" not in os.environ:
        gpus = Path("/proc/driver/nvidia/gpus")
        visible = [str(i) for i in range(len(list(gpus.iterdir())))] if gpus.is_dir() else []
    gpu = None
    if visible:
        gpu = visible[local_rank % len(visible)]
        if "cupy" in sys.modules:
            raise RuntimeError("pin_gpu() ran after cupy was imported: CUDA may already use GPU 0")
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    return {"rank": comm.Get_rank(), "host": socket.gethostname(), "pid": os.getpid(),
            "local_rank": local_rank, "local_size": local_size, "gpu": gpu}
