"""Every algorithm on (fake) device buffers, staged through host memory or handed to a (simulated)
CUDA-aware MPI, bit-identical to MPI_Bcast; and planted staging bugs are caught.

These run on any CPU: ``gpulab.fakedevice`` stands in for the GPU.
"""

import numpy as np
import pytest
from mpi4py import MPI

from gpulab.bcast import ALGORITHMS
from tests.bcast.auto import assert_auto_rows
from tests.mpi_harness import MPIJobFailed, run_mpi, shared_jobs

STAGED = {"GPULAB_FAKE_MPI_CUDA_AWARE": "0", "GPULAB_CUDA_AWARE": ""}
AWARE = {"GPULAB_FAKE_MPI_CUDA_AWARE": "1", "GPULAB_CUDA_AWARE": ""}


@pytest.fixture(scope="module")
def job():
    return shared_jobs()  # one job per process count and path checks every algorithm


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_staged_broadcast_is_bit_identical_to_mpi_bcast(algorithm, n, job):
    per_rank = job(n, "tests.gpu.cases:check_all_algorithms", device="fake", env=STAGED, timeout=200)
    checked = [counts[algorithm] for counts in per_rank]
    assert min(checked) > 0, checked


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_cuda_aware_path_hands_device_memory_to_mpi(algorithm, job):
    # the door into fake device memory opens only for a CUDA-aware MPI and a synchronized stream
    per_rank = job(3, "tests.gpu.cases:check_all_algorithms", device="fake", env=AWARE, expect_path="cuda-aware",
                   staging=[{}], timeout=200)
    checked = [counts[algorithm] for counts in per_rank]
    assert min(checked) > 0, checked


@pytest.mark.parametrize("n", [2, 8])
def test_auto_selection_on_device_buffers(n, tmp_path):
    env = {**STAGED, "GPULAB_TUNING_TABLE": str(tmp_path / "absent.json")}  # MPICH's rule decides
    assert_auto_rows(run_mpi(n, "tests.gpu.cases:auto_on_device", env=env, timeout=60)[0], n)


def test_forcing_cuda_aware_on_an_mpi_that_is_not_fails_loudly():
    with pytest.raises(MPIJobFailed, match=r"rank 0 raised:(?s:.*)not CUDA-aware"):
        run_mpi(2, "tests.gpu.cases:cuda_aware_forced", env=STAGED, timeout=60)


@pytest.mark.parametrize("bug", ["no_sync_before_mpi", "send_before_copy_out", "no_copy_in",
                                 "return_before_copy_in", "copy_in_wrong_chunk", "copy_out_misses_last_chunk"])
def test_a_planted_staging_bug_corrupts_the_result(bug):
    # the proof that the tests above can fail: each bug must change some rank's bytes
    wrong = run_mpi(3, "tests.gpu.cases:staged_with_bug", bug=bug, env=STAGED, timeout=60)
    assert any(wrong), f"{bug} went unnoticed: {wrong}"


def test_trace_events_say_the_path():
    events = run_mpi(3, "tests.gpu.cases:trace_device", algorithm="chain", nbytes=1000,
                     options={"chunk_bytes": 300}, env=STAGED, timeout=60)[0]
    assert {e["path"] for e in events} == {"staged"}
    assert sorted(e["nbytes"] for e in events if e["src"] == 1) == [100, 300, 300, 300]  # same messages as on host
    host = run_mpi(2, "tests.bcast.cases:trace_pattern", algorithm="binomial", nbytes=8, options={}, timeout=60)[0]
    assert {e["path"] for e in host} == {"host"}


@pytest.mark.parametrize("env,device,path", [(STAGED, "fake", "staged"), (AWARE, "fake", "cuda-aware"),
                                             (STAGED, "host", "host")])
def test_measurements_report_device_and_path(env, device, path):
    summaries = run_mpi(2, "tests.gpu.cases:measure_device", algorithm="chain", nbytes=5000, device=device,
                        chunk_bytes=1024, staging_chunk_bytes=2048, env=env, timeout=60)
    s = summaries[0]
    assert s["valid"] and s["device"] == device and s["path"] == path
    assert s["options"] == {"chunk_bytes": 1024, "staging_chunk_bytes": 2048}


def test_nccl_baseline_refuses_clearly_without_a_gpu():
    from gpulab.bcast.measurement import nccl
    from gpulab.bcast.measurement.measure import measure_bcast

    if nccl.available():
        pytest.skip("NCCL is available here: tests/gpu/test_cupy.py covers it")
    with pytest.raises(nccl.NcclUnavailable, match="needs CuPy|NCCL"):
        nccl.nccl_bcast(np.zeros(3), 0, MPI.COMM_SELF)
    with pytest.raises(RuntimeError, match="needs CuPy"):
        measure_bcast(MPI.COMM_SELF, "nccl", 8)
    with pytest.raises(ValueError, match="runs on CuPy buffers"):
        measure_bcast(MPI.COMM_SELF, "nccl", 8, device="fake")


def test_cli_refuses_nccl_without_a_gpu_and_runs_fake_device_buffers(tmp_path):
    import json
    import subprocess
    import sys

    from gpulab.bcast.measurement import nccl
    from tests.mpi_harness import ROOT

    bench = [sys.executable, "-m", "gpulab.cli", "bench", "bcast", "-n", "2", "--sizes", "1K", "--iters", "2",
             "--warmup", "1", "--rounds", "2", "--quiet"]
    if not nccl.available():
        done = subprocess.run(bench + ["--algorithms", "chain,nccl"], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2 and "nccl baseline needs CuPy" in done.stderr
    out = tmp_path / "fake.json"
    done = subprocess.run(bench + ["--algorithms", "chain,mpi", "--device", "fake", "--staging-chunk-bytes", "100",
                                   "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    records = json.loads(out.read_text())["records"]
    assert [(r["path"], r["device"], r["valid"]) for r in records] == [("staged", "fake", True)] * 2


def test_nccl_names_the_ranks_that_share_a_gpu():
    from gpulab.bcast.measurement.nccl import sharing

    assert sharing([("a", "0000:01:00.0"), ("a", "0000:02:00.0"), ("b", "0000:01:00.0")]) is None  # a GPU each
    why = sharing([("a", "0000:01:00.0"), ("a", "0000:02:00.0"), ("a", "0000:01:00.0")])
    assert why.startswith("ranks 0 and 2 share the GPU 0000:01:00.0 on a: NCCL needs a GPU per rank"), why
