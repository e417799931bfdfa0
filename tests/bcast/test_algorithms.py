"""Every algorithm x process count x communicator x root x dtype x awkward size, against MPI_Bcast."""

import pytest

from gpulab.bcast import ALGORITHMS
from tests.mpi_harness import MPIJobFailed, run_mpi

PROCESS_COUNTS = [1, 2, 3, 4, 5, 8]


@pytest.mark.parametrize("n", PROCESS_COUNTS)
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_bit_identical_to_mpi_bcast(algorithm, n):
    checked = run_mpi(n, "tests.bcast.cases:check_algorithm", algorithm=algorithm, timeout=240)
    assert min(checked) > 0, f"cases checked per rank: {checked}"


@pytest.mark.parametrize("n", [2, 8])
def test_auto_moves_data_correctly(n):
    assert run_mpi(n, "tests.bcast.cases:check_auto", timeout=60)[0] == [0, 100, 12288, 600_000]


@pytest.mark.parametrize("extra_bytes", [8, -8])
@pytest.mark.parametrize("algorithm", ["linear", "binomial", "chain", "scatter_allgather_ring"])
def test_size_mismatch_raises_on_the_rank_that_sees_it(algorithm, extra_bytes):
    # rank 3 holds 1000 +- 8 bytes, the others 1000: rank 3 raises, and its exception ends the job
    # (as `python -m mpi4py` would), instead of a hang or a silently stale buffer
    with pytest.raises(MPIJobFailed, match=r"(?s)rank 3 raised:.*BcastSizeError: rank 3 expected \d+ bytes"):
        run_mpi(4, "tests.bcast.cases:size_mismatch", algorithm=algorithm, extra_bytes=extra_bytes, timeout=60)
