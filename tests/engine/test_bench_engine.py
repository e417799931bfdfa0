"""``gpulab bench engine`` on two real ranks: each row is the median over its rounds, with the interval."""

import json
import statistics
import subprocess
import sys

import pytest

from tests.mpi_harness import ROOT


def test_bench_engine_rows_are_medians_over_interleaved_rounds(tmp_path):
    out = tmp_path / "rows.json"
    cmd = [sys.executable, "-m", "gpulab.cli", "bench", "engine", "-n", "2", "--shapes", "1,1,1,2;2,1,1,1",
           "--overlap", "none", "--iters", "2", "--warmup", "0", "--rounds", "3", "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rounds = [line for line in done.stdout.splitlines() if line.startswith("round ")]
    assert [line.split()[1] for line in rounds] == ["1/3", "1/3", "2/3", "2/3", "3/3", "3/3"]  # interleaved
    rows = json.loads(out.read_text())
    assert [r["shape"] for r in rows] == [[1, 1, 1, 2], [2, 1, 1, 1]]
    for r in rows:
        assert r["rounds"] == len(r["iter_s_rounds"]) == 3
        assert r["iter_s"] == pytest.approx(statistics.median(r["iter_s_rounds"]))
        interval = r["iter_s_interval"]
        assert interval["low"] <= r["iter_s"] == interval["median"] <= interval["high"] and interval["n"] == 3
        assert r["tokens_per_s"] == pytest.approx(r["batch_size"] * r["seq_len"] / r["iter_s"])
        assert f"{tuple(r['shape'])}" in done.stdout and "(n=3, 75%)" in done.stdout
