"""Notebook 03 prices flat broadcasts on the machine its ranks run on: across the emulated nodes' link at
the notebook's default (2 nodes, 1 Gbit/s), where pricing them on the shared-memory fit underestimates
large broadcasts many times over (the tests run the notebook at 10 Gbit/s, where it hides less)."""

import ast
from pathlib import Path

import pytest

from gpulab.bcast.cost.hockney import Machine, as_run, predict
from gpulab.machines import Link, LinkLevel

NOTEBOOK = Path(__file__).parents[2] / "notebooks_src" / "03_model_and_tuning.py"
RATES = {"100mbit": 1e8, "200mbit": 2e8, "1gbit": 1e9, "10gbit": 1e10}


def defaults() -> dict:
    """The notebook's parameters cell, as written (not the tests' smaller ones)."""
    cell = NOTEBOOK.read_text().split('# %% tags=["parameters"]')[1].split("# %%")[0]
    names: dict = {}
    exec(compile(ast.parse(cell), str(NOTEBOOK), "exec"), names)  # plain assignments of literals
    return names


def two_nodes(rate: float, ranks_per_node: int) -> Machine:
    """Shared memory inside a node (about 10 GB/s), the emulated link between nodes at ``rate`` bits/s."""
    memory = Link(LinkLevel(5e-6, 1e-10))
    link = Link(LinkLevel(50e-6, 8 / rate))
    return Machine("two emulated nodes", memory, link, ranks_per_node=ranks_per_node, fitted_p=4)


@pytest.mark.parametrize("algorithm", ["binomial", "chain", "scatter_allgather_ring", "linear"])
def test_a_flat_broadcast_across_the_default_link_pays_the_link(algorithm):
    p = defaults()
    n, nodes, rate = 64 << 20, p["NODES"], RATES[p["LINK"]]
    ranks = p["N_ENGINES"]
    levels = two_nodes(rate, ranks // nodes)
    crossing = n * 8 / rate  # the message crosses the link at least once
    options = {"chunk_bytes": 1 << 20} if algorithm == "chain" else {}
    on_nodes = predict(algorithm, n, ranks, as_run(levels, on_nodes=True), **options)
    on_memory = predict(algorithm, n, ranks, as_run(levels, on_nodes=False), **options)
    assert on_nodes >= 0.9 * crossing, f"{algorithm}: {on_nodes:.3f} s, less than one link crossing {crossing:.3f} s"
    assert on_memory < crossing / 5, "the shared-memory pricing the notebook must not use is far below the link"


def test_on_one_machine_every_rank_is_on_one_node():
    levels = two_nodes(1e9, 2)
    assert as_run(levels, on_nodes=False).ranks_per_node is None
    assert as_run(levels, on_nodes=True, name="fitted").ranks_per_node == 2
    assert as_run(levels, on_nodes=True, name="fitted").name == "fitted"
