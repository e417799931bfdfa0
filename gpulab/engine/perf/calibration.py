"""The wait a tensor all-reduce pays in training beyond its timed cost, calibrated on one measured grid.

The fit times each collective with every rank starting it together. In training the ranks reach a
row or col all-reduce out of step, after a layer's work, and on ranks that share cores the first to
arrive spin on the cores the others still compute on: on one 2-core machine at 8 ranks the engine's
tensor all-reduces took 3.3-3.7x the fit's price in grids without a depth dimension
(docs/engine_model_accuracy.md), a wait no microbenchmark of the call alone shows. So, where every
rank runs on one node, the fit measures one grid of the engine's reference model, (1, W, 1, 1) (every
rank in one col group, 24 col all-reduces an iteration; twice, the faster kept), and charges what that
iteration took beyond the model to its col all-reduces: ``call_wait`` seconds each. The model then
charges a row or col all-reduce over g ranks (g - 1) / (W - 1) of it, as a ring's steps grow. The
calibration grid is left out when the model is scored (``agreement.validate``), so the other grids stay
out of sample. On 8 ranks of a 2-core machine it took the model's median error within 20% in three runs
of three (four of six runs without it) and its rank correlation from 0.58-0.85 to 0.88-0.96.

Not on several nodes: there the calibration grid's col groups cross the links and the excess of a
call across a link did not carry over to calls inside a node (scored offline on the recorded runs:
2 x 2 block at 100 Mbit/s went from 3 of 3 runs meeting the targets to 0;
docs/results/engine_accuracy_calibration_explored/).
"""

from __future__ import annotations

from gpulab.engine.gpt.config import GPTConfig
from gpulab.engine.parallel.gpt import check_divisibility

BATCH = 16  # sequences, as the recorded benchmarks (benchmarks/engine_grids.py) run the reference model
ITERS = 5


def calibration_shape(world: int) -> tuple[int, int, int, int]:
    """The grid the fit measures: every rank in one col group."""
    return (1, world, 1, 1)


def calibrated_on(machine) -> tuple[int, int, int, int] | None:
    """The grid a fitted ``machine`` measured itself, which scoring it leaves out; None where it calibrated nothing."""
    return calibration_shape(machine.ranks) if getattr(machine, "call_wait", 0.0) else None


def col_all_reduces(config: GPTConfig, shape, batch_size: int) -> int:
    """How many col all-reduces one iteration of ``shape`` makes (``terms.comm_rows``)."""
    from gpulab.engine.perf.terms import comm_rows

    return sum(r["count"] for r in comm_rows(config, shape, batch_size, config.block_size)
               if r["group"] == "col" and r["op"] == "all_reduce")


def skipped(world: int, node_ranks: int, config: GPTConfig) -> str:
    """Why the fit does not calibrate here ("" where it does)."""
    if world < 2:
        return "one rank: no tensor all-reduce"
    if node_ranks < world:
        return f"not calibrated: the ranks span several nodes ({node_ranks} of {world} on the fullest)"
    try:
        check_divisibility(config, calibration_shape(world), BATCH)
    except ValueError as error:
        return f"not calibrated: the reference model does not split over {world} ranks ({error})"
    return ""


def measure_grid(comm, node_ranks: int, device: str = "host") -> float | None:
    """Collective: one iteration of the calibration grid (the median of ``ITERS``) on rank 0; None where the
    fit does not calibrate (``skipped``) and on the other ranks. The fit measures it twice, at its start
    and at its end, and keeps the faster: one of them came out 1.8x and 2.6x the other fits' (and the
    benchmark's own) in two jobs of six, at 4 and at 8 ranks."""
    from gpulab.engine.perf.timing import bench_config, measure

    config = bench_config()
    if skipped(comm.size, node_ranks, config):
        return None
    measured = measure(comm, config, calibration_shape(comm.size), BATCH, iters=ITERS, warmup=2, device=device)
    return None if measured is None else measured["iter_s"]


def call_wait(machine, node_ranks: int, measured: list[float | None]) -> tuple[float, str]:
    """The wait per col all-reduce over all of ``machine.ranks`` (s, never below 0) and how it was found,
    from the calibration grid's ``measured`` iterations (``measure_grid``); ``machine``: the fit so far."""
    from dataclasses import replace

    from gpulab.engine.perf.predict import predict
    from gpulab.engine.perf.timing import bench_config

    config, world = bench_config(), machine.ranks
    why = skipped(world, node_ranks, config)
    if why:
        return 0.0, why
    shape, took = calibration_shape(world), min(measured)
    predicted = predict(config, shape, BATCH, replace(machine, call_wait=0.0))["iter_s"]
    calls = col_all_reduces(config, shape, BATCH)
    wait = max(0.0, (took - predicted) / calls)
    return wait, (f"the engine's grid {shape}, reference model, {BATCH} sequences: {took * 1e3:.1f} ms an iteration "
                  f"(the faster of {', '.join(f'{t * 1e3:.1f}' for t in measured)}; each the median of {ITERS}) "
                  f"against {predicted * 1e3:.1f} ms priced, over its {calls} col all-reduces: {wait * 1e3:.2f} ms "
                  f"each, (g - 1) / ({world} - 1) of it for a group of g")
