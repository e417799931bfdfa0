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

import importlib

# public name -> the module of this package that defines it
_PUBLIC = {"CheckFailed": "report", "blocks": "trial", "on_engines": "runner",
           "check_bcast": "broadcasts", "check_chain": "broadcasts", "check_scatter": "broadcasts",
           "check_ring_allgather": "broadcasts", "timing": "broadcasts", "chunk_sweep": "broadcasts",
           "check_tp3d": "tensor3d", "timing_tp3d": "tensor3d", "check_1f1b": "schedule",
           "check_alpha_beta": "alphabeta", "prediction_vs_measured": "alphabeta"}


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


__all__ = sorted(_PUBLIC)
