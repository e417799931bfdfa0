"""Broadcast algorithms on MPI point-to-point calls, their measuring, cost model, tuning and drawings.

    mpiexec -n 4 python -c "import numpy as np; from gpulab.bcast import bcast; \
        print(bcast(np.arange(4.0) if __import__('mpi4py.MPI').MPI.COMM_WORLD.rank == 0 else np.zeros(4)))"

Importing this package (or its cost model, sizes, drawings) never initialises MPI, and loads no C:
the public names below are looked up in their modules on first use, so a notebook kernel can draw and
model broadcasts without becoming an MPI process.

Its parts, each importing only those listed before it (tests/structure/test_bcast_layers.py):

- ``sizes``: message sizes as people write them ("64K");
- ``runtime``: what runs the messages: the executor of schedules, the fast path of a repeated call
  (and its C entry), the argument check across ranks, the trace, device buffers;
- ``algorithms``: each algorithm's schedule builder, its critical path, and ``registry``, one record
  per algorithm that everything above loops over;
- ``cost``: the alpha-beta (Hockney) model, the placement of ranks on nodes, what MPICH's own
  MPI_Bcast runs, machine profiles;
- ``selection``: the tuning file and ``select`` (what ``algorithm="auto"`` runs);
- ``entry``: ``bcast()`` and ``ALGORITHMS``;
- ``measurement``: timing broadcasts, the ping-pong fit, what ``gpulab tune`` measures, reports,
  exports to MPI's own configuration, NCCL's broadcast for comparison;
- ``plots``: drawings of schedules and traces, and the tuning plots.

docs/adding_an_algorithm.md adds an algorithm.
"""

from __future__ import annotations

from gpulab.lazy_exports import lazy_exports

# public name -> the module of this package that defines it
_PUBLIC = {"ALGORITHMS": "entry", "bcast": "entry", "option_names": "entry",
           "BcastSizeError": "runtime.executor", "BcastArgumentMismatch": "runtime.argument_check",
           "Decision": "selection.auto", "select": "selection.auto",
           "gather_trace": "runtime.trace", "tracing": "runtime.trace"}


lazy_exports(globals(), {name: f"{__name__}.{module}" for name, module in _PUBLIC.items()})
