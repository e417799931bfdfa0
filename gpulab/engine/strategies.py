"""Named training strategies as points of AxoNN's grid (row, col, depth, data).

    describe((4, 1, 1, 2))              # 'Megatron-LM TP4 x DP2'
    strategy_of((1, 1, 8, 1))           # 'zero3'
    shapes_for("hsdp", 8)               # [(1, 1, 2, 4), (1, 1, 4, 2)]
    pick_shape("megatron", 4, cfg, batch_size=32)   # what `gpulab train --strategy` runs

Several well-known strategies are special cases of the 4D grid, because of
how a grid dimension splits each layer (``gpulab.engine.parallel.tp3d``):

- ``megatron`` (R, 1, 1, P): Megatron-LM's tensor parallelism times data
  parallelism. With col = 1 a plain layer splits its output features over
  row (Megatron's column-parallel QKV and FC1), a transposed layer its input
  features (the row-parallel attention and MLP projections, one all-reduce
  each forward), and the tied embedding its vocabulary (vocabulary-parallel).
  Megatron-LM keeps TP inside a node and adds a pipeline across nodes; the
  pipeline is in the performance model only (``gpulab.engine.perf.pipeline``).
- ``zero3`` (1, 1, N, 1): ZeRO-3 / FSDP full sharding. Depth shards every
  weight, gradient and optimizer state N ways, all-gathers weights before
  use and reduce-scatters gradients: exactly ZeRO-3's communication.
- ``hsdp`` (1, 1, D, P): hybrid sharding (FSDP's HYBRID_SHARD, ZeRO++'s
  hierarchical partitioning): shard over D ranks, replicate P times.
- ``ddp`` (1, 1, 1, N): plain data parallelism, the whole model on each rank.
- ``axonn`` (R, C, D, P): AxoNN's 4D hybrid; every other shape is only this.
"""

from __future__ import annotations

from gpulab.engine.parallel.gpt import check_divisibility
from gpulab.engine.parallel.mesh import grid_shapes

STRATEGIES = {
    "axonn": "AxoNN 4D: 3D tensor parallelism (row x col x depth) times data parallelism",
    "megatron": "Megatron-LM: tensor parallelism over row (R,1,1,P), pipeline and data parallelism",
    "zero3": "ZeRO-3 / FSDP full sharding (1,1,N,1)",
    "hsdp": "hybrid sharding: FSDP inside D ranks, data parallel over P (1,1,D,P)",
    "ddp": "plain data parallelism (1,1,1,N)",
}


def strategy_of(shape) -> str:
    """The most specific strategy name for a grid shape."""
    R, C, D, P = shape
    if R == C == D == 1:
        return "ddp"
    if R == C == 1:
        return "zero3" if P == 1 else "hsdp"
    if C == 1 and D == 1:
        return "megatron"
    return "axonn"


def describe(shape, pipe: int = 1) -> str:
    """A shape in words, e.g. 'Megatron-LM TP4 x DP2' or 'AxoNN 4D (2,2,2,1)'."""
    R, C, D, P = shape
    name = strategy_of(shape)
    pp = f" x PP{pipe}" if pipe > 1 else ""
    if name == "ddp":
        return f"DDP x{P}{pp}" if P > 1 else f"one rank{pp}"
    if name == "zero3":
        return f"ZeRO-3/FSDP x{D}{pp}"
    if name == "hsdp":
        return f"HSDP shard {D} x replicate {P}{pp}"
    if name == "megatron":
        return f"Megatron-LM TP{R}{pp}" + (f" x DP{P}" if P > 1 else "")
    return f"AxoNN 4D ({R},{C},{D},{P}){pp}"


def shapes_for(strategy: str, world: int, max_tp: int | None = None) -> list[tuple[int, int, int, int]]:
    """Every grid shape of ``world`` ranks that is ``strategy`` (megatron: TP <= ``max_tp``,
    e.g. the GPUs of a node; axonn: every shape, the others included, as AxoNN searches them)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
    shapes = [tuple(s) for s in grid_shapes(world)]
    if strategy == "axonn":
        return shapes
    out = [s for s in shapes if strategy_of(s) == strategy]
    if strategy == "megatron" and max_tp is not None:
        out = [s for s in out if s[0] <= max_tp]
    return out


def pick_shape(strategy: str, world: int, config, batch_size: int) -> tuple[int, int, int, int]:
    """One shape of ``strategy`` on ``world`` ranks that splits ``config`` and the batch: the one
    that uses the strategy most (the most tensor parallelism for megatron, the widest sharding for
    hsdp, every grid dimension for axonn). ValueError (one line) if none does."""
    def preference(s):
        R, C, D, P = s
        used = sum(v > 1 for v in s)
        return {"megatron": (R,), "hsdp": (D,), "axonn": (used, min(R, D), R, C)}.get(strategy, ())

    fits, why = [], ""
    for shape in shapes_for(strategy, world):
        try:
            check_divisibility(config, shape, batch_size)
            fits.append(shape)
        except ValueError as err:
            why = why or f"{shape}: {err}"
    if not fits:
        raise ValueError(f"no {strategy} grid of {world} ranks splits this model and batch"
                         + (f" (e.g. {why})" if why else f": {strategy} needs more than {world} rank(s)"))
    return max(fits, key=preference)
