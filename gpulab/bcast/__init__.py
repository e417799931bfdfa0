"""Broadcast algorithms on MPI point-to-point calls, their measuring, cost model, tuning and drawings.

    mpiexec -n 4 python -c "import numpy as np; from gpulab.bcast import bcast; \
        print(bcast(np.arange(4.0) if __import__('mpi4py.MPI').MPI.COMM_WORLD.rank == 0 else np.zeros(4)))"

Importing this package (or its model, sizes, drawings) never initialises MPI:
the public names below are looked up in their modules on first use, so a
notebook kernel can draw and model broadcasts without becoming an MPI process.

Modules: registry (one record per algorithm: what runs, how it is priced and
tuned; everything below loops over it), algorithms (``ALGORITHMS``, ``bcast``),
executor (schedules and the one executor that runs them, with checked
receives), tree_shapes (the trees), trees, pipelined, scatter_allgather (each
algorithm's cached schedule builder), hierarchical, native (MPI_Bcast), trace;
gpu, staging, nccl (device buffers); measure (OSU-style timing) and
experiments (what ``gpulab tune`` measures); critical_path, model, fit (cost
model), mpich (what MPICH's own MPI_Bcast runs on a layout); tuning (the
tuning file) and auto (``select``: what ``algorithm="auto"`` runs); report, results, sizes, drawings, tuning_plots.
docs/adding_an_algorithm.md adds an algorithm.
"""

from __future__ import annotations

from gpulab.lazy_exports import lazy_exports

# public name -> the module of this package that defines it
_PUBLIC = {"ALGORITHMS": "algorithms", "bcast": "algorithms", "option_names": "algorithms",
           "BcastSizeError": "executor", "BcastArgumentMismatch": "agreement", "Decision": "auto", "select": "auto",
           "gather_trace": "trace", "tracing": "trace"}


lazy_exports(globals(), {name: f"{__name__}.{module}" for name, module in _PUBLIC.items()})
