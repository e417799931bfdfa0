"""AxoNN against its baselines on this machine: each strategy's best grid, predicted, then measured.

    machine = fit(comm)                                   # gpulab.engine.perf.fitted_machine, inside an MPI job
    plans = best_plans(cfg, world=4, batch_size=16, machine=machine)   # no MPI: the model only
    rows = [measure_plan(comm, cfg, p, batch_size=16) for p in plans]  # every rank; rows on rank 0

The rows are the live variants of ``gpulab.engine.strategies.TABLE``
(``LiveVariant``), Megatron-LM twice: tensor x data parallelism, and tensor x
pipeline x data (``megatron-pp``: ``pipe`` > 1 stages, 2 micro-batches per
stage, 1F1B). AxoNN searches every shape, the others' included, so its best
is the best row of all; its own row here is the best shape that only the 4D
grid has (``own_shapes_only``: ``strategy_of`` = "axonn", e.g. (2, 1, 2, 1)),
so that every row is a different grid. Each strategy's grid
is the fastest, by the performance model fitted on this machine, of those that
split the model and the batch; its prediction is ``compare.evaluate``'s for
that configuration, with what the engine runs: no recomputation, no flash
attention, overlap off. The measurement (``timing.measure``) is the median
iteration and the bytes each communication group moved in it, per rank.
"""

from __future__ import annotations

from gpulab.engine.parallel.gpt import check_divisibility
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.parallel.pipeline import check_pipeline
from gpulab.engine.perf.compare import evaluate
from gpulab.engine.perf.timing import measure
from gpulab.engine.perf.volume import collective_calls, totals
from gpulab.engine.strategies import TABLE, shapes_for, strategy_of

MICRO_PER_STAGE = 2  # pipeline micro-batches per stage: m = 2p keeps the bubble at (p-1)/(3p-1)


def live_variants() -> dict:
    """Every live row's name -> (its ``Strategy``, its ``LiveVariant``), in ``TABLE``'s order."""
    return {v.name: (s, v) for s in TABLE.values() for v in s.live_variants()}


def live_names() -> list[str]:
    return list(live_variants())


def configurations(name: str, config, world: int, batch_size: int):
    """(shape, pipe, micro_batches) of the live variant ``name`` on ``world`` ranks that the engine can run."""
    variants = live_variants()
    if name not in variants:
        raise ValueError(f"unknown strategy {name!r}; known: {', '.join(variants)}")
    strategy, variant = variants[name]
    for pipe in [p for p in variant.pipes if p <= config.n_layer and world % p == 0]:
        micro = MICRO_PER_STAGE * pipe if pipe > 1 else 1
        for shape in shapes_for(strategy.name, world // pipe):
            if variant.own_shapes_only and strategy_of(shape) != strategy.name:
                continue
            replicas = shape[2] * shape[3]
            try:
                check_divisibility(config, shape, batch_size // micro)
                check_pipeline(config.n_layer, pipe, micro, local_batch=batch_size // replicas)
            except ValueError:
                continue
            if batch_size % (micro * replicas) == 0:
                yield shape, pipe, micro


def predict_plan(config, shape, pipe: int, micro_batches: int, batch_size: int, machine) -> dict:
    """The model's iteration for one configuration, as the engine runs it."""
    return evaluate(config, shape, pipe=pipe, micro_batches=micro_batches, recompute=False,
                    global_batch=batch_size, machine=machine, overlap=Overlap(), flash_attention=False)


def predicted_bytes(config, shape, pipe: int, batch_size: int) -> dict | None:
    """Bytes per group and rank that one iteration's collectives move (``volume``, full buffers, the
    gradient norm included); None with a pipeline, which the volume model does not cover."""
    if pipe > 1:
        return None
    return totals(collective_calls(config, shape, batch_size, grad_norm=True), by="group", value="nbytes")


def best_plans(config, world: int, batch_size: int, machine, strategies=None) -> list[dict]:
    """Per live variant (default: every one, ``live_names``) the configuration the model predicts fastest:
    {"strategy", "shape", "pipe", "micro_batches", "predicted" (the prediction's dict), "predicted_bytes"};
    variants with no grid are left out."""
    plans = []
    for strategy in (live_names() if strategies is None else strategies):
        options = [{"strategy": strategy, "shape": tuple(shape), "pipe": pipe, "micro_batches": m,
                    "predicted": predict_plan(config, shape, pipe, m, batch_size, machine)}
                   for shape, pipe, m in configurations(strategy, config, world, batch_size)]
        if options:
            plan = min(options, key=lambda o: o["predicted"]["iter_s"])
            plans.append({**plan, "predicted_bytes": predicted_bytes(config, plan["shape"], plan["pipe"], batch_size)})
    return plans


def measure_plan(comm, config, plan: dict, batch_size: int, iters: int = 5, warmup: int = 1) -> dict | None:
    """``timing.measure`` of one plan on ``comm`` (every rank calls it); the row on rank 0, with the plan."""
    row = measure(comm, config, plan["shape"], batch_size, Overlap(), iters=iters, warmup=warmup,
                  pipe=plan["pipe"], micro_batches=plan["micro_batches"])
    if row is None:
        return None
    return {**row, "strategy": plan["strategy"], "config_name": plan["predicted"]["config"],
            "predicted": plan["predicted"], "predicted_bytes": plan["predicted_bytes"]}
