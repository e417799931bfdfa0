"""Broadcast algorithms on MPI point-to-point calls (see ``algorithms``), trace mode and selection.

    mpiexec -n 4 python -c "import numpy as np; from gpulab.bcast import bcast; \
        print(bcast(np.arange(4.0) if __import__('mpi4py.MPI').MPI.COMM_WORLD.rank == 0 else np.zeros(4)))"
"""

from __future__ import annotations

from gpulab.bcast.algorithms import ALGORITHMS, byte_view, option_names, run_algorithm
from gpulab.bcast.group import BcastSizeError
from gpulab.bcast.select import Decision, select
from gpulab.bcast.trace import gather_trace, tracing


def bcast(buf, root: int = 0, comm=None, algorithm: str = "auto", **options):
    """Broadcast ``buf`` in place from ``root`` (``comm`` defaults to COMM_WORLD); return ``buf``.

    ``algorithm="auto"`` picks one with ``select()``; options given here then
    override the chosen algorithm's defaults.
    """
    if comm is None:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    if algorithm == "auto":
        algorithm, chosen = select(byte_view(buf).nbytes, comm)
        options = {**chosen, **options}
    return run_algorithm(algorithm, buf, root, comm, **options)


__all__ = ["ALGORITHMS", "BcastSizeError", "Decision", "bcast", "gather_trace", "option_names", "select",
           "tracing"]
