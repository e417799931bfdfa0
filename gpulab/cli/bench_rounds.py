"""``gpulab bench bcast``'s sweep in rounds as its flags ask, in a job; the machine's state handed to that job.

``snapshot_env`` is read by the process that starts a job (the job's own busy ranks would raise the load
it reads); ``measure_rounds`` runs inside the job (``gpulab.bcast.measurement.rounds.sweep_rounds``), with
a progress bar of rounds on rank 0. Used by ``gpulab.cli.bench`` and ``gpulab.cli.bench_jobs``.
"""

from __future__ import annotations

import json
import os
import sys

from gpulab.bcast.measurement.rounds import sweep_rounds
from gpulab.bcast.sizes import format_size
from gpulab.host import snapshot

SNAPSHOT = "GPULAB_BENCH_SNAPSHOT"  # the machine's state read by the launching process, handed to the job


def snapshot_env(ranks: int) -> dict:
    """The machine now, for the job about to start (its own busy ranks would raise the load it reads)."""
    return {SNAPSHOT: json.dumps(snapshot(ranks).to_dict())}


def measure_rounds(comm, args, algorithms: list[str], **measure_kwargs) -> tuple[list[dict], dict]:
    """The job's sweep in rounds as ``args`` ask (``rounds.sweep_rounds``), with a progress bar on rank 0;
    the sweep's summary names its algorithms and the machine's state read before the job."""
    state = os.environ.get(SNAPSHOT)
    state = json.loads(state) if state else snapshot(comm.size).to_dict()  # started inside a job (srun)
    bar = _progress() if comm.rank == 0 and not args.quiet else None
    records, sweep = sweep_rounds(comm, algorithms, args.sizes, rounds=args.rounds, target=args.target,
                                  budget_s=args.budget, root=args.root, iters=args.iters, warmup=args.warmup,
                                  time_budget=args.time_budget or None,
                                  progress=None if bar is None else (lambda *done: _advance(bar, *done)),
                                  **measure_kwargs)
    if bar is not None:
        bar.close()
    return records, {"algorithms": algorithms, **sweep, "snapshot": state}


def _progress():
    # deferred: every gpulab command imports the bench's parser, which imports this module
    from tqdm import tqdm

    return tqdm(total=0, unit="point", file=sys.stderr, mininterval=0.5, dynamic_ncols=True)


def _advance(bar, round_: int, done: int, total: int, record: dict) -> None:
    if done == 1:  # a new round: its points (the open ones) are the bar's total
        bar.reset(total=total)
        bar.set_description(f"round {round_}", refresh=False)
    bar.set_postfix_str(f"{record['algorithm']} {format_size(record['nbytes'])}", refresh=False)
    bar.update()
