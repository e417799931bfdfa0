"""MPI's own MPI_Bcast as one of the algorithms: the baseline every other is compared with."""

from __future__ import annotations

from gpulab.bcast.runtime.executor import Group, mpi_buffer


def native(g: Group, data, root: int) -> None:
    """MPI's own MPI_Bcast: the baseline every algorithm is compared with."""
    if g.native is None:
        raise ValueError("the 'mpi' algorithm needs a communicator of exactly the group's ranks")
    if g.stager is not None:  # staged device buffer: one message, so the copies cannot overlap it
        g.stager.before_send(data)
    g.native.Bcast(mpi_buffer(data), root)
    if g.stager is not None and g.me != root:
        g.stager.after_recv(data)
