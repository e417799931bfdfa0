"""Rows of broadcast measurements summarised: a point's median over rounds, where one algorithm overtakes another."""

from __future__ import annotations

from gpulab.stats import median_interval

# the times a row of ``measure_bcast`` has per round; a point keeps the median over rounds of each
TIMES = ("avg_us", "min_us", "max_us", "p50_us", "p90_us", "p99_us")


def over_rounds(rounds: list[dict], **more) -> dict:
    """One point from its rounds (``measure_bcast`` rows of the same algorithm, size and options).

    Each time is the median over rounds of that round's value: ``avg_us`` the median of the rounds'
    averages over ranks, ``max_us`` of their slowest ranks. Every round's average and slowest rank stay
    in ``rounds_us`` and ``rounds_max_us``, their medians' 95% intervals (order statistics, ``gpulab.stats``)
    in ``avg_interval_us`` and ``max_interval_us``; the bandwidth is the median's. ``iters`` is the fewest
    timed iterations of a round (the time budget may cut them), ``errors`` the most; valid only if every
    round was. ``more`` is added (the explorer's run number, a sweep's stop reason).
    """
    averages = [r["avg_us"] for r in rounds]
    slowest = [r.get("max_us", r["avg_us"]) for r in rounds]
    avg, worst = median_interval(averages), median_interval(slowest)
    row = dict(rounds[0])
    row.update({key: median_interval([r[key] for r in rounds]).median for key in TIMES if key in rounds[0]})
    bandwidth = row["nbytes"] / avg.median / 1e3 if avg.median > 0 else 0.0  # GB/s; broadcast: busbw = algbw
    row.update(avg_us=avg.median, algbw_GBps=bandwidth, busbw_GBps=bandwidth, rounds=len(rounds),
               rounds_us=averages, rounds_max_us=slowest, avg_interval_us=avg.to_dict(),
               max_interval_us=worst.to_dict(), valid=all(r["valid"] for r in rounds), **more)
    if "iters" in row:
        row["iters"] = min(r["iters"] for r in rounds)
    if "errors" in row:
        row["errors"] = max(r["errors"] for r in rounds)
    return row


def crossover(rows: list[dict], fast: str, slow: str) -> int | None:
    """Smallest size from which algorithm `fast` beats `slow` at every larger size measured (None: never)."""
    avg = {(r["algorithm"], r["nbytes"]): r["avg_us"] for r in rows}
    sizes = sorted(n for a, n in avg if a == fast and (slow, n) in avg)
    wins = [avg[fast, n] < avg[slow, n] for n in sizes]
    return next((n for i, n in enumerate(sizes) if all(wins[i:])), None)
