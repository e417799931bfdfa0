"""Named training strategies as points of AxoNN's grid (row, col, depth, data): one table, one record each.

    describe((4, 1, 1, 2))              # 'Megatron-LM TP4 x DP2'
    strategy_of((1, 1, 8, 1))           # 'zero3'
    shapes_for("hsdp", 8)               # [(1, 1, 2, 4), (1, 1, 4, 2)]
    pick_shape("megatron", 4, cfg, batch_size=32)   # what `gpulab train --strategy` runs
    TABLE["megatron"].live                # its live variants: "megatron" and "megatron-pp"

Several well-known strategies are special cases of the 4D grid, because of
how a grid dimension splits each layer (``gpulab.engine.parallel.tp3d``):

- ``megatron`` (R, 1, 1, P): Megatron-LM's tensor parallelism times data
  parallelism. With col = 1 a plain layer splits its output features over
  row (Megatron's column-parallel QKV and FC1), a transposed layer its input
  features (the row-parallel attention and MLP projections, one all-reduce
  each forward), and the tied embedding its vocabulary (vocabulary-parallel).
  Megatron-LM keeps TP inside a node and adds a pipeline across nodes.
- ``zero3`` (1, 1, N, 1): ZeRO-3 / FSDP full sharding. Depth shards every
  weight, gradient and optimizer state N ways, all-gathers weights before
  use and reduce-scatters gradients: exactly ZeRO-3's communication.
- ``hsdp`` (1, 1, D, P): hybrid sharding (FSDP's HYBRID_SHARD, ZeRO++'s
  hierarchical partitioning): shard over D ranks, replicate P times.
- ``ddp`` (1, 1, 1, N): plain data parallelism, the whole model on each rank.
- ``axonn`` (R, C, D, P): AxoNN's 4D hybrid; every other shape is only this.

Everything that names strategies loops over ``TABLE``: ``strategy_of``,
``describe``, ``shapes_for``, ``pick_shape`` here, the performance
comparison (``gpulab.engine.perf.compare``), the live plans
(``gpulab.engine.perf.live_plans``) and ``gpulab train --strategy``. A new
strategy is one more ``Strategy`` record (docs/adding_a_strategy.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpulab.engine.parallel.gpt import check_divisibility
from gpulab.engine.parallel.mesh import grid_shapes


@dataclass(frozen=True)
class LiveVariant:
    """One row of the live comparison: a strategy run as the engine can run it."""

    name: str
    pipes: tuple[int, ...] = (1,)  # pipeline stages it may use (those the model's layers and the world allow)
    own_shapes_only: bool = False  # only the shapes that ``strategy_of`` gives this name (not the others')


@dataclass(frozen=True)
class Strategy:
    """One named strategy: which grid shapes it is, how they read, and how the searches treat it."""

    name: str
    description: str
    is_shape: Callable[[tuple], bool]  # which grid shapes (R, C, D, P) this strategy is
    words: Callable[[tuple, str], str]  # a shape in words; the str is the pipeline's " x PP<p>" or ""
    prefer: Callable[[tuple], tuple] = lambda shape: ()  # pick_shape takes the fitting shape that maximises it
    every_shape: bool = False  # is_shape holds for all shapes; strategy_of names it only where no other does
    tp_in_node: bool = False  # shapes_for's max_tp bounds row (tensor parallelism kept inside a node)
    pipelined: bool = False  # the performance comparison also searches pipeline stages around the grid
    live: tuple[LiveVariant, ...] | None = None  # live comparison rows; None: one, the strategy as it is
    # what a tuned run of it switches on, searched by the performance comparison: "interleaved"
    # (virtual pipeline stages), "sequence_parallel", "distributed_optimizer" (ZeRO-1 over data)
    tuned: tuple[str, ...] = ()

    def live_variants(self) -> tuple[LiveVariant, ...]:
        return (LiveVariant(self.name),) if self.live is None else self.live


def _axonn_words(s, pp):
    return f"AxoNN 4D ({s[0]},{s[1]},{s[2]},{s[3]}){pp}"


def _axonn_prefer(s):  # every grid dimension used, then the most 3D tensor parallelism
    R, C, D, _ = s
    return (sum(v > 1 for v in s), min(R, D), R, C)


def _megatron_words(s, pp):
    return f"Megatron-LM TP{s[0]}{pp}" + (f" x DP{s[3]}" if s[3] > 1 else "")


def _ddp_words(s, pp):
    return f"DDP x{s[3]}{pp}" if s[3] > 1 else f"one rank{pp}"


TABLE: dict[str, Strategy] = {s.name: s for s in (  # in the AxoNN paper's order of its comparison
    Strategy("axonn", "AxoNN 4D: 3D tensor parallelism (row x col x depth) times data parallelism",
             is_shape=lambda s: True, words=_axonn_words, prefer=_axonn_prefer, every_shape=True,
             live=(LiveVariant("axonn", own_shapes_only=True),)),  # live: a grid no other row has
    Strategy("megatron", "Megatron-LM: tensor parallelism over row (R,1,1,P), pipeline and data parallelism",
             is_shape=lambda s: s[0] > 1 and s[1] == 1 and s[2] == 1, words=_megatron_words,
             prefer=lambda s: (s[0],), tp_in_node=True, pipelined=True,
             live=(LiveVariant("megatron"), LiveVariant("megatron-pp", pipes=(2, 4, 8))),
             tuned=("interleaved", "sequence_parallel", "distributed_optimizer")),
    Strategy("zero3", "ZeRO-3 / FSDP full sharding (1,1,N,1)",
             is_shape=lambda s: s[0] == s[1] == 1 and s[2] > 1 and s[3] == 1,
             words=lambda s, pp: f"ZeRO-3/FSDP x{s[2]}{pp}"),
    Strategy("hsdp", "hybrid sharding: FSDP inside D ranks, data parallel over P (1,1,D,P)",
             is_shape=lambda s: s[0] == s[1] == 1 and s[2] > 1 and s[3] > 1,
             words=lambda s, pp: f"HSDP shard {s[2]} x replicate {s[3]}{pp}", prefer=lambda s: (s[2],)),
    Strategy("ddp", "plain data parallelism (1,1,1,N)",
             is_shape=lambda s: s[0] == s[1] == s[2] == 1, words=_ddp_words),
)}


class _Descriptions(Mapping):
    """name -> description of every strategy in ``TABLE``, in its order (what ``--strategy`` lists)."""

    def __getitem__(self, name):
        return TABLE[name].description

    def __iter__(self):
        return iter(TABLE)

    def __len__(self):
        return len(TABLE)


STRATEGIES: Mapping[str, str] = _Descriptions()


def register(strategy: Strategy) -> Strategy:
    """Add ``strategy`` to ``TABLE`` (after the others); its name and live variants' names must be new."""
    taken = set(TABLE) | {v.name for s in TABLE.values() for v in s.live_variants()}
    clash = sorted(taken & ({strategy.name} | {v.name for v in strategy.live_variants()}))
    if clash:
        raise ValueError(f"strategy names already taken: {clash}")
    TABLE[strategy.name] = strategy
    return strategy


