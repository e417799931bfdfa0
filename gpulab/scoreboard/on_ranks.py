"""The scoreboard's measurements inside an MPI job: ``python -m gpulab.scoreboard.on_ranks TASK ARGS OUT``.

TASK is ``fit`` (the two-level ping-pong fit of ``gpulab.bcast.measurement.experiments``), ``times``
(``measure_bcast`` of each [algorithm, bytes, options(, iterations)] point, ``auto`` included), ``train``
(``gpulab.workloads.reduce_bcast_training.train`` with each broadcast algorithm) or ``engine``
(``gpulab.engine.perf.timing.measure`` of each grid shape and overlap setting); ARGS is JSON; rank 0
writes the result to OUT as JSON.

Every task but ``fit`` measures in ``rounds`` interleaved rounds: each point once per round, the order
turning every round, so a busy moment on shared cores hits one round of every point, and two points
compare by the ratio of their times in the same rounds (``gpulab.stats.paired_ratio``). Each point's
result keeps every round's sample.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
from pathlib import Path

from gpulab.lazy_mpi import lazy_mpi
from gpulab.stats import median_interval

MPI = lazy_mpi(globals())

VALIDATE_UP_TO = 4 << 20  # bytes: checking a broadcast's content costs as much as one more broadcast
ENGINE_TIMES = ("wall_s", "compute_s", "exposed_comm_s", "hidden_comm_s")  # per round, from the timeline summary


def in_rounds(rounds: int, count: int):
    """(round, index) for ``count`` points in ``rounds`` rounds, the order turning every round."""
    for r in range(rounds):
        for i in (range(count) if r % 2 == 0 else reversed(range(count))):
            yield r, i


def fit(comm, args: dict):
    from gpulab.bcast.measurement import experiments

    return experiments.fit(comm, args["sizes"], time_budget=args.get("time_budget", 0.01))


def times(comm, args: dict):
    """Each point's first-round record, its ``max_us`` the median over rounds, ``max_us_rounds`` every round's:
    the slowest rank's mean time, which the cost model predicts. The content is validated in the first round."""
    from gpulab.bcast.measurement.experiments import auto_registered
    from gpulab.bcast.measurement.measure import measure_bcast

    points, rows = args["points"], {}
    if any(point[2].get("device") == "cupy" for point in points):
        from gpulab.launch import pin_gpu

        pin_gpu(comm)  # one GPU per node-local rank, before CuPy starts CUDA
    with auto_registered():  # "auto" decides from $GPULAB_TUNING_TABLE, as bcast(..., "auto") does
        for r, i in in_rounds(args.get("rounds", 1), len(points)):
            name, nbytes, options, *iters = points[i]  # a point may time more iterations (a small message)
            row = measure_bcast(comm, name, nbytes, iters=iters[0] if iters else args["iters"], warmup=args["warmup"],
                                time_budget=args["time_budget"], validate=r == 0 and nbytes <= VALIDATE_UP_TO,
                                **options)
            rows.setdefault(i, {**row, "max_us_rounds": []})["max_us_rounds"].append(row["max_us"])
    out = [{**rows[i], "max_us": statistics.median(rows[i]["max_us_rounds"])} for i in range(len(points))]
    return out if comm.rank == 0 else None


