"""The 4D engine on device arrays, on any CPU: ``gpulab.fakedevice`` stands in for the GPU.

Fake device memory refuses numpy and mpi4py, runs copies lazily and poisons
staging buffers, so the engine must do on it what it must do on CuPy: keep
every array on the device, and reach MPI only through ``gpulab.engine.parallel.exchange``
(staged through host memory, or handed over to a "CUDA-aware" MPI after a
stream synchronize). Tests with real CuPy arrays are in test_cupy.py.
"""

import numpy as np
import pytest

from gpulab.backend import is_device_array, to_device
from gpulab.engine import loss_and_grads
from tests.engine.util import random_batch, random_params, tiny_config
from tests.gpu.engine_cases import OPS
from tests.mpi_harness import batched_jobs, run_mpi

STAGED = {"GPULAB_CUDA_AWARE": "", "GPULAB_FAKE_MPI_CUDA_AWARE": "0"}
AWARE = {"GPULAB_CUDA_AWARE": "", "GPULAB_FAKE_MPI_CUDA_AWARE": "1"}
CASES = len(OPS) * 3  # every collective in float64, float32, float16
SHAPES_4 = [(2, 1, 2, 1), (1, 2, 1, 2), (1, 1, 2, 2), (2, 2, 1, 1), (4, 1, 1, 1)]
SHAPES_FEW = [(2, 1, 2, 1), (1, 2, 1, 2)]


def _equivalence(path, **kwargs):
    return 4, "tests.engine.cases:equivalence", dict(device="fake", expect_path=path, **kwargs)


@pytest.fixture(scope="module")
def job():  # one job per path runs the engine's cases on 4 ranks
    return {"staged": batched_jobs({
        "float64": _equivalence("staged", shapes=SHAPES_4),
        "float32": _equivalence("staged", shapes=SHAPES_FEW, dtype="float32"),
        "float16": (4, "tests.engine.cases:float16_accuracy", dict(shapes=SHAPES_FEW, device="fake",
                                                                  expect_path="staged")),
        "overlap": (4, "tests.engine.overlap_cases:identical_numbers", dict(shapes=[(2, 1, 2, 1), (1, 1, 2, 2)],
                                                                           device="fake")),
    }, env=STAGED), "cuda-aware": batched_jobs({"float64": _equivalence("cuda-aware", shapes=SHAPES_4)}, env=AWARE)}


def test_serial_model_on_fake_device_is_bit_identical_to_numpy():
    cfg = tiny_config()
    params = random_params(cfg)
    idx, targets = random_batch(cfg, 3)
    loss, grads = loss_and_grads(params, idx, targets, cfg)
    loss_d, grads_d = loss_and_grads({n: to_device(p, "fake") for n, p in params.items()},
                                     to_device(idx, "fake"), to_device(targets, "fake"), cfg)
    assert loss_d == loss
    for n in grads:
        assert is_device_array(grads_d[n]) and np.array_equal(grads_d[n].get(), grads[n])


@pytest.mark.parametrize("env, path", [(STAGED, "staged"), (AWARE, "cuda-aware")])
def test_collectives_on_device_buffers_match_host_bit_for_bit(env, path):
    wrong = run_mpi(3, "tests.gpu.engine_cases:collectives_on_device", expect_path=path, env=env, timeout=120)
    assert wrong == [[]] * 3


@pytest.mark.parametrize("bug", ["no_copy_back", "no_sync_before_mpi", "no_copy_out"])
def test_a_planted_exchange_bug_is_caught(bug):
    wrong = run_mpi(2, "tests.gpu.engine_cases:collectives_on_device", bug=bug, env=STAGED, timeout=120)
    # caught as wrong values in every case on every rank, not as some unrelated exception
    assert all(len(w) == CASES and all(c.endswith(": values differ") for c in w) for w in wrong), wrong


def test_handing_an_unsynchronized_buffer_to_a_cuda_aware_mpi_fails_loudly():
    wrong = run_mpi(2, "tests.gpu.engine_cases:collectives_on_device", bug="no_sync_cuda_aware",
                    expect_path="cuda-aware", env=AWARE, timeout=120)
    assert all(len(w) == CASES and all("synchronize the stream first" in c for c in w) for w in wrong), wrong


@pytest.mark.parametrize("path", ["staged", "cuda-aware"])
def test_engine_on_fake_device_matches_the_serial_model(path, job):
    rows = job[path]("float64")[0]
    assert max(r["grad_err"] for r in rows) < 1e-10 and max(r["param_err"] for r in rows) < 1e-10


def test_engine_on_fake_device_float32(job):
    assert max(r["grad_err"] for r in job["staged"]("float32")[0]) < 1e-5


def test_engine_on_fake_device_float16_mixed_precision(job):
    assert len(job["staged"]("float16")[0]) == 2


def test_every_overlap_option_on_fake_device_gives_the_same_numbers(job):
    rows = job["staged"]("overlap")[0]
    assert rows and all(r["bitwise"] for r in rows)

def test_engine_benchmark_runs_on_the_fake_device_and_its_timeline_names_the_path():
    row = run_mpi(2, "tests.gpu.engine_cases:bench_on_device", env=STAGED, timeout=120)[0]
    assert row["device"] == "fake" and row["iter_s"] > 0 and row["paths"] == ["staged"]
