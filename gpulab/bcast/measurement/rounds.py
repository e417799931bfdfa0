"""A sweep of broadcast points in interleaved rounds, repeated until each point's median is known well enough.

    records, sweep = sweep_rounds(comm, ["chain", "mpi"], [1 << 10, 1 << 20])             # until within 5%
    records, sweep = sweep_rounds(comm, ["chain", "mpi"], [1 << 20], rounds=6)            # six rounds exactly
    records[0]["avg_us"], records[0]["avg_interval_us"], records[0]["stopped"], sweep["stopped"]

Each round measures every open point once (``measure_bcast``: its sample is that round's average over
ranks of each rank's mean time per call), the order turning from round to round, so that a busy spell
of a shared machine falls on one round of many points rather than on every round of one (Hoefler and
Belli, SC15). The points of one size stay side by side, so the rounds pair them: ``stats.paired_ratio``
compares two algorithms round by round.

Without a fixed ``rounds`` a point closes once its median's 95% interval is within ``target`` of it
(which takes at least ``MIN_ROUNDS``: fewer samples cannot bracket the median at 95%); the sweep stops
when every point is closed ("narrow"), when the next round of the open points would overrun
``budget_s`` ("budget"), or after ``max_rounds`` ("max_rounds"); a fixed count stops after that many
("rounds"). A point says why it stopped: "narrow", or the sweep's reason. Rank 0's clock decides and
every rank follows it.
"""

from __future__ import annotations

import time

from gpulab.bcast.measurement.measure import applicable_options, measure_bcast
from gpulab.bcast.measurement.results import over_rounds
from gpulab.stats import CONFIDENCE, median_interval

MIN_ROUNDS = 6  # the fewest samples whose order statistics bracket the median at 95% (5 give 94%)
MAX_ROUNDS = 50
STRIDE = 0.618034  # the golden ratio's part: round r starts r * STRIDE of the way along, never twice alike


def turned(points: list, round_index: int) -> list:
    """``points`` in the order of round ``round_index``: rotated to a start that moves on every round."""
    if not points:
        return []
    start = int(round_index * STRIDE * len(points)) % len(points)
    return points[start:] + points[:start]


def narrow(samples: list[float], target: float) -> bool:
    """Is the median of ``samples`` known to within ``target`` (relative half-width) at 95%?"""
    interval = median_interval(samples)
    return interval.confidence >= CONFIDENCE and interval.half_width <= target


def sweep_rounds(comm, algorithms: list[str], sizes: list[int], *, rounds: int | None = None, target: float = 0.05,
                 budget_s: float | None = None, max_rounds: int = MAX_ROUNDS, options: dict | None = None,
                 progress=None, **measure_kwargs) -> tuple[list[dict], dict]:
    """Every algorithm at every size in interleaved rounds (collective); the same result on every rank.

    Returns one record per point (``results.over_rounds``, with ``stopped``) in sweep order, and what the
    sweep did: ``{"rounds", "target", "budget_s", "max_rounds", "ran", "seconds", "stopped"}``.
    ``progress(round, done, total, record)`` after each measurement (``round`` counts from 1, ``done`` of
    ``total`` measurements in it); ``measure_kwargs`` go to ``measure_bcast``.
    """
    if rounds is not None and rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    points = [(a, n) for n in sizes for a in algorithms]
    samples: list[list[dict]] = [[] for _ in points]
    took = [0.0] * len(points)  # each point's last measurement, seconds: what the next round will cost
    open_points, closed, stopped, ran, start = list(range(len(points))), {}, None, 0, time.monotonic()
    while stopped is None:
        order = turned(open_points, ran)
        for done, i in enumerate(order, 1):
            algorithm, nbytes = points[i]
            began = time.monotonic()
            mine = applicable_options(algorithm, options) if options else {}
            samples[i].append(measure_bcast(comm, algorithm, nbytes, **mine, **measure_kwargs))
            took[i] = time.monotonic() - began
            if progress is not None:
                progress(ran + 1, done, len(order), samples[i][-1])
        ran += 1
        decision = _decide(samples, open_points, took, ran, rounds, target, budget_s, max_rounds,
                           time.monotonic() - start) if comm.rank == 0 else None
        now_closed, stopped = comm.bcast(decision, root=0)
        closed.update((i, "narrow") for i in now_closed)
        open_points = [i for i in open_points if i not in closed]
    records = [over_rounds(samples[i], stopped=closed.get(i, stopped)) for i in range(len(points))]
    return records, {"rounds": rounds, "target": None if rounds else target, "budget_s": None if rounds else budget_s,
                     "max_rounds": None if rounds else max_rounds, "ran": ran,
                     "seconds": round(time.monotonic() - start, 3), "stopped": stopped}


def _decide(samples, open_points, took, ran, rounds, target, budget_s, max_rounds, elapsed):
    """Rank 0, after a round: (points that close now, why the sweep stops or None to go on)."""
    if rounds is not None:
        return [], "rounds" if ran >= rounds else None
    now_closed = [i for i in open_points if narrow([r["avg_us"] for r in samples[i]], target)]
    still_open = [i for i in open_points if i not in now_closed]
    if not still_open:
        return now_closed, "narrow"
    if ran >= max_rounds:
        return now_closed, "max_rounds"
    if budget_s is not None and elapsed + sum(took[i] for i in still_open) > budget_s:
        return now_closed, "budget"
    return now_closed, None
