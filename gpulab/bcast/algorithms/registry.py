"""The one registry of broadcast algorithms: a record per algorithm that everything else loops over.

A record (``Algorithm``) says what the executor runs (a schedule builder, or
a runner on a Group for 'mpi' and 'hierarchical'), how the cost model prices
it (its critical-path plan, its pipeline shape), which of its options the
tuner and the model try (``tuned``), and where it appears (``featured``).
``entry`` (``ALGORITHMS``, option checks), ``cost.hockney`` (plans,
``choices``, ``best_chunk``), ``measurement.experiments`` (the sweep's
``candidates``), ``plots.drawings``, ``cost.placement`` and ``gpulab bench``
read the records, never a list of names. docs/adding_an_algorithm.md adds one:

    register(pipeline_record("reverse_chain", reverse_chain))     # a builder, one record

Importing it starts no MPI (the builders and runners use the lazy idiom).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from gpulab.bcast.algorithms import critical_path as cp
from gpulab.bcast.algorithms import pipelined, scatter_allgather, trees
from gpulab.bcast.algorithms.hierarchical import hierarchical
from gpulab.bcast.algorithms.native import native

# the options the tuner sweeps and the model compares (those below the message, those below p)
CHUNKS = (16 << 10, 64 << 10, 256 << 10, 1 << 20)
RADICES = (3, 4, 8)


@dataclass(frozen=True, eq=False)
class Algorithm:
    """One broadcast algorithm (compared by identity: a record is its own cache key).

    ``build(p, root, me, nbytes, **options)`` returns one rank's schedule
    (``executor.Op``s in group indices, cached by the builder); its keyword
    defaults are the algorithm's options. Or ``run(group, data, root, **options)``
    runs it on a Group without a schedule ('mpi', 'hierarchical').
    ``plan(nbytes, p, serial_n, serial_chunk, **options)`` is its critical path
    (``critical_path.Plan``); ``replayed``: up to ``critical_path.REPLAY_MAX_P``
    ranks the model replays the schedules instead (blocking ops only).
    ``shape(p, serial)`` is a pipeline's (D, F) and ``share`` the part of the
    message one pipeline carries (``hockney.best_chunk`` sizes chunks with both).
    ``tuned``: options the tuner sweeps and the model chooses ("chunk_bytes",
    "radix"). ``level``: may be one level of 'hierarchical'. ``featured``: in
    the short lists the broadcast explorer starts with.
    """

    name: str
    build: Callable | None = None
    run: Callable | None = None
    plan: Callable | None = None
    replayed: bool = False
    shape: Callable | None = None
    share: float = 1.0
    tuned: tuple[str, ...] = ()
    level: bool = True
    featured: bool = False

    @property
    def pipelined(self) -> bool:
        return self.shape is not None

    @functools.cached_property
    def options(self) -> tuple[str, ...]:
        """The keyword options it accepts (``run`` is internal to hierarchical)."""
        params = inspect.signature(self.build or self.run).parameters.values()
        return tuple(p.name for p in params if p.default is not inspect.Parameter.empty and p.name != "run")


def pipeline_record(name: str, build: Callable, *, split: bool = False, featured: bool = False) -> Algorithm:
    """The record of a pipelined tree whose (D, F) is read from ``build``'s schedules (``split``: two
    halves, each down one subtree of the binary heap, then swapped)."""
    if split:  # the whole heap, which the halves travel down, stands in for it at scale
        shape = functools.partial(cp.pipeline_shape, build, halves=2, stand_in=pipelined.binary_tree)
        plan = functools.partial(cp.split_pipeline_plan, shape)
    else:
        shape = functools.partial(cp.pipeline_shape, build)
        plan = functools.partial(cp.pipeline_plan, shape)
    return Algorithm(name, build=build, plan=plan, shape=shape, share=0.5 if split else 1.0,
                     tuned=("chunk_bytes",), featured=featured)


# name -> record, in the order the model and the tuner list their candidates
REGISTRY: dict[str, Algorithm] = {a.name: a for a in (
    Algorithm("mpi", run=native),  # priced as MPICH's own choice (hockney.mpich_choice)
    Algorithm("linear", build=trees.linear, plan=cp.linear_plan),
    Algorithm("binomial", build=trees.binomial, plan=functools.partial(cp.tree_plan, trees.binomial),
              featured=True),
    Algorithm("scatter_allgather_rd", build=scatter_allgather.scatter_allgather_rd,
              plan=cp.scatter_allgather_rd_plan, replayed=True),
    Algorithm("scatter_allgather_ring", build=scatter_allgather.scatter_allgather_ring,
              plan=cp.scatter_allgather_ring_plan, replayed=True, featured=True),
    Algorithm("knomial", build=trees.knomial, plan=functools.partial(cp.tree_plan, trees.knomial),
              tuned=("radix",)),
    pipeline_record("chain", pipelined.chain, featured=True),
    pipeline_record("binary_tree", pipelined.binary_tree),
    pipeline_record("split_binary_tree", pipelined.split_binary_tree, split=True),
    Algorithm("hierarchical", run=hierarchical, level=False),
)}
changed: list[Callable[[], None]] = []  # called after every register/unregister (caches keyed by name)


def register(algorithm: Algorithm) -> Algorithm:
    """Add an algorithm: from now on it runs, is priced, tuned and accepted by name everywhere."""
    if algorithm.name in REGISTRY or algorithm.name in ("auto", "nccl"):
        raise ValueError(f"a broadcast algorithm named {algorithm.name!r} exists already")
    if (algorithm.build is None) == (algorithm.run is None):
        raise ValueError(f"{algorithm.name}: give a schedule builder or a runner, not both or neither")
    REGISTRY[algorithm.name] = algorithm
    for hook in changed:
        hook()
    return algorithm


def unregister(name: str) -> None:
    """Remove an algorithm added by ``register`` (a test's toy)."""
    del REGISTRY[name]
    for hook in changed:
        hook()


def get(name: str) -> Algorithm:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown broadcast algorithm {name!r}; valid names: {sorted(REGISTRY)}") from None


def names() -> list[str]:
    """Every algorithm, in registry order."""
    return list(REGISTRY)


def pipelined_names() -> list[str]:
    return [name for name, a in REGISTRY.items() if a.pipelined]


def level_names() -> list[str]:
    """The flat algorithms: those 'hierarchical' may run at one of its levels."""
    return [name for name, a in REGISTRY.items() if a.level]


def featured_names() -> list[str]:
    return [name for name, a in REGISTRY.items() if a.featured]


def candidates(nbytes: int, p: int, *, radices=RADICES, chunks=CHUNKS, extra_chunks=(),
               best_chunk: Callable[[str], int] | None = None) -> list[tuple[str, dict]]:
    """Every flat (algorithm, options) to try at one size, in registry order.

    An algorithm with a radix is tried at each of ``radices`` below p; a pipelined one
    at each of ``chunks`` (and ``extra_chunks``) below the message (the whole message
    if none is), or at ``best_chunk(name)`` alone when that is given (the model's choice).
    """
    out = []
    for name, a in REGISTRY.items():
        if not a.level:
            continue
        choices = [{}]
        if "radix" in a.tuned:
            choices = [dict(c, radix=r) for c in choices for r in radices if r < p]
        if "chunk_bytes" in a.tuned:
            sizes = [best_chunk(name)] if best_chunk else \
                sorted({c for c in (*chunks, *extra_chunks) if c < nbytes}) or [nbytes]
            choices = [dict(c, chunk_bytes=int(s)) for c in choices for s in sizes]
        out += [(name, c) for c in choices]
    return out

