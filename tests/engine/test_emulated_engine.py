"""Stride-aware collective fits (groups that cross nodes) and the record of experiment (e)."""

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from gpulab.engine import grid_shapes
from gpulab.engine.perf.fitted_machine import FittedMachine
from gpulab.engine.perf.probes import collective_key, group_layouts, strided_group
from gpulab.engine.perf.terms import stride

ROOT = Path(__file__).resolve().parents[2]


def test_layouts_contiguous_unless_strided():
    assert group_layouts(4, strided=False) == [(2, 1), (4, 1)]
    assert group_layouts(4, strided=True) == [(2, 1), (2, 2), (4, 1)]
    assert group_layouts(8, strided=True) == [(2, 1), (2, 2), (2, 4), (4, 1), (4, 2), (8, 1)]


@pytest.mark.parametrize("p", [4, 8])
def test_strided_groups_match_the_mesh(p):
    """Every group of every grid is one of the fitted groups: same members as stride(group, shape) says."""
    for g, s in group_layouts(p, strided=True):
        members = {}
        for rank in range(p):
            members.setdefault(strided_group(rank, g, s), []).append(rank)
        assert len(members) == p // g
        for ranks in members.values():
            assert ranks == list(range(ranks[0], ranks[0] + g * s, s))
    fitted = set(group_layouts(p, strided=True))
    for shape in grid_shapes(p):
        for group, size in (("row", shape.row), ("col", shape.col), ("depth", shape.depth), ("data", shape.data)):
            if size > 1:
                assert (size, stride(group, shape)) in fitted, (shape, group)


def machine(collectives):
    return FittedMachine(name="t", ranks=4, cores=2, collectives=collectives, matmul_rate=1e9,
                         elementwise_rate=1e9, kernel_overhead=1e-6, share=1.0, machine_peak=1e9,
                         overlap={"poll": 0.5}, memory_bytes=1e9)


def test_collective_cost_uses_the_stride_when_fitted():
    m = machine({"all_reduce/2": [1e-5, 1e-9], collective_key("all_reduce", 2, 2): [1e-4, 1e-7],
                 "all_reduce/4": [2e-5, 2e-9]})
    assert collective_key("all_reduce", 2, 2) == "all_reduce/2@2"
    assert m.collective_s("all_reduce", 2, 1, 1000) == pytest.approx(1e-5 + 1e-6)
    assert m.collective_s("all_reduce", 2, 2, 1000) == pytest.approx(1e-4 + 1e-4)
    assert m.collective_s("all_reduce", 4, 1, 1000) == pytest.approx(2e-5 + 2e-6)
    # a stride not fitted costs what the contiguous group does; another size, the nearest contiguous one
    assert m.collective_s("all_reduce", 4, 2, 1000) == pytest.approx(2e-5 + 2e-6)
    assert m.collective_s("all_reduce", 8, 1, 1000) == pytest.approx(2e-5 + 2e-6)


BLOCK, ROUND_ROBIN = [1, 1, 2, 2], [1, 2, 1, 2]  # the node of each of 4 ranks on 2 nodes


def test_link_floor_raises_only_what_crosses_the_link_faster_than_its_rate():
    """2 nodes x 2 ranks at 100 bytes/s: per byte of the vector, the busiest node takes in 1 (all-reduce/4),
    1/2 (all-gather/4, reduce-scatter/4), 2 x 1 (two all-reduce/2@2 groups share each node's link)."""
    from benchmarks.emulated_engine import link_floor

    fast, slow = [1e-5, 1e-9], [1e-5, 1.0]
    fitted = {"all_reduce/2": fast, "all_reduce/4": fast, "all_gather/4": fast, "reduce_scatter/4": fast,
              "all_reduce/2@2": fast, "all_gather/2@2": slow, "iall_reduce/4": fast}
    floored = link_floor(machine(fitted), rate=100.0, nodes_of=BLOCK).collectives
    assert floored["all_reduce/2"] == fast  # inside a node: no link
    assert floored["all_reduce/4"] == floored["iall_reduce/4"] == [1e-5, pytest.approx(1 / 100)]  # the twin: alike
    assert floored["all_gather/4"] == floored["reduce_scatter/4"] == [1e-5, pytest.approx(0.5 / 100)]
    assert floored["all_reduce/2@2"] == [1e-5, pytest.approx(2 / 100)]
    assert floored["all_gather/2@2"] == slow  # already slower than the link: kept
    assert link_floor(machine(fitted), rate=None, nodes_of=BLOCK).collectives == fitted


def test_link_floor_follows_the_placement():
    """Round-robin on 2 nodes: contiguous pairs (0, 1), (2, 3) cross the link, stride-2 pairs stay in a node."""
    from benchmarks.emulated_engine import link_floor

    fast = [1e-5, 1e-9]
    fitted = {"all_reduce/2": fast, "all_reduce/2@2": fast}
    floored = link_floor(machine(fitted), rate=100.0, nodes_of=ROUND_ROBIN).collectives
    assert floored["all_reduce/2"] == [1e-5, pytest.approx(2 / 100)]  # both pairs share each node's link
    assert floored["all_reduce/2@2"] == fast


