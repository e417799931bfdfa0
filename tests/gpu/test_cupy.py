"""Broadcasts of real CuPy buffers: staged, CUDA-aware where the MPI is, and the NCCL baseline.

Skipped without CuPy or without a CUDA device. On a one-GPU machine every
rank shares the GPU: that exercises the staging path (the copies, streams and
events are real) but not GPU-to-GPU links; NCCL refuses two ranks on one
device, so its test runs on as many ranks as there are GPUs.
"""

import pytest

from gpulab.bcast import ALGORITHMS
from tests.bcast.auto import assert_auto_rows
from tests.mpi_harness import run_mpi, shared_jobs

cp = pytest.importorskip("cupy")
try:
    GPUS = cp.cuda.runtime.getDeviceCount()
except Exception:  # CuPy installed, but no driver or no device
    GPUS = 0
pytestmark = pytest.mark.skipif(GPUS == 0, reason="no CUDA device")


@pytest.fixture(scope="module")
def job():
    return shared_jobs()  # one job (one CUDA start-up per rank) per process count and path checks every algorithm


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_staged_cupy_broadcast_is_bit_identical(algorithm, n, job):
    per_rank = job(n, "tests.gpu.cases:check_all_algorithms", device="cupy", env={"GPULAB_CUDA_AWARE": "0"},
                   timeout=200)
    assert min(counts[algorithm] for counts in per_rank) > 0


@pytest.mark.parametrize("algorithm", ["binomial", "chain", "scatter_allgather_ring", "mpi"])
def test_cuda_aware_cupy_broadcast(algorithm, job):
    from gpulab.mpi_cuda import mpi_cuda_support

    aware, why = mpi_cuda_support()
    if not aware:
        pytest.skip(f"this MPI is not CUDA-aware ({why})")
    per_rank = job(2, "tests.gpu.cases:check_all_algorithms", device="cupy", expect_path="cuda-aware",
                   env={"GPULAB_CUDA_AWARE": ""}, timeout=200)
    assert min(counts[algorithm] for counts in per_rank) > 0


def test_nccl_baseline():
    n = min(GPUS, 4)  # NCCL needs one GPU per rank: p = 1 on a one-GPU machine
    assert min(run_mpi(n, "tests.gpu.cases:check_nccl", timeout=180)) > 0


def test_nccl_on_ranks_sharing_a_gpu_is_refused_with_the_reason():
    import subprocess
    import sys

    from tests.mpi_harness import ROOT

    n = GPUS + 1  # one GPU more than there are: two ranks share one
    done = subprocess.run([sys.executable, "-m", "gpulab.cli", "bench", "bcast", "-n", str(n), "--algorithms",
                           "nccl", "--sizes", "4K", "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 2 and f"ranks 0 and {GPUS} share the GPU" in done.stderr, done.stderr[-2000:]


def test_measurements_on_cupy_report_the_path():
    records = run_mpi(2, "tests.gpu.cases:measure_sweep", algorithms=["chain", "mpi"], sizes=[1 << 20],
                      env={"GPULAB_CUDA_AWARE": "0"}, timeout=180)[0]
    assert all(r["valid"] and r["device"] == "cupy" and r["path"] == "staged" for r in records)


def test_auto_selection_on_cupy(tmp_path):
    env = {"GPULAB_CUDA_AWARE": "0", "GPULAB_TUNING_TABLE": str(tmp_path / "absent.json")}  # MPICH's rule
    assert_auto_rows(run_mpi(2, "tests.gpu.cases:auto_on_device", device="cupy", env=env, timeout=120)[0], 2)


SHAPES_2 = [(2, 1, 1, 1), (1, 2, 1, 1), (1, 1, 2, 1), (1, 1, 1, 2)]


def test_engine_on_cupy_matches_the_serial_model_staged():
    rows = run_mpi(2, "tests.engine.cases:equivalence", shapes=SHAPES_2, dtype="float32", device="cupy",
                   expect_path="staged", env={"GPULAB_CUDA_AWARE": "0"}, timeout=200)[0]
    assert max(r["grad_err"] for r in rows) < 1e-5


def test_engine_on_cupy_float16_mixed_precision():
    rows = run_mpi(2, "tests.engine.cases:float16_accuracy", shapes=SHAPES_2, device="cupy",
                   expect_path="staged", env={"GPULAB_CUDA_AWARE": "0"}, timeout=200)[0]
    assert len(rows) == len(SHAPES_2)


def test_engine_on_cupy_cuda_aware():
    from gpulab.mpi_cuda import mpi_cuda_support

    aware, why = mpi_cuda_support()
    if not aware:
        pytest.skip(f"this MPI is not CUDA-aware ({why})")
    rows = run_mpi(2, "tests.engine.cases:equivalence", shapes=SHAPES_2, dtype="float32", device="cupy",
                   expect_path="cuda-aware", env={"GPULAB_CUDA_AWARE": ""}, timeout=200)[0]
    assert max(r["grad_err"] for r in rows) < 1e-5
