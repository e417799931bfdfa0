"""Native variants (mpi:<MPICH algorithm>): names, the control variables they set, their jobs in gpulab bench."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpulab.bcast.measurement import native_variants as nv
from tests.mpi_harness import ROOT

pytestmark = pytest.mark.timeout(300)


def test_a_chain_inside_mpich_is_a_pipelined_kary_tree_with_k_1():
    env = nv.environment("mpi:pipelined_tree/kary/1", chunk_bytes=256 << 10)
    assert {k: v for k, v in env.items() if k.startswith("MPIR_")} == {
        "MPIR_CVAR_BCAST_INTRA_ALGORITHM": "pipelined_tree", "MPIR_CVAR_BCAST_TREE_TYPE": "kary",
        "MPIR_CVAR_BCAST_TREE_KVAL": "1", "MPIR_CVAR_BCAST_TREE_PIPELINE_CHUNK_SIZE": "262144"}
    assert env[nv.ENV] == "mpi:pipelined_tree/kary/1@256K"
    # the row's name carries its chunk: the same variables come back from it
    assert nv.environment(env[nv.ENV]) == env


def test_radix_becomes_kval_and_names_the_row():
    env = nv.environment("mpi:pipelined_tree/knomial_1", radix=4, chunk_bytes=3000)
    assert env["MPIR_CVAR_BCAST_TREE_KVAL"] == "4" and env["MPIR_CVAR_BCAST_TREE_TYPE"] == "knomial_1"
    assert env[nv.ENV] == "mpi:pipelined_tree/knomial_1/4@3000"
    assert nv.environment("mpi:binomial", chunk_bytes=1 << 20, radix=4) == {
        "MPIR_CVAR_BCAST_INTRA_ALGORITHM": "binomial", nv.ENV: "mpi:binomial"}  # binomial takes neither
    assert nv.environment("mpi") == {}


@pytest.mark.parametrize("name, why", [
    ("mpi:foo", "MPICH has no broadcast algorithm 'foo'"),
    ("mpi:binomial/kary", "only pipelined_tree and tree take a tree type"),
    ("mpi:tree/ternary", "tree type one of"),
    ("mpi:tree/kary/0", "k must be a whole number >= 1"),
    ("binomial", "is not a native variant")])
def test_bad_names_say_what_is_valid(name, why):
    with pytest.raises(ValueError, match=why):
        nv.parse(name)


def test_selection_leaf_carries_tree_type_k_and_chunk():
    assert nv.selection_leaf("mpi:pipelined_tree/kary/1@256K") == (
        "algorithm=MPIR_Bcast_intra_pipelined_tree", {"tree_type=kary": {}, "k=1": {}, "chunk_size=262144": {}})
    assert nv.selection_leaf("mpi:scatter_ring_allgather") == ("algorithm=MPIR_Bcast_intra_scatter_ring_allgather", {})


def test_another_library_is_refused_by_name():
    with pytest.raises(ValueError, match="Open MPI v4.1.4"):
        nv.check_library("Open MPI v4.1.4, package: Debian OpenMPI", "mpi:binomial")
    nv.check_library("MPICH Version:      5.0.2", "mpi:binomial")


def _gpulab(*args, env=None):
    full = {k: v for k, v in os.environ.items() if k != "GPULAB_CLUSTER" and not k.startswith("MPIR_CVAR_")}
    full.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run([sys.executable, "-m", "gpulab.cli", *args], capture_output=True, text=True,
                          timeout=240, env=full, cwd=ROOT)


def test_bench_runs_each_variant_in_its_own_job_and_merges_the_rows(tmp_path):
    """Each job runs its points in rounds, in its share of the time budget (by its number of algorithms)."""
    out = tmp_path / "bench.json"
    run = _gpulab("bench", "bcast", "-n", "2", "--sizes", "1K,64K", "--algorithms",
                  "chain,mpi,mpi:binomial,mpi:pipelined_tree/kary/1", "--chunk-bytes", "16K", "--iters", "3",
                  "--warmup", "1", "--budget", "8", "--quiet", "--json", str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(out.read_text())
    names = [r["algorithm"] for r in report["records"]]
    assert sorted(set(names)) == ["chain", "mpi", "mpi:binomial", "mpi:pipelined_tree/kary/1@16K"]
    assert all(r["valid"] for r in report["records"]), "a native variant's MPI_Bcast delivered wrong bytes"
    chain = next(r for r in report["records"] if r["algorithm"] == "mpi:pipelined_tree/kary/1@16K")
    assert chain["options"]["MPIR_CVAR_BCAST_TREE_PIPELINE_CHUNK_SIZE"] == "16384"
    assert [job["algorithms"] for job in report["metadata"]["jobs"]] == [
        ["chain", "mpi"], ["mpi:binomial"], ["mpi:pipelined_tree/kary/1"]]
    assert "mpi:pipelined_tree/kary/1@16K" in run.stdout  # the table has its column
    sweeps = report["sweeps"]
    assert [s["algorithms"] for s in sweeps] == [["chain", "mpi"], ["mpi:binomial"], ["mpi:pipelined_tree/kary/1@16K"]]
    assert [s["budget_s"] for s in sweeps] == [4.0, 2.0, 2.0]
    assert all(s["snapshot"]["ranks"] == 2 and s["stopped"] in ("narrow", "budget", "max_rounds") for s in sweeps)
    for r in report["records"]:
        assert r["rounds"] == len(r["rounds_us"]) >= 1 and r["stopped"] in ("narrow", "budget", "max_rounds")
        assert r["avg_interval_us"]["low"] <= r["avg_us"] <= r["avg_interval_us"]["high"]


def test_bench_refuses_a_variant_inside_a_job_it_did_not_start():
    run = _gpulab("bench", "bcast", "-n", "1", "--sizes", "1K", "--algorithms", "mpi:binomial", "--quiet",
                  env={"GPULAB_LAUNCHED": "1"})
    assert run.returncode == 2 and "must each run in a job of its own" in run.stderr, run.stderr[-2000:]


def test_bench_refuses_an_unknown_variant_before_starting_anything():
    run = _gpulab("bench", "bcast", "--algorithms", "mpi,mpi:fastest")
    assert run.returncode == 2 and "MPICH has no broadcast algorithm 'fastest'" in run.stderr