def train(comm, args: dict):
    """Per algorithm: ``prime`` steps untimed once, then in each of ``rounds`` rounds (default 1) ``steps`` steps
    from the same start, of which the first ``warmup`` are not counted; per round the step time (the slowest
    rank's compute + reduce + broadcast, median over the counted steps) and the broadcast's, and a digest of
    the parameters the first round trained (equal digests: the same bits)."""
    import numpy as np

    from gpulab.workloads.reduce_bcast_training import train as train_steps

    algorithms, counted, out = args["algorithms"], range(args.get("warmup", 0), args["steps"]), {}
    for algorithm in algorithms:
        if args.get("prime"):
            train_steps(comm, args["prime"], algorithm, barriers=True)
    for _, i in in_rounds(args.get("rounds", 1), len(algorithms)):
        algorithm = algorithms[i]
        params, records = train_steps(comm, args["steps"], algorithm, barriers=True)
        every = comm.gather(records)
        if comm.rank == 0:
            steps = [max(ranks[s]["compute_s"] + ranks[s]["reduce_s"] + ranks[s]["bcast_s"] for ranks in every)
                     for s in counted]
            run = out.setdefault(algorithm, {"step_s_rounds": [], "bcast_s_rounds": []})
            run["step_s_rounds"].append(float(np.median(steps)))
            run["bcast_s_rounds"].append(float(np.median([max(ranks[s]["bcast_s"] for ranks in every)
                                                          for s in counted])))
            if "digest" not in run:
                flat = np.concatenate([p.ravel() for p in params.values()])
                run.update(gradient_bytes=int(flat.nbytes), digest=hashlib.sha256(flat.tobytes()).hexdigest())
    for run in out.values():
        run.update(step_s=statistics.median(run["step_s_rounds"]), bcast_s=statistics.median(run["bcast_s_rounds"]))
    return out if comm.rank == 0 else None


def engine(comm, args: dict):
    """Each (shape, overlap) as ``gpulab bench engine`` rows it, with ``iter_s`` and the summary's times the
    medians over rounds (its groups' bytes are the same every round), ``rounds`` every round's times,
    ``iter_s_rounds`` every round's iteration and ``iter_s_interval`` its median's 95% interval."""
    from threadpoolctl import threadpool_limits

    from gpulab.engine import GPTConfig, check_divisibility, grid_shapes
    from gpulab.engine.parallel.overlap import Overlap
    from gpulab.engine.perf.timing import bench_config, measure

    config = GPTConfig.from_dict(args["config"]) if args.get("config") else bench_config()
    shapes = grid_shapes(comm.size) if args["shapes"] == "all" else [tuple(s) for s in args["shapes"]]
    runs = [(shape, Overlap.parse(text, progress=args.get("progress", "poll"),
                                  bucket_bytes=args.get("bucket_kb", 256) << 10))
            for shape in shapes for text in args["overlaps"]]
    for shape, _ in runs:
        check_divisibility(config, shape, args["batch_size"])
    local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
    threadpool_limits(max(1, (os.cpu_count() or 1) // local))  # the node's cores shared by its ranks
    rows = {}
    for _, i in in_rounds(args["rounds"], len(runs)):
        shape, overlap = runs[i]
        row = measure(comm, config, shape, args["batch_size"], overlap, iters=args["iters"], warmup=args["warmup"])
        if comm.rank == 0:
            row.pop("per_rank", None)
            rows.setdefault(i, {**row, "rounds": []})["rounds"].append(
                {"iter_s": row["iter_s"], **{k: row["summary"][k] for k in ENGINE_TIMES}})
    if comm.rank != 0:
        return None
    out = []
    for i in range(len(runs)):
        row, rounds = rows[i], rows[i]["rounds"]
        median = {k: statistics.median(r[k] for r in rounds) for k in ("iter_s", *ENGINE_TIMES)}
        speed = {"tokens_per_s": row["batch_size"] * row["seq_len"] / median["iter_s"],
                 "flops_per_s": row["model_flops"] / median["iter_s"],
                 "mfu": row["model_flops"] / median["iter_s"] / row["peak_flops"] if row["peak_flops"] else None}
        times = [r["iter_s"] for r in rounds]
        out.append({**row, **speed, "iter_s": median["iter_s"], "iter_s_rounds": times,
                    "iter_s_interval": median_interval(times).to_dict(),
                    "summary": {**row["summary"], **{k: median[k] for k in ENGINE_TIMES}}})
    return out


TASKS = {"fit": fit, "times": times, "train": train, "engine": engine}


def main(task: str, args: str, out: str) -> None:
    result = TASKS[task](MPI.COMM_WORLD, json.loads(args))
    if MPI.COMM_WORLD.rank == 0:
        Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    from gpulab.launch import run_on_ranks

    run_on_ranks(main, *sys.argv[1:4])
