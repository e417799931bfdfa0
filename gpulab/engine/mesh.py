"""Mesh: the 4D process grid (row x col x depth x data) and one communicator per axis.

    mesh = Mesh(row=2, col=2, depth=1, data=1)        # on 4 ranks of COMM_WORLD
    mesh.r, mesh.c, mesh.d, mesh.p                    # this rank's coordinates
    mesh.row, mesh.col, mesh.depth, mesh.data         # axis communicators

Rank layout as AxoNN's: column innermost (consecutive ranks, the fastest links),
data outermost: ``rank = p*(D*R*C) + d*(R*C) + r*C + c``. Any sizes whose
product is the world size are allowed. The shape is checked against
``comm.Get_size()`` before any communication, so a bad shape fails the same
way on every rank instead of hanging. Two combined groups are built too:
``batch`` (depth x data: the ranks that hold the same weight block and see
different sequences) and ``tensor`` (row x col x depth: one model replica).
"""

from __future__ import annotations

from itertools import product
from numbers import Integral

AXES = ("row", "col", "depth", "data")


def check_shape(row, col, depth, data, world_size: int) -> tuple[int, int, int, int]:
    """Validate a grid shape for ``world_size`` ranks; return it as ints."""
    for axis, size in zip(AXES, (row, col, depth, data)):
        if isinstance(size, bool) or not isinstance(size, Integral) or size < 1:
            raise ValueError(f"mesh {axis} size must be a positive int, got {size!r}")
    shape = row, col, depth, data = int(row), int(col), int(depth), int(data)
    total = row * col * depth * data
    if total != world_size:
        raise ValueError(
            f"mesh row*col*depth*data = {row}*{col}*{depth}*{data} = {total} must equal the number "
            f"of ranks ({world_size}): the four sizes must multiply to the world size")
    return shape


def rank_of(p: int, d: int, r: int, c: int, shape) -> int:
    R, C, D, _ = shape
    return p * (D * R * C) + d * (R * C) + r * C + c


def coords_of(rank: int, shape) -> tuple[int, int, int, int]:
    """(p, d, r, c) of ``rank``: the inverse of ``rank_of``."""
    R, C, D, _ = shape
    return rank // (D * R * C), rank // (R * C) % D, rank // C % R, rank % C


def grid_shapes(world_size: int) -> list[tuple[int, int, int, int]]:
    """Every (row, col, depth, data) whose product is ``world_size``."""
    divisors = [k for k in range(1, world_size + 1) if world_size % k == 0]
    return [(r, c, d, world_size // (r * c * d)) for r, c, d in product(divisors, repeat=3)
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
        R, C, D, P = self.shape
        self.p, self.d, self.r, self.c = p, d, r, c = coords_of(self.rank, self.shape)
        # Split(color, key): same color -> same group; key orders the members, so the
        # rank inside each group equals the coordinate along that axis.
        self.row = self._split("row", rank_of(p, d, 0, c, self.shape), r)
        self.col = self._split("col", rank_of(p, d, r, 0, self.shape), c)
        self.depth = self._split("depth", rank_of(p, 0, r, c, self.shape), d)
        self.data = self._split("data", rank_of(0, d, r, c, self.shape), p)
        self.batch = self._split("batch", r * C + c, p * D + d)
        self.tensor = self._split("tensor", p, rank_of(0, d, r, c, self.shape))

    def _split(self, name, color, key):
        sub = self.comm.Split(color, key)
        sub.Set_name(name)  # collectives.trace() reports groups by this name
        return sub

    @property
    def sizes(self) -> dict[str, int]:
        return dict(zip(AXES, self.shape))

    @property
    def batch_shard(self) -> int:
        """Which of the depth*data slices of the global batch this rank computes."""
        return self.p * self.shape[2] + self.d

    def free(self) -> None:
        for name in ("row", "col", "depth", "data", "batch", "tensor"):
            getattr(self, name).Free()

    def __repr__(self) -> str:
        R, C, D, P = self.shape
        return (f"Mesh(row={R}, col={C}, depth={D}, data={P}; rank {self.rank} at "
                f"r={self.r} c={self.c} d={self.d} p={self.p})")
