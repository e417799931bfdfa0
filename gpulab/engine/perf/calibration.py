"""The wait a tensor all-reduce pays in training beyond its timed cost, calibrated on two measured grids.

The fit times each collective with every rank starting it together. In training the ranks reach a
row or col all-reduce out of step, after a layer's work, and on ranks that share cores the first to
arrive spin on the cores the others still compute on: on one 2-core machine at 8 ranks the engine's
tensor all-reduces took 3.3-3.7x the fit's price in grids without a depth dimension
(docs/engine_model_accuracy.md), a wait no microbenchmark of the call alone shows. So the fit
measures two grids of the engine's reference model (each twice, at its start and at its end, the
faster kept): (1, W, 1, 1), every rank in one col group (24 col all-reduces an iteration), and
(W, 1, 1, 1), every rank in one row group (12 row all-reduces). What each iteration took beyond the
model, over its calls, is the wait of one such call over all W ranks: ``call_wait`` for col,
``row_wait`` for row. The model then charges a col (row) all-reduce over g ranks (g - 1) / (W - 1)
of that group's wait, as a ring's steps grow. Both grids are left out when the model is scored
(``agreement.validate``), so the other grids stay out of sample.

Why two and not one: the two kinds of call wait differently. A col all-reduce follows a layer's
matmuls on every rank; a row all-reduce sits where the ranks are already in step. Charging row calls
the col grid's wait priced (8, 1, 1, 1) 42% long on one machine at 8 ranks, and on the emulated
clusters, where a col group crosses the links, it made the picks at 2 x 2 block, 100 Mbit/s, 1.15-1.18
(its row groups wait nothing there: 0.0-0.1 ms a call). Measured with both waits
(docs/engine_model_accuracy.md, 2026-12-05), the model's median error at 1 Gbit/s came out 2.5-13.8%
(6-30% with no wait charged there) and on one machine at 8 ranks 7-12% (13-19% with one wait).
"""

from __future__ import annotations

from gpulab.engine.gpt.config import GPTConfig
from gpulab.engine.parallel.gpt import check_divisibility

BATCH = 16  # sequences, as the recorded benchmarks (benchmarks/engine_grids.py) run the reference model
ITERS = 5


GROUPS = ("col", "row")  # the tensor groups whose all-reduces wait, each calibrated on its own grid


def calibration_shape(world: int, group: str = "col") -> tuple[int, int, int, int]:
    """The grid the fit measures for ``group``: every rank in one col (or row) group."""
    return (1, world, 1, 1) if group == "col" else (world, 1, 1, 1)


def calibrated_on(machine) -> list[tuple[int, int, int, int]]:
    """The grids a fitted ``machine`` measured itself, which scoring it leaves out ([] where it charges no
    wait: older fits on several nodes, named machines)."""
    if not getattr(machine, "call_wait", 0.0) and not getattr(machine, "row_wait", None):
        return []
    # fits before the row grid was calibrated (row_wait None) measured only the col grid
    groups = GROUPS if getattr(machine, "row_wait", None) is not None else ("col",)
    return [calibration_shape(machine.ranks, g) for g in groups]


def all_reduces(config: GPTConfig, shape, batch_size: int, group: str = "col") -> int:
    """How many all-reduces over ``group`` one iteration of ``shape`` makes (``terms.comm_rows``)."""
    from gpulab.engine.perf.terms import comm_rows

    return sum(r["count"] for r in comm_rows(config, shape, batch_size, config.block_size)
               if r["group"] == group and r["op"] == "all_reduce")


def skipped(world: int, config: GPTConfig) -> str:
    """Why the fit does not calibrate here ("" where it does)."""
    if world < 2:
        return "one rank: no tensor all-reduce"
    try:
        for group in GROUPS:
            check_divisibility(config, calibration_shape(world, group), BATCH)
    except ValueError as error:
        return f"not calibrated: the reference model does not split over {world} ranks ({error})"
    return ""


def measure_grids(comm, device: str = "host") -> dict | None:
    """Collective: one iteration of each calibration grid (the median of ``ITERS``), {group: s} on rank 0;
    None where the fit does not calibrate (``skipped``) and on the other ranks. The fit measures them
    twice, at its start and at its end, and keeps the faster: one measurement came out 1.8x and 2.6x
    the other fits' (and the benchmark's own) in two jobs of six, at 4 and at 8 ranks."""
    from gpulab.engine.perf.timing import bench_config, measure

    config = bench_config()
    if skipped(comm.size, config):
        return None
    took = {g: measure(comm, config, calibration_shape(comm.size, g), BATCH, iters=ITERS, warmup=2, device=device)
            for g in GROUPS}
    return None if comm.rank != 0 else {g: m["iter_s"] for g, m in took.items()}


def waits(machine, measured: list[dict | None]) -> tuple[dict, str]:
    """The wait per all-reduce over all of ``machine.ranks`` (s, never below 0), {"call_wait": col,
    "row_wait": row}, and how it was found, from the calibration grids' ``measured`` iterations
    (``measure_grids``); ``machine``: the fit so far."""
    from dataclasses import replace

    from gpulab.engine.perf.predict import predict
    from gpulab.engine.perf.timing import bench_config

    config, world = bench_config(), machine.ranks
    why = skipped(world, config)
    if why or None in measured:
        return {"call_wait": 0.0, "row_wait": 0.0}, why or "not calibrated: a calibration grid was not measured"
    bare, out, lines = replace(machine, call_wait=0.0, row_wait=0.0), {}, []
    for group, field in zip(GROUPS, ("call_wait", "row_wait")):
        shape = calibration_shape(world, group)
        times = [m[group] for m in measured]
        took, predicted = min(times), predict(config, shape, BATCH, bare)["iter_s"]
        calls = all_reduces(config, shape, BATCH, group)
        out[field] = max(0.0, (took - predicted) / calls)
        lines.append(f"{group}: grid {shape}, {took * 1e3:.1f} ms an iteration (the faster of "
                     f"{', '.join(f'{t * 1e3:.1f}' for t in times)}) against {predicted * 1e3:.1f} ms priced, "
                     f"over its {calls} {group} all-reduces: {out[field] * 1e3:.2f} ms each")
    return out, (f"the engine's reference model, {BATCH} sequences, each grid the median of {ITERS} iterations; "
                 + "; ".join(lines) + f"; (g - 1) / ({world} - 1) of it for a group of g")
