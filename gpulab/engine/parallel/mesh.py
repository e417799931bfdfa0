"""Mesh: the 4D process grid (row x col x depth x data) and one communicator per axis.

    mesh = Mesh(row=2, col=2, depth=1, data=1)        # on 4 ranks of COMM_WORLD
    mesh.shape                                        # GridShape(row=2, col=2, depth=1, data=1)
    mesh.coord                                        # this rank's GridCoord(row=.., col=.., depth=.., data=..)
    mesh.row_comm, mesh.col_comm, mesh.depth_comm, mesh.data_comm   # axis communicators

Shapes and coordinates are named tuples in one order, (row, col, depth,
data), everywhere in the engine (short names in formulas: R, C, D, P).
Rank layout as AxoNN's: column innermost (consecutive ranks, the fastest
links), data outermost: ``rank = data*(D*R*C) + depth*(R*C) + row*C + col``.
Any sizes whose product is the world size are allowed. The shape is checked
against ``comm.Get_size()`` before any communication, so a bad shape fails the
same way on every rank instead of hanging. Two combined groups are built too:
``batch_comm`` (depth x data: the ranks that hold the same weight block and
see different sequences) and ``tensor_comm`` (row x col x depth: one model
replica). ``mesh.group(name)`` is the communicator of a group by name.
"""

from __future__ import annotations

from itertools import product
from numbers import Integral
from typing import NamedTuple

AXES = ("row", "col", "depth", "data")
GROUPS = (*AXES, "batch", "tensor")


class GridShape(NamedTuple):
    """Sizes of the grid's axes."""

    row: int
    col: int
    depth: int
    data: int


class GridCoord(NamedTuple):
    """One rank's position along each axis of the grid."""

    row: int
    col: int
    depth: int
    data: int


def check_shape(row, col, depth, data, world_size: int) -> GridShape:
    """Validate a grid shape for ``world_size`` ranks; return it as ints."""
    for axis, size in zip(AXES, (row, col, depth, data)):
        if isinstance(size, bool) or not isinstance(size, Integral) or size < 1:
            raise ValueError(f"mesh {axis} size must be a positive int, got {size!r}")
    shape = row, col, depth, data = GridShape(int(row), int(col), int(depth), int(data))
    total = row * col * depth * data
    if total != world_size:
        raise ValueError(
            f"mesh row*col*depth*data = {row}*{col}*{depth}*{data} = {total} must equal the number "
            f"of ranks ({world_size}): the four sizes must multiply to the world size")
    return shape


def rank_of(coord, shape) -> int:
    """The rank at grid position ``coord`` (row, col, depth, data)."""
    r, c, d, p = coord
    R, C, D, _ = shape
    return p * (D * R * C) + d * (R * C) + r * C + c


def coords_of(rank: int, shape) -> GridCoord:
    """The grid position of ``rank``: the inverse of ``rank_of``."""
    R, C, D, _ = shape
    return GridCoord(row=rank // C % R, col=rank % C, depth=rank // (R * C) % D, data=rank // (D * R * C))


def grid_shapes(world_size: int) -> list[GridShape]:
    """Every (row, col, depth, data) whose product is ``world_size``."""
    divisors = [k for k in range(1, world_size + 1) if world_size % k == 0]
    return [GridShape(r, c, d, world_size // (r * c * d)) for r, c, d in product(divisors, repeat=3)
            if world_size % (r * c * d) == 0]


class Mesh:
    """This rank's place in the 4D grid and its axis communicators."""

    def __init__(self, row: int, col: int, depth: int = 1, data: int = 1, comm=None):
        if comm is None:
            from mpi4py import MPI  # imported here: importing gpulab must not start MPI

            comm = MPI.COMM_WORLD
        self.shape = check_shape(row, col, depth, data, comm.Get_size())
        self.comm = comm
        self.rank = comm.Get_rank()
        self.coord = r, c, d, p = coords_of(self.rank, self.shape)
        R, C, D, _ = self.shape
        # Split(color, key): same color -> same group; key orders the members, so the
        # rank inside each group equals the coordinate along that axis.
        self.row_comm = self._split("row", rank_of((0, c, d, p), self.shape), r)
        self.col_comm = self._split("col", rank_of((r, 0, d, p), self.shape), c)
        self.depth_comm = self._split("depth", rank_of((r, c, 0, p), self.shape), d)
        self.data_comm = self._split("data", rank_of((r, c, d, 0), self.shape), p)
        self.batch_comm = self._split("batch", r * C + c, p * D + d)
        self.tensor_comm = self._split("tensor", p, rank_of((r, c, d, 0), self.shape))

    def _split(self, name, color, key):
        sub = self.comm.Split(color, key)
        sub.Set_name(name)  # collectives.trace() reports groups by this name
        return sub

    def group(self, name: str):
        """The communicator of group ``name``: an axis (row, col, depth, data), batch or tensor."""
        if name not in GROUPS:
            raise ValueError(f"no mesh group {name!r}; groups: {GROUPS}")
        return getattr(self, f"{name}_comm")

    @property
    def batch_shard(self) -> int:
        """Which of the depth*data slices of the global batch this rank computes."""
        return self.coord.data * self.shape.depth + self.coord.depth

    def free(self) -> None:
        for name in GROUPS:
            self.group(name).Free()

    def __repr__(self) -> str:
        return f"Mesh({self.shape}; rank {self.rank} at {self.coord})"
