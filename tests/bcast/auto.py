"""What ``algorithm="auto"`` must have run: checks for the rows of tests.bcast.cases.check_auto."""

from tests.bcast.cases import AUTO_SIZES


def mpich_rule(nbytes: int, p: int) -> str:
    """MPICH's default broadcast choice (short 12288 B, long 524288 B, at least 8 processes)."""
    if nbytes < 12288 or p < 8:
        return "binomial"
    return "scatter_allgather_rd" if nbytes < 524288 and p & (p - 1) == 0 else "scatter_allgather_ring"


def assert_auto_rows(rows: list, p: int) -> None:
    """Every size was broadcast by the algorithm select() named, and with no tuning file that is MPICH's rule."""
    assert [r[0] for r in rows] == list(AUTO_SIZES)
    for nbytes, name, source, ran in rows:
        assert ran == [name], f"{nbytes} B: select chose {name}, the trace saw {ran}"
        assert (source, name) == ("mpich-default", mpich_rule(nbytes, p)), nbytes
