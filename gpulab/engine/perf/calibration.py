"""The wait an all-reduce pays in training beyond its timed cost, calibrated on three measured grids.

The fit times each collective with every rank starting it together. In training the ranks reach a
row or col all-reduce out of step, after a layer's work, and on ranks that share cores the first to
arrive spin on the cores the others still compute on: the engine's tensor all-reduces then take
several times the fit's price (docs/engine_model_accuracy.md has the runs), a wait no
microbenchmark of the call alone shows. So the fit
measures three grids of the engine's reference model (each twice, at its start and at its end, the
faster kept), and what each iteration took beyond the model is a wait:

- (1, W, 1, 1), every rank in one col group (24 col all-reduces an iteration): over its calls, the
  wait of one col all-reduce over all W ranks, ``call_wait``;
- (W, 1, 1, 1), every rank in one row group (12 row all-reduces): ``row_wait``, the same for row;
- (1, 1, 1, W), every rank a data-parallel replica: ``data_wait``, the wait of the gradient
  all-reduce over the data group, which the replicas reach once an iteration, after all of backward.

The model charges a col (row) all-reduce over g ranks (g - 1) / (W - 1) of that group's wait, as a
ring's steps grow, and the gradient all-reduce over a data group of any size the whole data wait,
once an iteration however many buckets carry it: the replicas drift apart over a whole backward
with nothing between them to keep them in step, and charged whole whatever the group's size it priced
the recorded runs better than scaled as a ring's steps (docs/engine_model_accuracy.md).
The three grids are left out when the model is scored (``pick_validation.validate``), so the other
grids stay out of sample.

Why a wait per group: the kinds of call wait differently. A col all-reduce follows a layer's matmuls
on every rank; a row all-reduce sits where the ranks are already in step (on the emulated clusters,
where a col group crosses the links, row groups wait next to nothing). Charged the col grid's wait,
row calls price row-heavy grids long and the picks get worse; without a data wait every grid with
data parallelism comes out short, and on fast links the fastest grids are data-parallel
(docs/engine_model_accuracy.md has the runs and their numbers).
"""

from __future__ import annotations

from gpulab.engine.gpt.config import GPTConfig
from gpulab.engine.parallel.gpt import check_divisibility

BATCH = 16  # sequences, as the recorded benchmarks (benchmarks/engine_grids.py) run the reference model
ITERS = 5


# the groups whose all-reduces wait, each calibrated on its own grid, and each one's wait in a FittedMachine
FIELDS = {"col": "call_wait", "row": "row_wait", "data": "data_wait"}
GROUPS = tuple(FIELDS)


def calibration_shape(world: int, group: str = "col") -> tuple[int, int, int, int]:
    """The grid the fit measures for ``group``: every rank in one col, row or data group."""
    return {"col": (1, world, 1, 1), "row": (world, 1, 1, 1), "data": (1, 1, 1, world)}[group]


def calibrated_on(machine) -> list[tuple[int, int, int, int]]:
    """The grids a fitted ``machine`` measured itself, which scoring it leaves out ([] where it charges no
    wait: a fit not calibrated, a named machine)."""
    if not any(getattr(machine, field, 0.0) for field in FIELDS.values()):
        return []
    return [calibration_shape(machine.ranks, g) for g in GROUPS]


def waits_charged(config: GPTConfig, shape, batch_size: int, group: str = "col") -> int:
    """How many waits of ``group`` the model charges one iteration of ``shape`` (``terms.comm_rows``):
    one per col or row all-reduce; one for the data group's gradient all-reduce, however many buckets."""
    from gpulab.engine.perf.terms import comm_rows

    rows = [r for r in comm_rows(config, shape, batch_size, config.block_size)
            if r["group"] == group and r["op"] == "all_reduce"]
    return min(1, len(rows)) if group == "data" else sum(r["count"] for r in rows)


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
    twice, at its start and at its end, and keeps the faster: a single measurement can come out far
    slower than other fits' and the benchmark's own (docs/engine_model_accuracy.md)."""
    from gpulab.engine.perf.timing import bench_config, measure

    config = bench_config()
    if skipped(comm.size, config):
        return None
    took = {g: measure(comm, config, calibration_shape(comm.size, g), BATCH, iters=ITERS, warmup=2, device=device)
            for g in GROUPS}
    return None if comm.rank != 0 else {g: m["iter_s"] for g, m in took.items()}


def waits(machine, measured: list[dict | None]) -> tuple[dict, str]:
    """Each group's wait (s, never below 0), {"call_wait": col, "row_wait": row, "data_wait": data}, and
    how it was found, from the calibration grids' ``measured`` iterations (``measure_grids``);
    ``machine``: the fit so far."""
    from dataclasses import replace

    from gpulab.engine.perf.predict import predict
    from gpulab.engine.perf.timing import bench_config

    config, world = bench_config(), machine.ranks
    why = skipped(world, config)
    if why or None in measured:
        return dict.fromkeys(FIELDS.values(), 0.0), why or "not calibrated: a calibration grid was not measured"
    bare, out, lines = replace(machine, **dict.fromkeys(FIELDS.values(), 0.0)), {}, []
    for group, field in FIELDS.items():
        shape = calibration_shape(world, group)
        times = [m[group] for m in measured]
        took, predicted = min(times), predict(config, shape, BATCH, bare)["iter_s"]
        calls = waits_charged(config, shape, BATCH, group)
        out[field] = max(0.0, (took - predicted) / calls)
        over = (f"over its {calls} {group} all-reduces: {out[field] * 1e3:.2f} ms each" if group != "data"
                else f"once an iteration: {out[field] * 1e3:.2f} ms")
        lines.append(f"{group}: grid {shape}, {took * 1e3:.1f} ms an iteration (the faster of "
                     f"{', '.join(f'{t * 1e3:.1f}' for t in times)}) against {predicted * 1e3:.1f} ms priced, {over}")
    return out, (f"the engine's reference model, {BATCH} sequences, each grid the median of {ITERS} iterations; "
                 + "; ".join(lines) + f"; a row or col all-reduce over g ranks pays (g - 1) / ({world} - 1) of "
                 "its wait, the data group's gradient all-reduce the whole data wait")
