"""Checks for the exercise notebooks (exercises/): a learner's code run on MPI ranks, its faults named.

    from gpulab.exercises import check_bcast, on_engines
    check_bcast(linear_bcast, comm, shape="linear")              # in an MPI job, on every rank
    on_engines(engines, check_bcast, linear_bcast, shape="linear")   # from a notebook, on its engines

Each ``check_...`` takes the learner's function (or a tuple of them) and a
communicator (None: COMM_WORLD), runs it on every rank, and either returns a
line saying what passed or raises ``CheckFailed`` on every rank with the same
message: which rank got which bytes wrong at which step and from whom, which
gradient differs and by how much, which peer a message went to, which stage
stopped waiting. Importing this package never initialises MPI.

Modules: traffic (the logged, deadline-bound communicator the learner's code
gets), trial (one broadcast run and its diagnosis), report (messages),
broadcasts (exercises 1-3, timings, the chunk sweep), tensor3d (4), schedule
(5), alphabeta (6), runner (``on_engines``: the notebook side).
"""

from __future__ import annotations

from gpulab.lazy_exports import lazy_exports

# public name -> the module of this package that defines it
_PUBLIC = {"CheckFailed": "report", "blocks": "trial", "on_engines": "runner",
           "check_bcast": "broadcasts", "check_chain": "broadcasts", "check_scatter": "broadcasts",
           "check_ring_allgather": "broadcasts", "timing": "broadcasts", "chunk_sweep": "broadcasts",
           "check_tp3d": "tensor3d", "timing_tp3d": "tensor3d", "check_1f1b": "schedule",
           "check_alpha_beta": "alphabeta", "prediction_vs_measured": "alphabeta"}


lazy_exports(globals(), {name: f"{__name__}.{module}" for name, module in _PUBLIC.items()})
