"""The OSU-style harness and the ``gpulab bench bcast`` command."""

import csv
import json
import subprocess
import sys

import pytest

from gpulab.bcast.sizes import format_size, parse_size, size_range
from gpulab.cli.bench_output import format_table
from tests.mpi_harness import ROOT, run_mpi


@pytest.mark.parametrize("text,nbytes", [("1", 1), ("512B", 512), ("4K", 4096), ("64M", 64 << 20),
                                         ("2GiB", 2 << 30), (" 3 kb ", 3072), (17, 17)])
def test_parse_size(text, nbytes):
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("bad", ["", "K", "1.5M", "4X", "-1"])
def test_parse_size_rejects_garbage(bad):
    with pytest.raises(ValueError, match="not a size"):
        parse_size(bad)


def test_size_ranges():
    assert size_range("1K:64M") == [1024 << i for i in range(17)]
    assert size_range("1,3000,1M") == [1, 3000, 1 << 20]
    assert [format_size(n) for n in (1, 1536, 4096, 1 << 26)] == ["1B", "1.5K", "4K", "64M"]
    with pytest.raises(ValueError, match="from >= 1 byte up"):
        size_range("64M:1K")


def test_measurement_is_the_same_on_every_rank_and_validated():
    summaries = run_mpi(3, "tests.bcast.cases:measure", algorithm="chain", nbytes=10_000, timeout=60)
    assert all(s == summaries[0] for s in summaries)
    s = summaries[0]
    assert s["valid"] and s["p"] == 3 and s["iters"] == 5
    assert 0 < s["min_us"] <= s["avg_us"] <= s["max_us"]
    assert s["busbw_GBps"] == pytest.approx(10_000 / (s["avg_us"] * 1e-6) / 1e9)


def test_validation_catches_an_algorithm_that_moves_nothing():
    assert run_mpi(2, "tests.bcast.cases:measure_a_broken_algorithm", timeout=60) == [False, False]


def test_cli_launches_mpiexec_and_writes_json_csv_and_plot_with_every_rounds_interval(tmp_path):
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "gpulab.cli", "bench", "bcast", "-n", "2", "--algorithms", "binomial,chain,mpi",
           "--sizes", "1K:4K", "--iters", "3", "--warmup", "1", "--chunk-bytes", "1K", "--rounds", "6", "--quiet",
           "--json", f"{out}.json", "--csv", f"{out}.csv", "--plot", f"{out}.png"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "best: x faster than mpi [95%]" in done.stdout and "rounds per point: 6; stopped: 9 rounds as asked" in \
        done.stdout
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["schema"] == {"name": "gpulab-bench-bcast", "version": 3}
    assert report["metadata"]["ranks"] == 2 and "MPICH" in report["metadata"]["mpi"]
    (sweep,) = report["sweeps"]
    assert sweep["rounds"] == sweep["ran"] == 6 and sweep["stopped"] == "rounds"
    assert sweep["snapshot"] == report["snapshot"] and report["snapshot"]["ranks"] == 2
    assert report["snapshot"]["cores"] >= 1 and "load" in report["snapshot"]
    assert [(r["algorithm"], r["nbytes"]) for r in report["records"]][:3] == [
        ("binomial", 1024), ("chain", 1024), ("mpi", 1024)]
    assert report["records"][1]["options"] == {"chunk_bytes": 1024}
    for r in report["records"]:
        assert r["valid"] and r["rounds"] == 6 and len(r["rounds_us"]) == len(r["rounds_max_us"]) == 6
        for key, interval in (("avg_us", r["avg_interval_us"]), ("max_us", r["max_interval_us"])):
            assert interval["low"] <= interval["median"] == r[key] <= interval["high"]
            assert interval["n"] == 6 and interval["confidence"] >= 0.95
        assert min(r["rounds_us"]) <= r["avg_us"] <= max(r["rounds_us"])
    rows = list(csv.DictReader(out.with_suffix(".csv").open()))
    assert len(rows) == 9 and {r["schema_version"] for r in rows} == {"3"}
    assert all(float(r["avg_low_us"]) <= float(r["avg_us"]) <= float(r["avg_high_us"]) for r in rows)
    assert len(json.loads(rows[0]["rounds_us"])) == 6 and rows[0]["stopped"] == "rounds"
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_cli_measures_auto_and_says_what_it_chose(tmp_path):
    out = tmp_path / "auto.json"
    cmd = [sys.executable, "-m", "gpulab.cli", "bench", "bcast", "-n", "2", "--algorithms", "auto,mpi",
           "--sizes", "1K", "--iters", "3", "--warmup", "1", "--rounds", "2", "--quiet", "--json", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    auto = json.loads(out.read_text())["records"][0]
    assert auto["algorithm"] == "auto" and auto["valid"]
    assert set(auto["chose"]) == {"algorithm", "options", "source", "reason"}
    assert f"auto chose: 1K: {auto['chose']['algorithm']}" in done.stdout


def test_cli_rejects_unknown_algorithm():
    done = subprocess.run([sys.executable, "-m", "gpulab.cli", "bench", "bcast", "-n", "1", "--algorithms", "nope"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown algorithm(s) ['nope']" in done.stderr


def test_table_marks_failed_validation_and_compares_with_mpi():
    records = [{"algorithm": a, "nbytes": 1024, "avg_us": t, "valid": v, "p": 2}
               for a, t, v in (("chain", 10.0, False), ("mpi", 20.0, True))]
    table = format_table(records)
    assert "10.0!" in table and "chain (2.00x)" in table and "nothing moves" not in table
    alone = format_table([{**r, "p": 1} for r in records])  # NCCL on a one-GPU machine, say
    assert "on 1 rank nothing moves between ranks: these are the calls' fixed costs, not their speeds" in \
        alone.splitlines()
