"""Rank functions for the model and tuner tests (run through tests.mpi_harness.run_mpi)."""

from __future__ import annotations

import numpy as np

from gpulab.bcast import bcast
from gpulab.bcast.selection.auto import select
from tests.mpi_steps import step


def fit_small(world, sizes, ranks_per_node=None) -> dict:
    from gpulab.bcast.measurement.pingpong_fit import fit_machine, pingpong

    step("ping-pong")
    samples = pingpong(world, sizes, ranks_per_node=ranks_per_node, time_budget=0.002, repeats=3)
    return fit_machine(samples, p=world.size, ranks_per_node=ranks_per_node).to_dict()


def auto_moves_data(world, table: str, sizes: list[int]) -> list:
    """bcast(algorithm='auto') with the given tuning file: correct bytes on every rank, same choice everywhere."""
    chosen = []
    for nbytes in sizes:
        step(f"auto {nbytes}")
        decision = select(nbytes, world, table)
        expected = (np.arange(nbytes) * 7 % 251).astype(np.uint8)
        buf = expected.copy() if world.rank == 0 else np.zeros(nbytes, np.uint8)
        from gpulab.bcast.entry import run_algorithm

        run_algorithm(decision.name, buf, 0, world, **decision.options)
        assert np.array_equal(buf, expected), f"{decision} broke the data at {nbytes} B"
        chosen.append([decision.source, decision.name, decision.options])
    everyone = world.allgather(chosen)
    assert all(c == everyone[0] for c in everyone), "ranks chose differently"
    return chosen


def auto_via_env(world, sizes: list[int]) -> list:
    """The plain bcast() entry point reads $GPULAB_TUNING_TABLE."""
    out = []
    for nbytes in sizes:
        buf = np.full(nbytes, 7, np.uint8) if world.rank == 0 else np.zeros(nbytes, np.uint8)
        bcast(buf)
        assert (buf == 7).all()
        out.append(select(nbytes, world).source)
    return out


def tiny_sweep(world, sizes: list[int]) -> dict | None:
    from gpulab.bcast.measurement.experiments import sweep
    from gpulab.bcast.selection.tuning import build_table

    step("sweep")
    rows = sweep(world, sizes, chunks=(256, 4096), radices=(3,), time_budget=0.002)
    return build_table(rows, world.size) if world.rank == 0 else None


def workload_small(world, sizes: list[int]) -> list:
    from gpulab.bcast.measurement.experiments import auto_registered
    from gpulab.workloads.startup import broadcast_model

    with auto_registered(None):
        return broadcast_model(world, sizes, ["mpi", "chain", "auto"], repeats=1)
