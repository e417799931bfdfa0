"""Gradient synchronisation as Reduce + broadcast (the broadcast paper's CNTK set-up), on 3 and 4 ranks."""

import types

import pytest

from tests.mpi_harness import MPIJobFailed, run_mpi
from tests.workloads.reduce_bcast_training_cases import BROADCASTS


@pytest.mark.parametrize("n", [3, 4])
def test_reduce_then_bcast_equals_allreduce(n):
    worst = run_mpi(n, "tests.workloads.reduce_bcast_training_cases:check_sync_equals_allreduce", timeout=120)
    for rank, per_algorithm in enumerate(worst):
        assert set(per_algorithm) == {a for a, _ in BROADCASTS}, f"rank {rank} checked {sorted(per_algorithm)}"


@pytest.mark.parametrize("n", [3, 4])
def test_every_broadcast_trains_identically(n):
    results = run_mpi(n, "tests.workloads.reduce_bcast_training_cases:check_training_identical", timeout=240)
    assert len({r["digest"] for r in results}) == 1, results
    assert all(r["serial_rel_error"] < 1e-4 for r in results), results


@pytest.mark.parametrize("kwargs, message", [
    (dict(steps=0), "steps must be >= 1"),
    (dict(steps=1, batch_size=5), r"batch_size \(5\) must be a positive multiple of the 3 ranks"),
    (dict(steps=1, batch_size=0), r"batch_size \(0\) must be a positive multiple"),
])
def test_bad_arguments(kwargs, message):
    from gpulab.workloads.reduce_bcast_training import train

    with pytest.raises(ValueError, match=message):
        train(types.SimpleNamespace(size=3, rank=0), **kwargs)


def test_unknown_broadcast_fails_on_every_rank():
    # every rank raises; the first to do so aborts the job, so which rank is named varies
    with pytest.raises(MPIJobFailed, match="(?s)rank [01] raised:.*no_such_bcast"):
        run_mpi(2, "tests.workloads.reduce_bcast_training_cases:train_with", algorithm="no_such_bcast", timeout=60)


def test_model_prices_both_broadcasts_with_the_same_reduce():
    from gpulab.bcast.cost.hockney import mpich_choice, predict
    from gpulab.bcast.cost.profiles import profile
    from gpulab.workloads.gradient_sync import predicted_sync

    machine, nbytes = profile("kesch"), 138_357_544 * 4  # VGG-16's float32 gradient on the paper's machine
    row = predicted_sync(nbytes, 128, machine)
    assert row["mpi_algorithm"] == mpich_choice(nbytes, 128)
    assert row["mpi_bcast_ms"] == pytest.approx(predict(row["mpi_algorithm"], nbytes, 128, machine) * 1e3)
    assert row["tuned_bcast_ms"] <= row["mpi_bcast_ms"]  # the model's best is never worse than MPI's pick
    assert row["reduce_ms"] == pytest.approx(predict("scatter_allgather_ring", nbytes, 128, machine) * 1e3)
    total = row["reduce_ms"] + row["mpi_bcast_ms"]
    assert row["sync_saving"] == pytest.approx((row["mpi_bcast_ms"] - row["tuned_bcast_ms"]) / total)
