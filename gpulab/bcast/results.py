"""Rows of broadcast measurements summarised: a point's median over rounds, where one algorithm overtakes another."""

from __future__ import annotations

import statistics


def median_row(rounds: list[dict], run: int) -> dict:
    """One point from its rounds: the median round's time (and bandwidth from it), the rounds' times kept
    for the spread; valid only if every round was."""
    times = [r["avg_us"] for r in rounds]
    median = statistics.median(times)
    bandwidth = rounds[0]["nbytes"] / median / 1e3 if median > 0 else 0.0  # GB/s; broadcast: busbw = algbw
    return dict(rounds[0], run=run, avg_us=median, algbw_GBps=bandwidth, busbw_GBps=bandwidth, rounds_us=times,
                valid=all(r["valid"] for r in rounds))


def crossover(rows: list[dict], fast: str, slow: str) -> int | None:
    """Smallest size from which algorithm `fast` beats `slow` at every larger size measured (None: never)."""
    avg = {(r["algorithm"], r["nbytes"]): r["avg_us"] for r in rows}
    sizes = sorted(n for a, n in avg if a == fast and (slow, n) in avg)
    wins = [avg[fast, n] < avg[slow, n] for n in sizes]
    return next((n for i, n in enumerate(sizes) if all(wins[i:])), None)
