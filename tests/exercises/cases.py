"""Rank functions: one exercise check run on every rank with reference or planted functions."""

from __future__ import annotations

import importlib

from gpulab.exercises import CheckFailed
from tests.exercises import planted
from tests.exercises.sources import reference
from tests.mpi_steps import step


def _function(spec: str, assignment: str):
    """'ref:linear_bcast' (the source notebook's solution) or 'planted:linear_forgets_last_rank'."""
    kind, name = spec.split(":")
    return reference(assignment)[name] if kind == "ref" else getattr(planted, name)


def run_check(comm, assignment: str, check: str, functions: list[str], kwargs: dict | None = None) -> str:
    """'passed: ...' or 'failed: <the message>' (the same on every rank)."""
    fns = [_function(spec, assignment) for spec in functions]
    step(f"{check}({', '.join(functions)})")
    check_fn = getattr(importlib.import_module("gpulab.exercises"), check)
    try:
        return "passed: " + check_fn(fns[0] if len(fns) == 1 else tuple(fns), comm, **(kwargs or {}))
    except CheckFailed as failed:
        return "failed: " + str(failed)


def run_measurement(comm, assignment: str, measure: str, functions: list[str], kwargs: dict | None = None):
    """A notebook's measurement (timing, chunk_sweep, timing_tp3d, prediction_vs_measured) with the references."""
    fns = [_function(spec, assignment) for spec in functions]
    step(f"{measure}({', '.join(functions)})")
    measure_fn = getattr(importlib.import_module("gpulab.exercises"), measure)
    return measure_fn(fns[0] if len(fns) == 1 else tuple(fns), comm, **(kwargs or {}))
