"""Every algorithm x process count x communicator x root x dtype x awkward size, against MPI_Bcast."""

import pytest

from gpulab.bcast import ALGORITHMS
from tests.bcast.auto import assert_auto_rows
from tests.mpi_harness import MPIJobFailed, run_mpi, shared_jobs

PROCESS_COUNTS = [1, 2, 3, 4, 5, 8]


@pytest.fixture(scope="module")
def job():
    return shared_jobs()


@pytest.mark.parametrize("n", PROCESS_COUNTS)
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_bit_identical_to_mpi_bcast(algorithm, n, job):
    # one job per process count checks every algorithm; each test reads its own algorithm's cases
    assert_all_right(job(n, "tests.bcast.cases:check_every_algorithm", timeout=200), algorithm)


def assert_all_right(per_rank: list, algorithm: str) -> None:
    results = [counts[algorithm] for counts in per_rank]
    assert min(r["checked"] for r in results) > 0, f"cases checked per rank: {results}"
    assert not any(r["wrong"] for r in results), "\n".join(w for r in results for w in r["wrong"])


def test_a_planted_bug_fails_its_own_algorithm_only():
    # the proof that the tests above can fail, each for its own case, though one job checks them all
    per_rank = run_mpi(2, "tests.bcast.cases:check_every_algorithm", planted="chain", timeout=120)
    with pytest.raises(AssertionError, match=r"chain on world \(p=2\) root=0 \{\} int8\(1,\): rank 1 differs"):
        assert_all_right(per_rank, "chain")
    for algorithm in sorted(set(ALGORITHMS) - {"chain"}):
        assert_all_right(per_rank, algorithm)


@pytest.mark.parametrize("n", [2, 8])
def test_auto_runs_what_select_decided(n, monkeypatch, tmp_path):
    monkeypatch.setenv("GPULAB_TUNING_TABLE", str(tmp_path / "absent.json"))  # no table or model: MPICH's rule
    assert_auto_rows(run_mpi(n, "tests.bcast.cases:check_auto", timeout=60)[0], n)


@pytest.mark.parametrize("extra_bytes", [8, -8])
@pytest.mark.parametrize("algorithm", ["linear", "binomial", "chain", "scatter_allgather_ring"])
def test_size_mismatch_raises_on_the_rank_that_sees_it(algorithm, extra_bytes):
    # rank 3 holds 1000 +- 8 bytes, the others 1000: rank 3 raises, and its exception ends the job
    # (as `python -m mpi4py` would), instead of a hang or a silently stale buffer
    with pytest.raises(MPIJobFailed, match=r"(?s)rank 3 raised:.*BcastSizeError: rank 3 expected \d+ bytes"):
        run_mpi(4, "tests.bcast.cases:size_mismatch", algorithm=algorithm, extra_bytes=extra_bytes, timeout=60)


@pytest.mark.parametrize("extra_bytes", [600, -600])
@pytest.mark.parametrize("algorithm", ["chain", "binary_tree", "split_binary_tree"])
def test_size_mismatch_by_whole_chunks_raises(algorithm, extra_bytes):
    # 1200 against 1800 or 600 bytes in 300-byte chunks (the split tree's halves too): every chunk is
    # the size rank 3 expects, only their number differs; the last chunk's own tag tells rank 3 at once
    with pytest.raises(MPIJobFailed, match=r"(?s)rank 3 raised:.*BcastSizeError: rank 3 expected 300 bytes "
                                           r"from rank \d+ (to end the message|and more after them)"):
        run_mpi(4, "tests.bcast.cases:size_mismatch", algorithm=algorithm, extra_bytes=extra_bytes,
                nbytes=1200, timeout=60)


def test_broadcasts_leave_the_users_messages_alone():
    assert run_mpi(2, "tests.bcast.cases:user_messages_untouched", timeout=60) == [0, 3]


def test_repeated_broadcasts_take_the_fast_path_and_stay_correct(tmp_path):
    rows = run_mpi(3, "tests.bcast.cases:repeated_calls", table=str(tmp_path / "table.json"), timeout=60)
    for first_auto, remembered, forgotten, after_reload in rows:
        # with nothing to predict from, auto ran MPI_Bcast: MPI's own messages, which gpulab's trace does not
        # see (tests/bcast/test_auto_sources.py checks the decision)
        assert first_auto == []
        # plans for (binomial, chain) x two roots; MPI_Bcast needs none, auto keeps the sizes it sent with it
        # (the fast path's MPI_Bcast)
        assert remembered == [4, [129 * 8]]
        assert forgotten
        assert after_reload == ["linear"]  # the new table decides, not the remembered plan


def test_freeing_a_communicator_frees_its_private_duplicate():
    assert run_mpi(2, "tests.bcast.cases:freed_communicators_free_their_duplicates", timeout=60) == [0, 0]


@pytest.mark.parametrize("differ, says", [("root", "rank 1: chain(root=2, chunk_bytes=256)"),
                                          ("algorithm", "rank 1: binomial(root=0, chunk_bytes=256)"),
                                          ("options", "rank 1: chain(root=0, chunk_bytes=512)")])
def test_check_mode_names_the_rank_called_differently(differ, says):
    messages = run_mpi(3, "tests.bcast.cases:mismatched_call", differ=differ, timeout=60)
    assert len(set(messages)) == 1, messages  # every rank raised, with the same account
    assert "rank 0: chain(root=0, chunk_bytes=256) on 1000 bytes" in messages[0] and says in messages[0]