def test_link_floor_raises_timed_points_too():
    from benchmarks.emulated_engine import link_floor

    m = replace(machine({"all_reduce/2": [0.0, 1e-9], "all_reduce/4": [0.0, 1e-9]}),
                collective_points={"all_reduce/2": [[100, 1e-3]], "all_reduce/4": [[100, 1e-3], [1000, 20.0]]})
    floored = link_floor(m, rate=100.0, nodes_of=BLOCK).collective_points
    assert floored["all_reduce/2"] == [[100, 1e-3]]  # inside a node
    assert floored["all_reduce/4"] == [[100, pytest.approx(1.0)], [1000, 20.0]]  # 100 bytes at 100 B/s; slower: kept


def test_recorded_experiment_has_every_grid_both_ways():
    records = sorted((ROOT / "docs" / "results").glob("emulated_engine_*.json"))
    assert records, "no record of experiment (e): python benchmarks/emulated_engine.py run"
    for path in records:
        record = json.loads(path.read_text())
        seen = {(tuple(r["shape"]), r["setting"]) for r in record["rows"]}
        assert seen == {(tuple(s), o) for s in grid_shapes(4) for o in ("off", "on")}, path.name
        assert all(len(r["iter_s_rounds"]) == record["rounds"] for r in record["rows"])
        assert set(record["validation"]) == {"off", "on"}


def strided_costs(comm):
    """On every rank: the collective fit with strides, tiny sizes (the shape of the result, not its speed)."""
    from gpulab.engine.perf.probes import collective_costs

    return collective_costs(comm, reps=1, strided=True, max_bytes=1 << 14)


def test_strided_fit_times_groups_across_the_stride():
    from tests.mpi_harness import run_mpi

    costs, spread = run_mpi(4, "tests.engine.test_emulated_engine:strided_costs", timeout=120)[0]
    assert set(spread) == set(costs) and all(v == [0.0, 0.0] for v in spread.values())  # one repetition
    ops = ("all_reduce", "all_gather", "reduce_scatter", "iall_reduce", "iall_gather", "ireduce_scatter")
    assert set(costs) == {collective_key(op, g, s) for op in ops for g, s in ((2, 1), (2, 2), (4, 1))}
    for key, points in costs.items():  # 1 KiB, 16 KiB (max_bytes), each a positive time
        assert [n for n, _ in points] == [1024, 16384], key
        assert all(t > 0 for _, t in points), key


def test_accuracy_records_have_both_settings_and_render():
    """docs/engine_model_accuracy.md's records: every run both ways, every grid with its error, one table row each."""
    from benchmarks.engine_accuracy import by_caveat, runs, table

    rows = runs()
    assert rows
    for r in rows:
        assert set(r["accuracy"]) == {"off", "on"}, r["setting"]
        world = 4 if r["setting"].startswith(("2x2", "1x4")) else 8
        assert len(r["grids"]) == 2 * len(grid_shapes(world)), (r["setting"], r["run"])
        assert all(g["error"] >= 0 for g in r["grids"])
        # the grids the fit measured itself (the col, row and data grids), each with both settings
        assert sum(g["calibration"] for g in r["grids"]) == 6, (r["setting"], r["run"])
    assert len(table(rows)) == 2 + len(rows)
    assert len(by_caveat(rows)) >= 3  # the head and at least one kind of prediction


def test_the_wait_at_the_gradient_norm_is_read_from_the_timeline_and_priced_by_the_fit():
    """``engine_accuracy.sync_call``: the 8-byte all-reduce's time per call in the engine's timeline beside
    the fit's price for that group; none where the tensor group is one rank; one table row per setting."""
    import json

    from benchmarks.engine_accuracy import by_sync, fitted, runs, sync_call

    path = ROOT / "docs" / "results" / "engine_accuracy_1x4_machine_run1.json"
    record = json.loads(path.read_text())
    machine = fitted(record, path)
    rows = {tuple(r["shape"]): r for r in record["rows"] if r["overlap_label"] == "none"}
    assert sync_call(rows[(1, 1, 1, 4)], machine) is None  # pure data parallelism: no tensor group
    took, price = sync_call(rows[(1, 2, 1, 2)], machine)
    call = rows[(1, 2, 1, 2)]["summary"]["groups"]["tensor"]
    assert took == call["flight_s"] / call["calls"] > 0
    assert price == machine.collective_s("all_reduce", 2, 1, 8) > 0
    all_runs = runs()
    lines = by_sync(all_runs)
    assert len(lines) == 2 + len({r["setting"] for r in all_runs})


