"""Mesh: the 4D process grid (row x col x depth x data), pipeline stages around it, one communicator per axis.

    mesh = Mesh(row=2, col=2, depth=1, data=1)        # on 4 ranks of COMM_WORLD
    mesh.shape                                        # GridShape(row=2, col=2, depth=1, data=1)
    mesh.coord                                        # this rank's GridCoord(row=.., col=.., depth=.., data=..)
    mesh.row_comm, mesh.col_comm, mesh.depth_comm, mesh.data_comm   # axis communicators
    mesh = Mesh(2, 1, 1, 1, pipe=2)                   # 2 stages of 2 ranks: mesh.stage, mesh.pipe_comm

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

Pipeline stages (``pipe``, default 1) are the outermost axis:
``rank = stage*(R*C*D*P) + (the 4D rank above)``. Every stage is a whole 4D
grid of its own, and all the groups above live inside one stage; ``pipe_comm``
joins the ranks with the same 4D coordinate in every stage (its rank is the
stage), the channel for point-to-point sends of activations and their
gradients between neighbouring stages. The stage is kept out of
``GridShape``/``GridCoord`` on purpose: ``mesh.shape`` and ``mesh.coord`` stay
the 4D tuples of one stage, so the layout, the collectives, the cost model and
the many ``R, C, D, P = shape`` unpackings hold with or without stages, while ``mesh.pipe``
and ``mesh.stage`` say how many stages there are and which one this rank
computes. ``mesh.comm`` is the whole job (every stage); ``stage_comm`` is one
stage; ``embed_comm`` joins the first and the last stage (each alone when
``pipe`` is 1), the two that hold the tied ``wte``.
"""

from __future__ import annotations

from itertools import product
from numbers import Integral
from typing import NamedTuple

from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())

AXES = ("row", "col", "depth", "data")
GROUPS = (*AXES, "batch", "tensor", "pipe", "stage", "embed")


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


def check_shape(row, col, depth, data, world_size: int, pipe: int = 1) -> GridShape:
    """Validate a grid shape (of one stage, ``pipe`` stages) for ``world_size`` ranks; return it as ints."""
    for axis, size in zip((*AXES, "pipe"), (row, col, depth, data, pipe)):
        if isinstance(size, bool) or not isinstance(size, Integral) or size < 1:
            raise ValueError(f"mesh {axis} size must be a positive int, got {size!r}")
    shape = row, col, depth, data = GridShape(int(row), int(col), int(depth), int(data))
    total = row * col * depth * data * int(pipe)
    if total != world_size:
        if pipe == 1:
            raise ValueError(
                f"mesh row*col*depth*data = {row}*{col}*{depth}*{data} = {total} must equal the number "
                f"of ranks ({world_size}): the four sizes must multiply to the world size")
        raise ValueError(
            f"mesh row*col*depth*data*pipe = {row}*{col}*{depth}*{data}*{pipe} = {total} must equal "
            f"the number of ranks ({world_size}): the five sizes must multiply to the world size")
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

    def __init__(self, row: int, col: int, depth: int = 1, data: int = 1, comm=None, pipe: int = 1):
        if comm is None:
            comm = MPI.COMM_WORLD
        self.shape = check_shape(row, col, depth, data, comm.Get_size(), pipe)
        self.pipe = int(pipe)
        self.comm = comm
        self.rank = comm.Get_rank()
        R, C, D, P = self.shape
        n = R * C * D * P  # ranks per stage
        self.stage, local = divmod(self.rank, n)
        self.coord = r, c, d, p = coords_of(local, self.shape)
        first = self.stage * n  # colors of different stages never meet
        # Split(color, key): same color -> same group; key orders the members, so the
        # rank inside each group equals the coordinate along that axis.
        self.row_comm = self._split("row", first + rank_of((0, c, d, p), self.shape), r)
        self.col_comm = self._split("col", first + rank_of((r, 0, d, p), self.shape), c)
        self.depth_comm = self._split("depth", first + rank_of((r, c, 0, p), self.shape), d)
        self.data_comm = self._split("data", first + rank_of((r, c, d, 0), self.shape), p)
        self.batch_comm = self._split("batch", first + r * C + c, p * D + d)
        self.tensor_comm = self._split("tensor", first + p, rank_of((r, c, d, 0), self.shape))
        self.stage_comm = self._split("stage", self.stage, local)
        self.pipe_comm = self._split("pipe", local, self.stage)
        # the tied wte lives on the first and the last stage (Megatron-LM's embedding group)
        ends = self.stage in (0, self.pipe - 1)
        self.embed_comm = self._split("embed", local if ends else n + self.rank, self.stage)

    def _split(self, name, color, key):
        sub = self.comm.Split(color, key)
        sub.Set_name(name)  # collectives.trace() reports groups by this name
        return sub

    def group(self, name: str):
        """The communicator of group ``name``: an axis (row, col, depth, data), batch, tensor,
        pipe (the same 4D coordinate in every stage), stage (this stage's ranks) or embed
        (first and last stage)."""
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

    @property
    def first_stage(self) -> bool:
        return self.stage == 0

    @property
    def last_stage(self) -> bool:
        return self.stage == self.pipe - 1

    def __repr__(self) -> str:
        where = f", stage {self.stage} of {self.pipe}" if self.pipe > 1 else ""
        return f"Mesh({self.shape}; rank {self.rank} at {self.coord}{where})"
