"""Rows of broadcast measurements summarised: a point's median over rounds, where one algorithm overtakes another."""

from __future__ import annotations


def median_row(rounds: list[dict], run: int) -> dict:
    """One point from its rounds: the median round's row whole (its mean, its fastest and slowest rank,
    the bandwidth from its time), so that every column comes from one round; the rounds' times kept as
    ``rounds_us`` for the spread; valid only if every round was.

    With an even number of rounds the lower of the two middle rounds stands for the point (a mean of two
    would be a time no round measured).
    """
    times = [r["avg_us"] for r in rounds]
    middle = sorted(rounds, key=lambda r: r["avg_us"])[(len(rounds) - 1) // 2]
    median = middle["avg_us"]
    bandwidth = middle["nbytes"] / median / 1e3 if median > 0 else 0.0  # GB/s; broadcast: busbw = algbw
    return dict(middle, run=run, algbw_GBps=bandwidth, busbw_GBps=bandwidth, rounds_us=times,
                valid=all(r["valid"] for r in rounds))


def crossover(rows: list[dict], fast: str, slow: str) -> int | None:
    """Smallest size from which algorithm `fast` beats `slow` at every larger size measured (None: never)."""
    avg = {(r["algorithm"], r["nbytes"]): r["avg_us"] for r in rows}
    sizes = sorted(n for a, n in avg if a == fast and (slow, n) in avg)
    wins = [avg[fast, n] < avg[slow, n] for n in sizes]
    return next((n for i, n in enumerate(sizes) if all(wins[i:])), None)
