"""How a row is put together: live first, else the record, else why not; 'needs a GPU' only for GPU claims; an
inconclusive live verdict says how busy the machine was and what to try; the record's own verdict beside it."""

import json

import pytest

from gpulab.host import Snapshot
from gpulab.scoreboard import board
from gpulab.scoreboard.claim import DOES_NOT_HOLD, HOLDS, INCONCLUSIVE, NEEDS_GPU, Claim, NotMeasured
from gpulab.scoreboard.jobs import Bench, JobFailed


def judge(value, model):
    verdict = HOLDS if value["x"] > 1 else DOES_NOT_HOLD if value["x"] < 1 else INCONCLUSIVE
    return verdict, f"x = {value['x']}, model {model}"


def fake(live=None, recorded=None, model=None, gpu=False):
    def part(result, err):
        def fn(*_):
            if result is None:
                raise err
            return dict(result)
        return fn
    return Claim("z", "a made-up claim", {"value": "none", "source": "here"},
                 part(live, JobFailed("job failed here")), part(recorded, NotMeasured("no record")),
                 part(model, NotMeasured("no model")), judge, gpu=gpu)


def test_live_decides_and_carries_its_model():
    live = {"value": {"x": 2}, "text": "2", "where": "there", "model": {"value": {"m": 1}, "text": "1", "source": "s"}}
    row = board.evaluate(fake(live, {"value": {"x": 0}, "text": "0", "source": "docs"}), Bench())
    assert row["verdict"] == HOLDS and row["verdict_from"] == "this run" and row["model"]["value"] == {"m": 1}
    assert "model" not in row["live"] and "there" in row["why"]


def test_without_live_the_record_decides_and_says_why():
    row = board.evaluate(fake(None, {"value": {"x": 0}, "text": "0", "source": "docs"},
                              {"value": {"m": 2}, "text": "2", "source": "s"}), Bench())
    assert row["verdict"] == DOES_NOT_HOLD and row["verdict_from"] == "the recorded run"
    assert row["live_reason"] == "job failed here" and "job failed here" in row["why"]
    assert row["recorded_verdict"] == DOES_NOT_HOLD and row["machine"] is None


def test_an_inconclusive_live_row_says_how_busy_the_machine_was_and_what_to_try():
    busy = Snapshot(cores=2, load=7.5, ranks=4)

    def live(bench):
        bench.snapshots.append(busy)  # as Bench.run does before each job
        return {"value": {"x": 1}, "text": "1", "where": "there"}

    claim = Claim("z", "a made-up claim", {"value": "none", "source": "here"}, live,
                  lambda: {"value": {"x": 2}, "text": "2", "source": "docs"},
                  lambda bench: {"value": {"m": 1}, "text": "1", "source": "s"}, judge)
    row = board.evaluate(claim, Bench(quick=True))
    assert row["verdict"] == INCONCLUSIVE and row["recorded_verdict"] == HOLDS
    assert row["machine"] == busy.to_dict() and "load 7.5" in row["why"] and "2 per core" in row["why"]
    assert "--claims z --rounds 12" in row["why"] and "rerun when the machine is idle" in row["why"]


def test_rounds_default_by_mode_and_can_be_raised():
    assert (Bench(quick=True).rounds, Bench(quick=False).rounds, Bench(rounds=9).rounds) == (6, 10, 9)


@pytest.mark.parametrize("gpu, verdict", [(True, NEEDS_GPU), (False, INCONCLUSIVE)])
def test_with_nothing_measured(gpu, verdict):
    row = board.evaluate(fake(gpu=gpu), Bench())
    assert row["verdict"] == verdict and row["verdict_from"] is None
    assert {"live_reason", "recorded_reason", "model_reason"} <= set(row)


def test_run_refuses_unknown_claims_and_table_renders():
    with pytest.raises(ValueError, match="unknown claim"):
        board.run(claims=("a", "zz"))
    row = board.evaluate(fake(None, {"value": {"x": 2}, "text": "two", "source": "docs"}), Bench())
    html = board.table([row])._repr_html_()
    assert "<table>" in html and "two" in html and HOLDS in html and board.outcomes([row]) == {"z": HOLDS}
    assert "(z) a made-up claim" in repr(board.table([row]))


def test_a_written_record_loads_back(tmp_path):
    row = board.evaluate(fake(None, {"value": {"x": 2}, "text": "two", "source": "docs"}), Bench())
    board.write_json(tmp_path / "s.json", [row], quick=True, seconds=1.0)
    assert board.load(tmp_path / "s.json") == [row]
    data = json.loads((tmp_path / "s.json").read_text())
    (tmp_path / "old.json").write_text(json.dumps({**data, "schema_version": 0}))
    with pytest.raises(ValueError, match="schema 0"):
        board.load(tmp_path / "old.json")


def test_a_live_verdict_contradicts_only_a_decisive_record_with_the_opposite_outcome():
    def rows(**verdicts):
        return [{"id": i, "verdict": v, "why": f"why {i}"} for i, v in verdicts.items()]

    recorded = rows(a=HOLDS, b=HOLDS, c=DOES_NOT_HOLD, d=INCONCLUSIVE, e=HOLDS, g=NEEDS_GPU)
    live = rows(a=HOLDS, b=INCONCLUSIVE, c=HOLDS, d=DOES_NOT_HOLD, e=DOES_NOT_HOLD, f=HOLDS, g=NEEDS_GPU)
    found = board.contradictions(live, recorded)
    assert [line[:3] for line in found] == ["(c)", "(e)"]
    assert found[1] == f"(e) {DOES_NOT_HOLD} now, {HOLDS} recorded: why e"
    assert board.contradictions(recorded, recorded) == []
