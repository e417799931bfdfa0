"""The recorded column is read from docs/results, never typed: its numbers are the records', and change with them."""

import json
import shutil
from pathlib import Path

import pytest

from gpulab.scoreboard import recorded
from gpulab.scoreboard.board import all_claims
from gpulab.scoreboard.claim import NotMeasured

DOCS = Path(__file__).resolve().parents[2] / "docs" / "results"


def load(name):
    return json.loads((DOCS / name).read_text())


def max_us(records, algorithm, nbytes):
    return next(r["max_us"] for r in records if r["algorithm"] == algorithm and r["nbytes"] == nbytes
                and not (r.get("options") or {}).get("inter"))


def test_broadcast_rows_are_the_records_numbers():
    claims = all_claims()
    auto = load("emulated_auto.json")[0]["records"]
    largest = max(r["nbytes"] for r in auto)
    expected = max_us(auto, "mpi", largest) / next(r["max_us"] for r in auto if "chose" in r and r["nbytes"] == largest)
    assert claims["d"].recorded()["value"]["largest_speedup"] == pytest.approx(expected, rel=1e-12)
    rr = next(r for r in load("emulated_placement.json") if r["topology"]["placement"] == "round-robin")["records"]
    n = max(r["nbytes"] for r in rr)
    assert claims["c"].recorded()["value"]["speedup"] == pytest.approx(
        max_us(rr, "binomial", n) / max_us(rr, "hierarchical", n), rel=1e-12)
    chunks = load("emulated_chunks.json")[0]
    b = claims["b"].recorded()["value"]
    assert b["model_chunk"] == chunks["best_chunk"]
    assert b["best_chunk"] == min(chunks["records"], key=lambda r: r["max_us"])["options"]["chunk_bytes"]


def test_engine_and_training_rows_are_the_records_numbers():
    claims = all_claims()
    grid = load("engine_grid_p4.json")
    g = claims["g"].recorded()["value"]
    for key in ("spearman", "pick_over_best", "model_pick", "measured_best"):  # the benchmark's own validation
        assert g[key] == pytest.approx(grid["validation"]["none"][key], rel=1e-12)
    training = {r["algorithm"]: r["summary"]["step_s"]["median"] for r in load("emulated_training_4x1.json")["runs"]}
    assert claims["i"].recorded()["value"]["saving"] == pytest.approx(1 - training["auto"] / training["mpi"], rel=1e-12)


def test_a_changed_record_changes_the_row(tmp_path, monkeypatch):
    shutil.copytree(DOCS, tmp_path, dirs_exist_ok=True)
    data = json.loads((tmp_path / "emulated_training_4x1.json").read_text())
    for run in data["runs"]:
        if run["algorithm"] == "auto":
            run["summary"]["step_s"]["median"] = 2 * next(r for r in data["runs"]
                                                         if r["algorithm"] == "mpi")["summary"]["step_s"]["median"]
    (tmp_path / "emulated_training_4x1.json").write_text(json.dumps(data))
    monkeypatch.setenv(recorded.ENV_RESULTS, str(tmp_path))
    claim = all_claims()["i"]
    value = claim.recorded()["value"]
    assert value["saving"] == pytest.approx(-1.0)
    assert claim.judge(value, None)[0] == "does not hold here"


def test_a_missing_record_is_a_reason(tmp_path, monkeypatch):
    monkeypatch.setenv(recorded.ENV_RESULTS, str(tmp_path))
    for claim in all_claims().values():
        with pytest.raises(NotMeasured, match="no recorded"):
            claim.recorded()
