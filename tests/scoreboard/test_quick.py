"""``gpulab scoreboard --quick --json F`` runs every claim and writes rows that hold together: each verdict one of
the outcomes and following from the row's intervals, the machine's state beside a live one."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.scoreboard import SCHEMA_VERSION
from gpulab.scoreboard.board import all_claims
from gpulab.scoreboard.claim import INCONCLUSIVE, VERDICTS, NotMeasured
from gpulab.scoreboard.jobs import ROUNDS, Bench

ROOT = Path(__file__).resolve().parents[2]


def gpulab(*argv, timeout):
    env = {k: v for k, v in os.environ.items() if k not in ("GPULAB_LAUNCHED", "PMI_RANK", "PMI_SIZE")}
    return subprocess.run([sys.executable, "-m", "gpulab.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, env={**env, "PYTHONPATH": str(ROOT)}, cwd=ROOT)


def recorded_model(claim):
    try:
        return claim.model(Bench(quick=True))["value"]
    except NotMeasured:
        return None


@pytest.mark.timeout(900)  # about 3.5 minutes on 2 busy cores (load 11); CI's 2 cores may be busier
def test_quick_scoreboard_rows(tmp_path):
    out = tmp_path / "scoreboard.json"
    run = gpulab("scoreboard", "--quick", "--json", str(out), timeout=880)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["schema_version"] == SCHEMA_VERSION and record["quick"] is True
    claims = all_claims()
    assert [r["id"] for r in record["rows"]] == list(claims)
    for row in record["rows"]:
        claim = claims[row["id"]]
        assert row["paper"]["value"] and row["paper"]["source"], row["id"]
        for part in ("live", "recorded", "model"):  # a value, or a stated reason
            assert (row[part] is not None and row[part]["text"]) or row.get(f"{part}_reason"), (row["id"], part)
        assert row["live"] is not None or claim.gpu, (row["id"], row.get("live_reason"))  # CPU claims run here
        assert row["verdict"] in VERDICTS and row["why"], row["id"]
        # the verdict follows from the numbers it was given
        basis = row["live"] if row["verdict_from"] == "this run" else row["recorded"]
        if basis is not None:
            model = row["model"]["value"] if row["model"] else None
            assert claim.judge(basis["value"], model)[0] == row["verdict"], row["id"]
        else:
            assert row["verdict"] == "needs a GPU" and claim.gpu, row["id"]
        if row["verdict_from"] == "this run":  # measured in rounds, beside the machine's state before its jobs
            assert row["rounds"] == ROUNDS[True] and row["machine"]["cores"] >= 1, row["id"]
            assert row["verdict"] != INCONCLUSIVE or "the machine before the jobs" in row["why"], row["id"]
        if row["recorded"] is not None:  # what the docs hold, read now, not typed in, judged by the same rule
            assert row["recorded"]["value"] == json.loads(json.dumps(claim.recorded()["value"])), row["id"]
            assert claim.judge(row["recorded"]["value"], recorded_model(claim))[0] == row["recorded_verdict"], row["id"]
    for claim in claims:  # progress: one line as each claim starts and one as it ends
        assert f"[{claim}] " in run.stderr and run.stderr.count(f"[{claim}] ") == 2, run.stderr
    assert "claims in" in run.stdout


@pytest.mark.parametrize("argv, says", [(["--claims", "a,zz"], "unknown claim(s) ['zz']"),
                                        (["--claims", ","], "unknown claim(s) []"),
                                        (["--json", "/etc/hostname/x.json"], "argument --json: cannot write")])
def test_bad_arguments_are_one_line(argv, says):
    run = gpulab("scoreboard", *argv, timeout=120)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1 and says in run.stderr, run.stderr
    assert not run.stdout
