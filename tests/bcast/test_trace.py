"""The trace mode records the communication pattern each algorithm is known for."""

from collections import Counter

import pytest

from tests.mpi_harness import batched_jobs

EVERY_RANK = ["linear", "knomial", "binary_tree", "split_binary_tree", "scatter_allgather_rd", "hierarchical"]
DRAWN = [("binomial", {}), ("knomial", {"radix": 3}), ("split_binary_tree", {"chunk_bytes": 200}),
         ("scatter_allgather_rd", {})]
TRACED = [(8, "binomial", 64, {}), (4, "chain", 1000, {"chunk_bytes": 300}), (4, "scatter_allgather_ring", 400, {}),
          *[(5, a, 1001, {"ranks_per_node": 2} if a == "hierarchical" else {}) for a in EVERY_RANK],
          *[(5, a, 1001, options) for a, options in DRAWN]]


def _name(n, algorithm, nbytes, options):
    return f"{algorithm} {options} of {nbytes} B on {n} ranks"


@pytest.fixture(scope="module")
def trace():
    """trace(n, algorithm, nbytes, **options): the gathered events; one MPI job per rank count traces them all."""
    job = batched_jobs({_name(*t): (t[0], "tests.bcast.cases:trace_pattern", dict(algorithm=t[1], nbytes=t[2],
                                                                                  options=t[3]))
                        for t in TRACED}, timeout=120)
    return lambda n, algorithm, nbytes, **options: job(_name(n, algorithm, nbytes, options))[0]


def test_binomial_doubles_the_holders_each_step(trace):
    events = trace(8, "binomial", 64)
    assert Counter(e["step"] for e in events) == {0: 1, 1: 2, 2: 4}
    assert {(e["src"], e["dst"]) for e in events if e["step"] == 0} == {(0, 4)}
    assert sorted(e["dst"] for e in events) == list(range(1, 8))


def test_binomial_sends_to_its_children_one_after_another_largest_subtree_first(trace):
    # as MPICH's binomial: concurrent sends would share the root's link and delay every subtree
    events = trace(8, "binomial", 64)
    root_sends = sorted((e for e in events if e["src"] == 0), key=lambda e: e["t_start"])
    assert [e["dst"] for e in root_sends] == [4, 2, 1]  # subtrees of 4, 2 and 1 ranks
    assert all(a["t_end"] <= b["t_start"] for a, b in zip(root_sends, root_sends[1:]))


def test_chain_pipelines_chunks_down_the_line(trace):
    events = trace(4, "chain", 1000, chunk_bytes=300)  # 4 chunks: 300, 300, 300, 100
    assert {(e["src"], e["dst"]) for e in events} == {(0, 1), (1, 2), (2, 3)}
    assert max(e["step"] for e in events) == 4 - 1 + 4 - 2  # k chunks over p-1 hops: k + p - 2 steps
    assert sorted(e["nbytes"] for e in events if e["src"] == 2) == [100, 300, 300, 300]


def test_scatter_allgather_moves_each_block_once_per_phase(trace):
    events = trace(4, "scatter_allgather_ring", 400)
    phases = Counter(e["phase"] for e in events)
    assert phases == {"scatter": 3, "allgather": 4 * 3}
    assert all(e["nbytes"] == 100 for e in events if e["phase"] == "allgather")


@pytest.mark.parametrize("algorithm", EVERY_RANK)
def test_every_rank_but_the_root_receives(algorithm, trace):
    options = {"ranks_per_node": 2} if algorithm == "hierarchical" else {}
    events = trace(5, algorithm, 1001, **options)
    assert {e["dst"] for e in events} - {0} == {1, 2, 3, 4}  # allgathers also send to the root
    assert all(e["t_end"] >= e["t_start"] for e in events)


@pytest.mark.parametrize("algorithm,options", DRAWN)
def test_the_drawing_plans_the_messages_the_trace_records(algorithm, options, trace):
    from gpulab.bcast.plots.drawings import planned_events

    key = lambda e: (e["phase"], e["step"], e["src"], e["dst"], e["nbytes"])  # noqa: E731
    traced = trace(5, algorithm, 1001, **options)
    assert sorted(map(key, planned_events(algorithm, 5, 1001, **options))) == sorted(map(key, traced))
