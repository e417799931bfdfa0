"""`gpulab tune bcast --export`: the native variants' jobs run in rounds whose order turns, and each row
keeps the median of its rounds (no MPI job is started: the launcher is replaced by a fake)."""

from __future__ import annotations

import json
import statistics

import pytest

from gpulab.cli import tune


def _row(name: str, us: float, valid: bool = True) -> dict:
    return {"algorithm": name, "nbytes": 1024, "avg_us": us, "options": {}, "valid": valid}


def test_merge_keeps_the_median_round_and_every_round_measured():
    result: dict = {}
    for us, valid in ((50.0, True), (10.0, True), (30.0, False)):
        tune.merge(result, {"native": [_row("mpi", us, valid)], "metadata": {"load": us}})
    (row,) = result["native"]
    assert row["rounds_us"] == [50.0, 10.0, 30.0]
    assert row["avg_us"] == statistics.median([50.0, 10.0, 30.0]) == 30.0  # not the fastest (10)
    assert row["valid"] is False  # one invalid round makes the row invalid
    assert result["metadata"] == {"load": 50.0}  # the first job's metadata is kept


def test_native_jobs_run_in_rounds_whose_order_turns(monkeypatch, tmp_path):
    names = ["mpi", "mpi:binomial", "mpi:scatter_ring_allgather"]
    started = []

    def relaunch(p, argv, env):
        name = argv[argv.index("--native-variant") + 1]
        started.append(name)
        out = argv[argv.index("--inner-out") + 1]
        with open(out, "w") as f:
            json.dump({"native": [_row(name, float(len(started)))], "metadata": {}}, f)
        return 0

    monkeypatch.setattr(tune, "relaunch", relaunch)
    monkeypatch.setattr(tune, "outer", lambda args, results: results)
    args = tune.argparse.Namespace(ranks=[4], only_native=True, native_rounds=3, export=["mvapich2"],
                                   native=",".join(names), native_variant=None, chunks=[], what="bcast",
                                   quiet=True)
    results = tune._launch_each(args)
    assert started == names + names[1:] + names[:1] + names[2:] + names[:2]
    rounds = {r["algorithm"]: r["rounds_us"] for r in results[4]["native"]}
    assert rounds == {"mpi": [1.0, 6.0, 8.0], "mpi:binomial": [2.0, 4.0, 9.0],
                      "mpi:scatter_ring_allgather": [3.0, 5.0, 7.0]}


@pytest.mark.parametrize("rounds", [1, 2])
def test_fewer_rounds_still_give_one_row_per_variant(monkeypatch, rounds):
    calls = []

    def relaunch(p, argv, env):
        calls.append(1)
        out = argv[argv.index("--inner-out") + 1]
        with open(out, "w") as f:
            json.dump({"native": [_row(argv[argv.index("--native-variant") + 1], 5.0 * len(calls))]}, f)
        return 0

    monkeypatch.setattr(tune, "relaunch", relaunch)
    monkeypatch.setattr(tune, "outer", lambda args, results: results)
    args = tune.argparse.Namespace(ranks=[2], only_native=True, native_rounds=rounds, export=["mvapich2"],
                                   native="mpi", native_variant=None, chunks=[], what="bcast", quiet=True)
    (row,) = tune._launch_each(args)[2]["native"]
    assert len(calls) == rounds and row["avg_us"] == statistics.median([5.0 * (i + 1) for i in range(rounds)])