def test_a_gpu_fit_prices_the_gpu_runs_recorded_with_it(tmp_path):
    """``engine_accuracy.py price``: the H200 record (docs/gpu.md) priced again, and a run on another device refused."""
    import json

    from benchmarks.engine_accuracy import price

    folder = ROOT / "docs" / "results" / "engine_model_h200"
    fit, bench = folder / "fit_cupy_p2.json", folder / "bench_engine_cupy_p2.json"
    lines = price(fit, bench)
    assert len(lines) == 8 + 2 and lines[-2].startswith("overlap off: median error 12.5%, pick / best 1.00")
    host = tmp_path / "host.json"
    host.write_text(json.dumps([{**r, "device": "host"} for r in json.loads(bench.read_text())]))
    with pytest.raises(SystemExit, match="the fit on cupy: it prices runs on its own device"):
        price(fit, host)


def test_other_shares_of_the_wait_reprice_the_records_without_changing_a_fit():
    """``engine_accuracy.py group-wait``: its first rule is the model's (``predict.group_wait_share``),
    every rule charges a group of all ranks the whole wait (the calibration grids', so no fit moves),
    and priced by the model's rule a recorded run scores as its record says."""
    import json

    from benchmarks.engine_accuracy import GROUP_WAIT_RULES, group_wait
    from gpulab.engine.perf.predict import group_wait_share

    rules = list(GROUP_WAIT_RULES.values())
    for g, p in ((2, 4), (2, 8), (4, 8)):
        assert rules[0](g, p) == group_wait_share(g, p)
    assert all(rule(p, p) == 1.0 for rule in rules for p in (4, 8))
    path = ROOT / "docs" / "results" / "engine_accuracy_2x2_block_100mbit_run1.json"
    validation = json.loads(path.read_text())["validation"]
    largest = max(validation[s]["stride-aware"]["median_abs_rel_error"] for s in ("off", "on"))
    lines = group_wait([path])
    assert len(lines) == len(rules)
    assert lines[0].endswith(f"runs meeting 1 of 1, error median {largest:.1%}, largest {largest:.1%}")
    assert len(set(line.split(" runs ")[1] for line in lines)) > 1  # the rules price the grids apart


def test_slow_rounds_counts_this_namespaces_tcp_retransmissions():
    """``slow_rounds.tcp_counts``: RetransSegs and TCPTimeouts read from this process's network namespace,
    counters that only grow."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from slow_rounds import tcp_counts

    first = tcp_counts()
    assert all(type(c) is int and c >= 0 for c in first)
    assert all(b >= a for a, b in zip(first, tcp_counts()))


def test_small_benchmarks_run_on_any_emulated_cluster_or_say_why_not():
    """``benchmarks/mpi_job.placement``: the small benchmarks' --link/--nodes/--placement options (the
    cluster is only described here, not started), and one-line errors for what cannot run."""
    import argparse
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from mpi_job import add_placement_args, placement

    parser = argparse.ArgumentParser()
    add_placement_args(parser)
    ranks, setting, cluster = placement(parser.parse_args(["--link", "1gbit"]), parser)
    assert (ranks, setting, cluster.nodes, cluster.placement) == (4, "2x2_block_1gbit", 2, "block")
    args = parser.parse_args(["--link", "100mbit", "--nodes", "4", "--placement", "round-robin"])
    ranks, setting, cluster = placement(args, parser)
    assert (ranks, setting, cluster.nodes, cluster.ranks_per_node) == (8, "4x2_round-robin_100mbit", 4, 2)
    assert placement(parser.parse_args([]), parser)[:2] == (4, "1x4_machine")
    for bad in (["--link", "1gbit", "--nodes", "1"], ["--link", "fast"], ["--ranks", "1"],
                ["--link", "1gbit", "--ranks", "8"]):
        with pytest.raises(SystemExit):
            placement(parser.parse_args(bad), parser)


def test_records_name_the_mpich_control_variables_they_ran_under(monkeypatch):
    """``benchmarks/mpi_job.typed_command``: a record measured with an MPICH algorithm forced at MPI_Init
    (``MPIR_CVAR_*`` in the environment) or the nodes' TCP set (``GPULAB_TCP_CONGESTION``) says so in front
    of its command, in an order that repeats."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from mpi_job import typed_command

    for name in [k for k in os.environ if k.startswith("MPIR_CVAR_") or k == "GPULAB_TCP_CONGESTION"]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(sys, "argv", ["slow_rounds.py", "--link", "100mbit"])
    assert typed_command("/x/benchmarks/slow_rounds.py") == "python benchmarks/slow_rounds.py --link 100mbit"
    monkeypatch.setenv("MPIR_CVAR_BCAST_TREE_KVAL", "1")
    monkeypatch.setenv("MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM", "ring")
    monkeypatch.setenv("GPULAB_TCP_CONGESTION", "reno")
    assert typed_command("slow_rounds.py") == ("GPULAB_TCP_CONGESTION=reno MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=ring "
                                               "MPIR_CVAR_BCAST_TREE_KVAL=1 "
                                               "python benchmarks/slow_rounds.py --link 100mbit")
