"""The harness must report results, the failing rank's traceback, and hangs as timeouts."""

import pytest

from tests.mpi_harness import MPIJobFailed, batched_jobs, run_mpi


@pytest.mark.parametrize("n", [1, 2, 3])
def test_results_come_back_per_rank(n):
    assert run_mpi(n, "tests.harness.cases:ranks_and_sizes", timeout=60) == [list(range(n))] * n


def test_failing_rank_is_named_with_its_traceback():
    with pytest.raises(MPIJobFailed, match=r"(?s)rank 2 raised:.*deliberate failure on rank 2"):
        run_mpi(3, "tests.harness.cases:fail_on", rank=2, timeout=60)


def test_deadlock_fails_by_timeout_and_says_where():
    with pytest.raises(MPIJobFailed, match=r"timed out.*rank 1: 'receiving from nobody'"):
        run_mpi(2, "tests.harness.cases:hang_on", rank=1, timeout=8)


def test_batched_calls_share_a_job_and_fail_one_by_one():
    job = batched_jobs({name: (2, f"tests.harness.cases:{target}", {}) for name, target in
                        [("before", "ranks_and_sizes"), ("broken", "fail_everywhere"), ("after", "ranks_and_sizes")]},
                       timeout=60)
    with pytest.raises(MPIJobFailed, match=r"(?s)broken \(.*rank 0 raised:.*deliberate failure on every rank"):
        job("broken")
    assert job("before") == job("after") == [[0, 1]] * 2  # the calls around it ran: its failure ended nothing
