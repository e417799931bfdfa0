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


def _fake_jobs(monkeypatch) -> list[str]:
    """Replace the launcher: each native job writes one row timed at (its place in the launch order) us.
    Returns the variants in the order their jobs started."""
    started: list[str] = []

    def relaunch(p, argv, env):
        name = argv[argv.index("--native-variant") + 1]
        started.append(name)
        with open(argv[argv.index("--inner-out") + 1], "w") as f:
            json.dump({"native": [_row(name, float(len(started)))], "metadata": {}}, f)
        return 0

    monkeypatch.setattr(tune, "relaunch", relaunch)
    monkeypatch.setattr(tune, "outer", lambda args, results: results)
    return started


def _args(p: int, names: list[str], rounds: int):
    return tune.argparse.Namespace(ranks=[p], only_native=True, native_rounds=rounds, export=["mvapich2"],
                                   native=",".join(names), native_variant=None, chunks=[], what="bcast",
                                   quiet=True)


def test_native_jobs_run_in_rounds_whose_order_turns(monkeypatch):
    names = ["mpi", "mpi:binomial", "mpi:scatter_ring_allgather"]
    started = _fake_jobs(monkeypatch)
    results = tune._launch_each(_args(4, names, 3))
    assert started == names + names[1:] + names[:1] + names[2:] + names[:2]
    rounds = {r["algorithm"]: r["rounds_us"] for r in results[4]["native"]}
    assert rounds == {"mpi": [1.0, 6.0, 8.0], "mpi:binomial": [2.0, 4.0, 9.0],
                      "mpi:scatter_ring_allgather": [3.0, 5.0, 7.0]}


@pytest.mark.parametrize("rounds", [1, 2])
def test_fewer_rounds_still_give_one_row_per_variant(monkeypatch, rounds):
    started = _fake_jobs(monkeypatch)
    (row,) = tune._launch_each(_args(2, ["mpi"], rounds))[2]["native"]
    assert len(started) == rounds and row["avg_us"] == statistics.median([float(i + 1) for i in range(rounds)])
