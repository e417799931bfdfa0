"""The recorded column is read from docs/results, never typed: its numbers are the records', and change with them;
a record of one run decides nothing, a record with per-round samples gives intervals and decides."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gpulab import stats
from gpulab.engine.perf.pick_validation import validate
from gpulab.scoreboard import recorded
from gpulab.scoreboard.board import all_claims
from gpulab.scoreboard.claim import DOES_NOT_HOLD, HOLDS, INCONCLUSIVE, NotMeasured

DOCS = Path(__file__).resolve().parents[2] / "docs" / "results"


def load(name):
    return json.loads((DOCS / name).read_text())


def max_us_rounds(records, algorithm, nbytes, where=lambda r: True):
    """A point's slowest-rank times, one per round (a record of one run: its one time)."""
    row = next(r for r in records if r["algorithm"] == algorithm and r["nbytes"] == nbytes
               and not (r.get("options") or {}).get("inter") and where(r))
    return row.get("max_us_rounds") or [row["max_us"]]


def test_broadcast_rows_are_the_records_numbers():
    """A recorded row's ratio is the records' rounds paired: the median of the per-round ratios."""
    claims = all_claims()
    auto = load("emulated_auto.json")[0]["records"]
    largest = max(r["nbytes"] for r in auto)
    expected = stats.paired_ratio(max_us_rounds(auto, "mpi", largest),
                                  max_us_rounds(auto, "auto", largest, lambda r: "chose" in r)).median
    assert claims["d"].recorded()["value"]["largest_speedup"]["median"] == pytest.approx(expected, rel=1e-12)
    rr = next(r for r in load("emulated_placement.json") if r["topology"]["placement"] == "round-robin")["records"]
    n = max(r["nbytes"] for r in rr)
    assert claims["c"].recorded()["value"]["speedup"]["median"] == pytest.approx(
        stats.paired_ratio(max_us_rounds(rr, "binomial", n), max_us_rounds(rr, "hierarchical", n)).median, rel=1e-12)
    chunks = load("emulated_chunks.json")[0]
    b = claims["b"].recorded()["value"]
    assert b["model_chunk"] == chunks["best_chunk"]
    assert b["best_chunk"] == min(chunks["records"], key=lambda r: r["max_us"])["options"]["chunk_bytes"]


def test_engine_and_training_rows_are_the_records_numbers():
    claims = all_claims()
    rows = [r for r in load("engine_grid_p4.json")["rows"] if r["overlap_label"] == "none"]
    g = claims["g"].recorded()["value"]
    by_median = validate([{**r, "iter_s": float(np.median(r["iter_s_rounds"]))} for r in rows])  # each grid's rounds
    for key in ("spearman", "model_pick", "measured_best"):
        assert g[key] == pytest.approx(by_median[key], rel=1e-12)
    pick, best = (next(r["iter_s_rounds"] for r in rows if r["shape"] == g[k]) for k in ("model_pick", "measured_best"))
    assert g["pick_over_best"] == stats.paired_ratio(pick, best).to_dict()
    training = {r["algorithm"]: r["summary"]["step_ms"]["median"] for r in load("emulated_training_4x1.json")["runs"]}
    assert claims["i"].recorded()["value"]["auto_over_mpi"]["median"] == pytest.approx(
        training["auto"] / training["mpi"], rel=1e-12)


def copy_records(tmp_path, monkeypatch, name, change):
    shutil.copytree(DOCS, tmp_path, dirs_exist_ok=True)
    data = json.loads((tmp_path / name).read_text())
    change(data)
    (tmp_path / name).write_text(json.dumps(data))
    monkeypatch.setenv(recorded.ENV_RESULTS, str(tmp_path))


def test_a_changed_record_changes_the_row(tmp_path, monkeypatch):
    def slower_auto(data):
        for run in data["runs"]:
            if run["algorithm"] == "auto":
                for steps in run["ranks"]:
                    for step in steps:
                        step["bcast_s"] *= 10
    copy_records(tmp_path, monkeypatch, "emulated_training_4x1.json", slower_auto)
    claim = all_claims()["i"]
    value = claim.recorded()["value"]
    assert value["auto_over_mpi"]["low"] > 1
    assert claim.judge(value, None)[0] == DOES_NOT_HOLD


def test_a_single_run_decides_nothing_and_rounds_decide(tmp_path, monkeypatch):
    claim = all_claims()["c"]

    def one_run(data):  # a record of one run per point
        for run in data:
            for r in run["records"]:
                r.pop("max_us_rounds", None)
    copy_records(tmp_path / "one", monkeypatch, "emulated_placement.json", one_run)
    verdict, why = claim.judge(claim.recorded()["value"], None)
    assert verdict == INCONCLUSIVE and "one run" in why

    def with_rounds(data):  # 6 rounds each, as benchmarks/emulated_bcast.py now records them
        for run in data:
            for i, r in enumerate(run["records"]):  # each point's rounds in its own order
                r["max_us_rounds"] = [r["max_us"] * f for f in np.roll([0.97, 1.0, 1.02, 0.99, 1.03, 1.01], i)]
    copy_records(tmp_path / "rounds", monkeypatch, "emulated_placement.json", with_rounds)
    value = claim.recorded()["value"]
    speedup = value["speedup"]
    assert speedup["n"] == 6 and speedup["low"] < speedup["median"] < speedup["high"]
    assert claim.judge(value, None)[0] == HOLDS  # hierarchical ~1.9x faster, every round


def test_a_missing_record_is_a_reason(tmp_path, monkeypatch):
    monkeypatch.setenv(recorded.ENV_RESULTS, str(tmp_path))
    for claim in all_claims().values():
        with pytest.raises(NotMeasured, match="no recorded"):
            claim.recorded()
