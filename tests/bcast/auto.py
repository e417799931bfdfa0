"""What ``algorithm="auto"`` must have run: checks for the rows of tests.bcast.cases.check_auto."""

from tests.bcast.cases import AUTO_SIZES


def mpich_rule(nbytes: int, p: int) -> str:
    """MPICH's MPIR broadcast rule (mpir/generic.json: up to 12288 B binomial, up to 524288 B on powers of
    two scatter + recursive doubling, at least 8 processes for either of the last two)."""
    if nbytes <= 12288 or p < 8:
        return "binomial"
    return "scatter_allgather_rd" if nbytes <= 524288 and p & (p - 1) == 0 else "scatter_allgather_ring"


def assert_auto_rows(rows: list, p: int) -> None:
    """Every size was broadcast by the algorithm select() named; with no tuning file, machine profile or
    cluster link that is MPI_Bcast itself, whose reason names what MPICH runs on these ranks (one node)."""
    assert [r[0] for r in rows] == list(AUTO_SIZES)
    for nbytes, name, source, reason, ran in rows:
        # MPI's own Bcast sends inside the library, where gpulab's trace cannot see: it sees nothing then
        assert ran == ([] if name == "mpi" else [name]), f"{nbytes} B: select chose {name}, the trace saw {ran}"
        assert (source, name) == ("native", "mpi"), nbytes
        assert f"{mpich_rule(nbytes, p)} on {p}" in reason, (nbytes, reason)
