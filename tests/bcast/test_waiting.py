"""How a pipeline's ranks wait: MPI's Wait, or tests that nap once the wait is long (gpulab.bcast.runtime.waiting)."""

import pytest

from gpulab.bcast.runtime import waiting


class SlowRequest:
    """A request that completes at its ``tests``-th Test, as a chunk in flight does."""

    def __init__(self, tests: int):
        self.left, self.tested, self.waited = tests, 0, False

    def Test(self, status=None):  # noqa: N802 (mpi4py's name)
        self.tested += 1
        self.left -= 1
        return self.left <= 0

    def Wait(self, status=None):  # noqa: N802
        self.waited = True


def test_a_short_wait_spins_and_a_long_one_naps(monkeypatch):
    naps = []
    monkeypatch.setattr(waiting.time, "sleep", naps.append)
    quick = SlowRequest(3)
    waiting.wait(quick, None)
    assert quick.tested == 3 and not naps  # done well within SPIN_S: never napped

    now = iter(range(10**6))  # a clock that moves a second per reading: every wait is long
    monkeypatch.setattr(waiting.time, "perf_counter", lambda: next(now))
    slow = SlowRequest(5)
    waiting.wait(slow, None)
    assert slow.tested == 5 and naps and set(naps) == {waiting.NAP_S}


def test_wait_all_completes_every_request(monkeypatch):
    monkeypatch.setattr(waiting.time, "sleep", lambda s: None)
    requests = [SlowRequest(n) for n in (1, 4, 2)]
    waiting.wait_all(requests)
    assert all(r.left <= 0 for r in requests)


def test_the_mode_comes_from_the_environment_and_a_wrong_one_is_refused(monkeypatch):
    monkeypatch.delenv("GPULAB_BCAST_WAIT", raising=False)
    assert waiting.mode() == "nap" and waiting.waiter("nap") == (waiting.wait, waiting.wait_all)
    monkeypatch.setenv("GPULAB_BCAST_WAIT", "spin")
    assert waiting.mode() == "spin"
    request = SlowRequest(1)
    waiting.waiter("spin")[0](request, None)
    assert request.waited and request.tested == 0  # MPI's own Wait, untouched
    monkeypatch.setenv("GPULAB_BCAST_WAIT", "yield")
    with pytest.raises(ValueError, match="GPULAB_BCAST_WAIT='yield': choose one of nap, spin"):
        waiting.mode()


def pipelines_against_mpi_bcast(comm) -> dict:
    """On every rank: each pipelined algorithm (chunks waited for, sends completed) against MPI_Bcast."""
    import numpy as np

    from gpulab.bcast import bcast
    from gpulab.bcast.runtime.waiting import mode

    wrong = []
    for algorithm in ("chain", "binary_tree", "split_binary_tree"):
        for nbytes in (1, 3000, 40_000):
            want = np.arange(nbytes, dtype=np.uint8) * 7 if comm.rank == 0 else np.empty(nbytes, np.uint8)
            comm.Bcast(want, root=0)
            got = want.copy() if comm.rank == 0 else np.zeros(nbytes, np.uint8)
            bcast(got, 0, comm, algorithm=algorithm, chunk_bytes=1024)
            if not np.array_equal(got, want):
                wrong.append(f"{algorithm} {nbytes} B: rank {comm.rank} differs")
    return {"mode": mode(), "wrong": wrong}


@pytest.mark.parametrize("chosen", ["nap", "spin"])
def test_pipelines_are_bit_identical_to_mpi_bcast_either_way(chosen):
    from tests.mpi_harness import run_mpi

    per_rank = run_mpi(4, "tests.bcast.test_waiting:pipelines_against_mpi_bcast", env={"GPULAB_BCAST_WAIT": chosen},
                       timeout=120)
    assert [r["mode"] for r in per_rank] == [chosen] * 4
    assert not [w for r in per_rank for w in r["wrong"]]
