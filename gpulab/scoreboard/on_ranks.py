"""The scoreboard's broadcast measurements inside an MPI job: ``python -m gpulab.scoreboard.on_ranks TASK ARGS OUT``.

TASK is ``fit`` (the two-level ping-pong fit of ``gpulab.bcast.measurement.experiments``), ``times``
(``measure_bcast`` of each [algorithm, bytes, options] point, ``auto`` included) or ``train``
(``gpulab.workloads.reduce_bcast_training.train`` once per broadcast algorithm); ARGS is JSON;
rank 0 writes the result to OUT as JSON.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())

VALIDATE_UP_TO = 4 << 20  # bytes: checking a broadcast's content costs as much as one more broadcast


def fit(comm, args: dict):
    from gpulab.bcast.measurement import experiments

    return experiments.fit(comm, args["sizes"], time_budget=args.get("time_budget", 0.01))


def times(comm, args: dict):
    from gpulab.bcast.measurement.experiments import auto_registered
    from gpulab.bcast.measurement.measure import measure_bcast

    rows = []
    with auto_registered():  # "auto" decides from $GPULAB_TUNING_TABLE, as bcast(..., "auto") does
        for name, nbytes, options in args["points"]:
            row = measure_bcast(comm, name, nbytes, iters=args["iters"], warmup=args["warmup"],
                                time_budget=args["time_budget"], validate=nbytes <= VALIDATE_UP_TO, **options)
            if name == "auto":
                from gpulab.bcast.selection.auto import select

                decision = select(nbytes, comm)
                row["chose"] = {"algorithm": decision.name, "options": decision.options}
            rows.append(row)
    return rows if comm.rank == 0 else None


def train(comm, args: dict):
    """Each broadcast trains the same steps; per step the slowest rank's compute + reduce + broadcast."""
    import numpy as np

    from gpulab.workloads.reduce_bcast_training import train as train_steps

    out = {}
    for algorithm in args["algorithms"]:
        params, records = train_steps(comm, args["steps"], algorithm, barriers=True)
        flat = np.concatenate([p.ravel() for p in params.values()])
        every = comm.gather(records)
        if comm.rank == 0:
            steps = [max(ranks[s]["compute_s"] + ranks[s]["reduce_s"] + ranks[s]["bcast_s"] for ranks in every)
                     for s in range(args["warmup"], args["steps"])]
            bcasts = [max(ranks[s]["bcast_s"] for ranks in every) for s in range(args["warmup"], args["steps"])]
            out[algorithm] = {"step_s": float(np.median(steps)), "bcast_s": float(np.median(bcasts)),
                              "gradient_bytes": int(flat.nbytes),
                              "digest": hashlib.sha256(flat.tobytes()).hexdigest()}
    return out if comm.rank == 0 else None


TASKS = {"fit": fit, "times": times, "train": train}


def main(task: str, args: str, out: str) -> None:
    result = TASKS[task](MPI.COMM_WORLD, json.loads(args))
    if MPI.COMM_WORLD.rank == 0:
        Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    from gpulab.launch import run_on_ranks

    run_on_ranks(main, *sys.argv[1:4])
