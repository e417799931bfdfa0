"""The bench's interleaved rounds without MPI: a fake measurement with a known spread, a fake clock.

``sweep_rounds`` must give each point the median and interval of exactly the samples it measured, turn the
order from round to round, close a point once its interval is narrow, and say why it stopped."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from gpulab.bcast.measurement import rounds
from gpulab.bcast.measurement.results import over_rounds
from gpulab.cli.bench_output import format_table, speedup
from gpulab.stats import median_interval


class OneRank:
    """Enough of a communicator for the sweep's decisions: one rank, whose bcast is the identity."""

    rank, size = 0, 1

    def bcast(self, value, root=0):
        return value


def fake_measure(monkeypatch, times: dict, clock: dict | None = None, step_s: float = 1.0) -> list:
    """Replace ``measure_bcast``: (algorithm, nbytes) gets the next of ``times[algorithm]`` (cycled) as its
    avg_us, its slowest rank 10% more; each call advances ``clock`` by ``step_s``. Returns the calls made."""
    calls, streams = [], {a: itertools.cycle(t) for a, t in times.items()}

    def measure_bcast(comm, algorithm, nbytes, **kwargs):
        calls.append((algorithm, nbytes))
        if clock is not None:
            clock["now"] += step_s
        avg = next(streams[algorithm])
        return {"algorithm": algorithm, "nbytes": nbytes, "p": 2, "options": {}, "avg_us": avg, "min_us": avg * 0.9,
                "max_us": avg * 1.1, "iters": 10, "errors": 0, "valid": True}

    monkeypatch.setattr(rounds, "measure_bcast", measure_bcast)
    if clock is not None:
        monkeypatch.setattr(rounds, "time", SimpleNamespace(monotonic=lambda: clock["now"]))
    return calls


def test_a_fixed_number_of_rounds_gives_each_point_the_interval_of_its_samples(monkeypatch):
    spread = [100.0, 90.0, 130.0, 105.0, 95.0, 120.0, 110.0]
    fake_measure(monkeypatch, {"chain": spread, "mpi": [200.0]})
    records, sweep = rounds.sweep_rounds(OneRank(), ["chain", "mpi"], [1024], rounds=7)
    chain, mpi = records
    assert chain["rounds_us"] == spread and chain["rounds"] == 7 and chain["stopped"] == "rounds"
    expected = median_interval(spread)  # n = 7: the whole range, 98.4%
    assert chain["avg_us"] == expected.median == 105.0
    assert chain["avg_interval_us"] == expected.to_dict()
    assert (chain["avg_interval_us"]["low"], chain["avg_interval_us"]["high"]) == (90.0, 130.0)
    assert chain["max_interval_us"]["median"] == pytest.approx(105.0 * 1.1)
    assert chain["busbw_GBps"] == pytest.approx(1024 / 105.0 / 1e3)
    assert mpi["avg_interval_us"]["low"] == mpi["avg_interval_us"]["high"] == 200.0
    assert sweep == {"rounds": 7, "target": None, "budget_s": None, "max_rounds": None, "ran": 7,
                     "seconds": sweep["seconds"], "stopped": "rounds"}


def test_the_order_turns_from_round_to_round_and_every_point_is_measured_once_a_round(monkeypatch):
    calls = fake_measure(monkeypatch, {a: [10.0] for a in ("a", "b", "c")})
    rounds.sweep_rounds(OneRank(), ["a", "b", "c"], [1, 2], rounds=4)
    per_round = [calls[i:i + 6] for i in range(0, 24, 6)]
    assert all(sorted(r) == sorted(per_round[0]) for r in per_round)
    assert len({tuple(r) for r in per_round}) == 4  # four rounds, four orders
    assert per_round[0] == [("a", 1), ("b", 1), ("c", 1), ("a", 2), ("b", 2), ("c", 2)]


def test_a_steady_point_closes_once_narrow_and_a_noisy_one_goes_on_to_the_round_limit(monkeypatch):
    steady = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]  # within 1% of its median
    noisy = [100.0, 300.0]  # half-width 100% of the median, whatever the count
    calls = fake_measure(monkeypatch, {"steady": steady, "noisy": noisy})
    records, sweep = rounds.sweep_rounds(OneRank(), ["steady", "noisy"], [64], target=0.05, max_rounds=9)
    steady_row, noisy_row = records
    assert steady_row["rounds"] == rounds.MIN_ROUNDS and steady_row["stopped"] == "narrow"
    assert median_interval(steady_row["rounds_us"]).half_width <= 0.05
    assert noisy_row["rounds"] == 9 and noisy_row["stopped"] == "max_rounds"
    assert calls.count(("steady", 64)) == 6 and calls.count(("noisy", 64)) == 9
    assert sweep["stopped"] == "max_rounds" and sweep["ran"] == 9 and sweep["target"] == 0.05