def lookup(name: str) -> Strategy:
    """The record of ``name``; ValueError (one line) naming the known ones if there is none."""
    if name not in TABLE:
        raise ValueError(f"unknown strategy {name!r}; known: {', '.join(TABLE)}")
    return TABLE[name]


def strategy_of(shape) -> str:
    """The most specific strategy name for a grid shape: the first record whose shapes hold it,
    a record of every shape only when no other does."""
    shape = tuple(shape)
    named = [s for s in TABLE.values() if s.is_shape(shape)]
    specific = [s for s in named if not s.every_shape]
    return (specific or named)[0].name


def describe(shape, pipe: int = 1) -> str:
    """A shape in words, e.g. 'Megatron-LM TP4 x DP2' or 'AxoNN 4D (2,2,2,1)'."""
    shape = tuple(shape)
    return TABLE[strategy_of(shape)].words(shape, f" x PP{pipe}" if pipe > 1 else "")


def shapes_for(strategy: str, world: int, max_tp: int | None = None) -> list[tuple[int, int, int, int]]:
    """Every grid shape of ``world`` ranks that is ``strategy`` (one with ``tp_in_node``: row <=
    ``max_tp``, e.g. the GPUs of a node; axonn: every shape, the others included, as AxoNN searches them)."""
    record = lookup(strategy)
    shapes = [tuple(s) for s in grid_shapes(world)]
    if record.every_shape:
        return shapes
    out = [s for s in shapes if strategy_of(s) == strategy]
    if record.tp_in_node and max_tp is not None:
        out = [s for s in out if s[0] <= max_tp]
    return out


def pick_shape(strategy: str, world: int, config, batch_size: int) -> tuple[int, int, int, int]:
    """One shape of ``strategy`` on ``world`` ranks that splits ``config`` and the batch: the one
    that uses the strategy most (its record's ``prefer``: the most tensor parallelism for megatron,
    the widest sharding for hsdp, every grid dimension for axonn). ValueError (one line) if none does."""
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
    return max(fits, key=TABLE[strategy].prefer)
