"""Rank functions that exercise the MPI test harness itself."""

from tests.mpi_steps import step


def ranks_and_sizes(comm):
    step("allgather ranks")
    return comm.allgather(comm.rank)


def fail_on(comm, rank):
    if comm.rank == rank:
        raise ValueError(f"deliberate failure on rank {rank}")
    comm.Barrier()  # the other ranks would wait forever without the abort


def hang_on(comm, rank):
    step("before the deadlock")
    if comm.rank == rank:
        step("receiving from nobody")
        comm.recv(source=(rank + 1) % comm.size, tag=99)


def fail_everywhere(comm):
    raise ValueError(f"deliberate failure on every rank (this one: {comm.rank})")
