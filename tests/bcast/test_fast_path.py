"""The remembered path of repeated broadcasts keeps the API's checks; the bench's OSU / nccl-tests options
(percentiles, --dtype, --check, --back-to-back) and its versioned JSON/CSV schema (docs/bench_schema.md)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from gpulab.bcast.runtime import build
from tests.mpi_harness import ROOT, run_mpi

pytestmark = pytest.mark.timeout(300)

# Each test runs with the C entry (gpulab/bcast/runtime/fastpath.c) and with the Python one; C wherever an MPI
# compiler wrapper is found (tests/bcast/test_c_entry.py checks that the install then built it)
ENTRIES = [pytest.param("c", marks=pytest.mark.skipif(build.mpicc() is None, reason="no mpicc: no C entry")),
           "python"]


def _env(entry: str) -> dict:
    return {"GPULAB_FASTPATH": entry}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("algorithm", ["mpi", "binomial", "auto"])
def test_repeated_calls_still_refuse_bad_buffers_and_move_any_dtype(algorithm, entry):
    for rank, out in enumerate(run_mpi(2, "tests.bcast.fast_path_cases:repeated_calls_keep_their_checks",
                                       algorithm=algorithm, env=_env(entry), timeout=120)):
        assert out["entry"] == entry, f"rank {rank}: {out}"
        assert out["read_only"] == out["strided"] == out["fortran"] == "ValueError", f"rank {rank}: {out}"
        assert out["objects"] == "TypeError", f"rank {rank}: an object array's pointers: {out}"
        assert out["float16"] and out["datetime64[s]"] and out["V8"], f"rank {rank}: {out}"
        assert out["package_attribute_kept"], f"rank {rank}: gpulab.bcast.bcast is looked up on every call"


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("algorithm", ["mpi", "auto"])
def test_ranks_on_the_fast_and_the_checked_path_meet_in_mpi_bcast(algorithm, entry):
    rows = run_mpi(4, "tests.bcast.fast_path_cases:ranks_on_different_paths_meet", algorithm=algorithm,
                   env=_env(entry), timeout=60)
    assert rows == [[True] * 3 + [entry]] * 4, rows


@pytest.mark.parametrize("back_to_back", [False, True])
def test_percentiles_dtype_and_check(back_to_back):
    records = run_mpi(2, "tests.bcast.fast_path_cases:measure_with_options", algorithm="mpi", dtype="float32",
                      check=True, back_to_back=back_to_back, timeout=120)
    assert records[0] == records[1], "every rank returns the same record"
    r = records[0]
    assert (r["entry"], r["dtype"], r["count"], r["check"], r["errors"], r["valid"]) == \
        ("comm.Bcast", "float32", 1024, True, 0, True)
    assert r["mode"] == ("back-to-back" if back_to_back else "barrier")
    assert 0 < r["p50_us"] <= r["p90_us"] <= r["p99_us"]


def test_check_counts_every_failed_iteration():
    r = run_mpi(2, "tests.bcast.fast_path_cases:check_catches_a_broken_algorithm", timeout=120)[0]
    assert (r["errors"], r["valid"]) == (4, False)


def test_cli_options_and_versioned_schema(tmp_path):
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "gpulab.cli", "bench", "bcast", "-n", "2", "--algorithms", "mpi,binomial",
           "--sizes", "1K,4K", "--iters", "10", "--warmup", "1", "--dtype", "float64", "--check", "--back-to-back",
           "--rounds", "2", "--quiet", "--json", f"{out}.json", "--csv", f"{out}.csv"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    assert "back-to-back; mpi = bare comm.Bcast" in done.stdout
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["schema"] == {"name": "gpulab-bench-bcast", "version": 3}
    assert {r["dtype"] for r in report["records"]} == {"float64"} and all(r["check"] for r in report["records"])
    rows = list(csv.DictReader(out.with_suffix(".csv").open()))
    assert len(rows) == 4 and {r["schema_version"] for r in rows} == {"3"}
    assert float(rows[0]["p99_us"]) >= float(rows[0]["p50_us"]) > 0
    bad = subprocess.run([sys.executable, "-m", "gpulab.cli", "bench", "bcast", "-n", "2", "--sizes", "1K,3",
                          "--dtype", "float32"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "not whole numbers of float32" in bad.stderr


@pytest.mark.parametrize("entry", ENTRIES)
def test_the_lean_loop_traces_obeys_checking_and_catches_other_sizes(entry):
    root, leaf = run_mpi(2, "tests.bcast.fast_path_cases:repeated_binomial_follows_switches", env=_env(entry),
                         timeout=120)
    assert root["entry"] == leaf["entry"] == entry, (root, leaf)
    assert root["traced"] == 3 and leaf["traced"] == 0, (root, leaf)  # the root's send, each of 3 calls
    assert root["planned_while_tracing"] == leaf["planned_while_tracing"] == 0, (root, leaf)
    assert root["planned_after"] > 0 and leaf["planned_after"] > 0, (root, leaf)  # the fast path again
    assert root["mismatch"] == leaf["mismatch"] == "BcastArgumentMismatch", (root, leaf)
    assert root["larger"] == root["smaller"] == "nothing raised", root  # the root's sends go out
    assert "expected 1024 bytes from rank 0 but was sent more" in leaf["larger"], leaf
    assert "expected 1024 bytes from rank 0 but got 512" in leaf["smaller"], leaf