def test_every_point_narrow_ends_the_sweep_early(monkeypatch):
    fake_measure(monkeypatch, {"a": [50.0, 51.0], "b": [70.0]})
    records, sweep = rounds.sweep_rounds(OneRank(), ["a", "b"], [8], target=0.05)
    assert sweep["stopped"] == "narrow" and sweep["ran"] == rounds.MIN_ROUNDS
    assert {r["stopped"] for r in records} == {"narrow"}
    assert all(r["avg_interval_us"]["confidence"] >= 0.95 for r in records)


def test_the_budget_stops_the_sweep_before_a_round_that_would_overrun_it(monkeypatch):
    clock = {"now": 0.0}
    fake_measure(monkeypatch, {"a": [10.0, 30.0], "b": [20.0, 60.0]}, clock=clock, step_s=1.0)
    records, sweep = rounds.sweep_rounds(OneRank(), ["a", "b"], [8], target=0.05, budget_s=9.0)
    # two points at 1 s each: rounds end at 2, 4, 6, 8 s; a fifth would end at 10 s > 9 s
    assert sweep["stopped"] == "budget" and sweep["ran"] == 4 and sweep["seconds"] == 8.0
    assert all(r["stopped"] == "budget" and r["rounds"] == 4 for r in records)
    interval = records[0]["avg_interval_us"]
    assert interval["confidence"] < 0.95 and (interval["low"], interval["high"]) == (10.0, 30.0)  # says it


def test_over_rounds_keeps_the_worst_of_every_round():
    base = {"algorithm": "chain", "nbytes": 1000, "p": 2, "options": {}, "min_us": 1.0, "max_us": 2.0}
    rows = [dict(base, avg_us=1.5, iters=9, errors=0, valid=True), dict(base, avg_us=1.7, iters=5, errors=2,
                                                                        valid=False)]
    row = over_rounds(rows, run=3)
    assert row["iters"] == 5 and row["errors"] == 2 and row["valid"] is False and row["run"] == 3
    assert row["avg_us"] == pytest.approx(1.6) and row["rounds"] == 2  # an even count: the middle two's mean


def _record(algorithm: str, samples: list[float], valid: bool = True) -> dict:
    rows = [{"algorithm": algorithm, "nbytes": 1024, "p": 2, "options": {}, "avg_us": t, "valid": valid}
            for t in samples]
    return over_rounds(rows, stopped="rounds")


def test_the_table_shows_each_median_with_its_interval_and_the_paired_ratio_to_mpi():
    chain = _record("chain", [10.0, 11.0, 9.0, 10.0, 10.5, 9.5], valid=False)
    mpi = _record("mpi", [20.0, 22.0, 18.0, 20.0, 21.0, 19.0])
    table = format_table([chain, mpi], {"cores": 2, "load": 7.5, "ranks": 2, "ranks_per_core": 1.0})
    assert "10.0 ±10%!" in table and "20.0 ±10%" in table  # the larger half of [9, 11] and of [18, 22]
    assert "chain (2.00x [2.00, 2.00])" in table  # every round's pair took exactly twice as long
    assert "rounds per point: 6; stopped: 2 rounds as asked" in table
    assert "machine before the job: 2 cores, load 7.5, 2 ranks (1 per core); busy: rerun when" in table


def test_a_native_variant_is_compared_without_pairs():
    """A native variant ran in a job of its own: its rounds are not the rounds of mpi."""
    mpi = _record("mpi", [20.0, 22.0, 18.0, 20.0, 21.0, 19.0])
    variant = _record("mpi:binomial", [10.0, 11.0, 9.0, 10.0, 10.5, 9.5])
    ratio = speedup(mpi, variant)
    assert ratio.median == pytest.approx(2.0) and ratio.low < 2.0 < ratio.high  # a bootstrap's spread


def test_one_round_shows_no_interval_and_says_how_sure_few_rounds_are():
    records = [_record("chain", [10.0]), _record("mpi", [20.0])]
    table = format_table(records)
    row = table.split("\n")[2]
    assert row.split() == ["1K", "10.0", "20.0", "chain", "(2.00x)"]  # no ± and no interval of the ratio
    assert "with fewer than 6 rounds no pair of rounds brackets the median at 95%" in table
