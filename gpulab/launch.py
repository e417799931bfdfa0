"""Find and run ``mpiexec``: the one beside this Python (the ``mpich`` wheel) by default.

A cluster user points gpulab at the site's MPI with ``GPULAB_MPIEXEC``
(for example ``srun`` or ``/opt/cray/pe/mpich/bin/mpiexec``); extra launcher
flags go in ``GPULAB_MPIEXEC_ARGS``.
"""

from __future__ import annotations

import os
import shlex
import shutil
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
    """The argv that starts ``python *python_args`` on ``n`` ranks."""
    if n < 1:
        raise ValueError(f"number of ranks must be >= 1, got {n}")
    launcher = shlex.split(find_mpiexec())
    extra = shlex.split(os.environ.get("GPULAB_MPIEXEC_ARGS", ""))
    return [*launcher, "-n", str(n), *extra, sys.executable, *python_args]


def inside_mpi_job() -> bool:
    """True when this process was started by an MPI launcher (checked without initialising MPI)."""
    return any(var in os.environ for var in _LAUNCHER_VARS)
