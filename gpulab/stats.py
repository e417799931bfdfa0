"""How sure a measurement is: the median with its confidence interval, ratios, repeats and three-outcome verdicts.

Timings on a shared machine are not normal: they have long right tails and
several modes (a rank that waits for a core, a scheduler's whim), so the kit
reports the median with a distribution-free interval, as Hoefler and Belli
advise ("Scientific Benchmarking of Parallel Computing Systems", SC15), and
decides a claim only when the whole interval is on one side of its threshold.

    iv = median_interval([331, 344, 352, 318, 349, 340])   # Interval(median, low, high, n, confidence)
    iv.text("ms")                                           # '342 ms [318, 352] (n=6, 97%)'
    ratio = paired_ratio(chain_runs, binomial_runs)         # the interval of the per-pair ratios' median
    runs = repeat(measure_once, target=0.05, budget_s=30)  # until the interval is narrow or the time is up
    judge(ratio, 1.0, "<")                                 # Verdict(HOLDS / DOES_NOT_HOLD / INCONCLUSIVE, why)

The median's interval comes from order statistics (Le Boudec, "Performance
Evaluation of Computer and Communication Systems", 2010, section 2.2): the
number of samples below the true median is binomial(n, 1/2), so the k-th
smallest and k-th largest samples bracket it with a probability computed
exactly, whatever the distribution: distribution-free, not assumption-free, since
it takes the samples as independent draws from one distribution (interleaved
rounds approach that; a load that drifts through a run does not). Below 6 samples no pair of samples reaches
95%: the interval is then the whole range and says its own, lower, confidence.
Nothing here imports any other gpulab module or starts MPI.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

CONFIDENCE = 0.95
HOLDS, DOES_NOT_HOLD, INCONCLUSIVE = "holds", "does not hold", "inconclusive"
OUTCOMES = (HOLDS, DOES_NOT_HOLD, INCONCLUSIVE)


@dataclass(frozen=True)
class Interval:
    """A median and the interval that holds the true median with probability ``confidence`` (or more)."""

    median: float
    low: float
    high: float
    n: int
    confidence: float

    @property
    def half_width(self) -> float:
        """The interval's larger half, relative to the median (0.05: within 5% of the median)."""
        if self.median == 0:
            return 0.0 if self.low == self.high == 0 else math.inf
        return max(self.median - self.low, self.high - self.median) / abs(self.median)

    def scaled(self, factor: float) -> Interval:
        """The same interval in other units (seconds -> milliseconds: ``scaled(1e3)``)."""
        low, high = sorted((self.low * factor, self.high * factor))
        return Interval(self.median * factor, low, high, self.n, self.confidence)

    def text(self, unit: str = "", digits: int = 3) -> str:
        """'342 ms [318, 352] (n=6, 97%)': the median, the interval, how many samples and how sure."""
        def f(x):
            return _significant(x, digits)
        space = " " if unit and not unit.startswith(("x", "%")) else ""
        return (f"{f(self.median)}{space}{unit} [{f(self.low)}, {f(self.high)}] "
                f"(n={self.n}, {self.confidence:.0%})")

    def to_dict(self) -> dict:
        return {"median": self.median, "low": self.low, "high": self.high, "n": self.n,
                "confidence": self.confidence}

    @classmethod
    def from_dict(cls, d: dict) -> Interval:
        return cls(d["median"], d["low"], d["high"], d["n"], d["confidence"])


def _significant(x: float, digits: int) -> str:
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = max(digits - 1 - int(math.floor(math.log10(abs(x)))), 0)
    return f"{x:.{decimals}f}"


def _binomial_half_cdf(n: int) -> list[float]:
    """P(B <= i) for B ~ binomial(n, 1/2), i = 0..n, exactly (integers until the one division)."""
    counts = [math.comb(n, i) for i in range(n + 1)]
    total, running, out = 2 ** n, 0, []
    for c in counts:
        running += c
        out.append(running / total)
    return out


def order_statistic_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int, float]:
    """(j, k, coverage): the interval [x(j), x(k)] (1-based ranks of the sorted samples, k = n + 1 - j)
    that covers the median with probability ``coverage`` >= ``confidence``, as narrow as that allows.
    With too few samples it is the whole range (j = 1) and ``coverage`` says how sure it really is."""
    if n < 1:
        raise ValueError("an interval needs at least one sample")
    cdf = _binomial_half_cdf(n)
    best = 1
    for j in range(1, (n + 1) // 2 + 1):
        # [x(j), x(n+1-j)] misses the median when fewer than j samples lie below it, or fewer than j above
        coverage = 1 - 2 * cdf[j - 1]
        if coverage < confidence:
            break
        best = j
    return best, n + 1 - best, max(1 - 2 * cdf[best - 1], 0.0)


def median_interval(samples: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The median of ``samples`` and its distribution-free interval (order statistics)."""
    x = np.sort(np.asarray(samples, dtype=float))
    if x.size == 0:
        raise ValueError("an interval needs at least one sample")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"samples must be finite numbers, got {list(samples)}")
    j, k, coverage = order_statistic_ranks(x.size, confidence)
    return Interval(float(np.median(x)), float(x[j - 1]), float(x[k - 1]), int(x.size), coverage)


def paired_ratio(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The ratio a/b from runs taken in pairs (a's i-th run beside b's i-th, their order turning): the
    median of the per-pair ratios and its interval. Pairing cancels what a busy moment does to both."""
    if len(a) != len(b):
        raise ValueError(f"paired runs need as many of each: {len(a)} and {len(b)}")
    b = np.asarray(b, dtype=float)
    if np.any(b <= 0):
        raise ValueError("the base of a ratio must be positive")
    return median_interval(np.asarray(a, dtype=float) / b, confidence)


def ratio_of_medians(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE,
                     resamples: int = 2000, seed: int = 0) -> Interval:
    """median(a) / median(b) for runs that were not taken in pairs, with a percentile bootstrap interval
    (the seed is fixed: the same samples always give the same interval)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size == 0 or b.size == 0:
        raise ValueError("a ratio needs samples on both sides")
    if np.any(b <= 0):
        raise ValueError("the base of a ratio must be positive")
    rng = np.random.default_rng(seed)
    ra = np.median(rng.choice(a, (resamples, a.size)), axis=1)
    rb = np.median(rng.choice(b, (resamples, b.size)), axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(ra / rb, [tail, 100 - tail])
    return Interval(float(np.median(a) / np.median(b)), float(low), float(high), int(min(a.size, b.size)),
                    confidence)


@dataclass(frozen=True)
class Repeated:
    """What ``repeat`` measured: every sample, their interval, and why it stopped."""

    samples: tuple
    interval: Interval
    seconds: float
    stopped: str  # "narrow": the interval reached the target; "budget": the time ran out; "max_runs"
    target: float

    def text(self, unit: str = "") -> str:
        why = {"narrow": f"within {self.target:.0%}", "budget": "time budget spent",
               "max_runs": "run limit reached"}[self.stopped]
        return f"{self.interval.text(unit)}; {len(self.samples)} runs in {self.seconds:.1f} s, {why}"


def repeat(measure: Callable[[], float], *, target: float = 0.05, budget_s: float = 60.0, min_runs: int = 6,
           max_runs: int = 100, confidence: float = CONFIDENCE, agree: Callable[[bool], bool] | None = None,
           clock: Callable[[], float] = time.monotonic) -> Repeated:
    """Call ``measure()`` until the median's interval is within ``target`` of it (relative half-width)
    after at least ``min_runs`` runs, or until one more run would overrun ``budget_s``, or ``max_runs``.

    Inside an MPI job every rank must stop after the same run: pass ``agree(stop) -> stop`` that makes
    one rank's decision everyone's (for example ``lambda s: comm.bcast(s, root=0)``)."""
    if min_runs < 1 or max_runs < min_runs:
        raise ValueError(f"need 1 <= min_runs <= max_runs, got {min_runs}, {max_runs}")
    if target <= 0 or budget_s <= 0:
        raise ValueError("target and budget_s must be positive")
    start, samples = clock(), []
    while True:
        samples.append(float(measure()))
        elapsed = clock() - start
        interval = median_interval(samples, confidence)
        per_run = elapsed / len(samples)
        stopped = None
        if len(samples) >= min_runs and interval.half_width <= target and interval.confidence >= confidence:
            stopped = "narrow"
        elif len(samples) >= max_runs:
            stopped = "max_runs"
        elif len(samples) >= min(min_runs, max_runs) and elapsed + per_run > budget_s:
            stopped = "budget"
        stop = stopped is not None
        if agree is not None:
            stop = agree(stop)
            if stop and stopped is None:
                stopped = "budget"  # another rank decided: its clock ran out
        if stop:
            return Repeated(tuple(samples), interval, elapsed, stopped, target)


@dataclass(frozen=True)
class Verdict:
    """One of ``OUTCOMES`` and the sentence that says why (for "inconclusive": what it would take)."""

    outcome: str
    why: str
    interval: Interval | None = None
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, not {self.outcome!r}")


def judge(interval: Interval, threshold: float, side: str, *, what: str = "the value",
          model_error: float = 0.0, unit: str = "") -> Verdict:
    """Does ``interval`` lie wholly on the claim's ``side`` ("<", "<=", ">" or ">=") of ``threshold``?

    Holds when all of it does, does not hold when all of it lies on the other side, and is inconclusive
    when the interval straddles the threshold. ``model_error`` (relative, 0.2 = 20%) widens the interval
    first, for claims that compare a measurement with a model's prediction."""
    if side not in ("<", "<=", ">", ">="):
        raise ValueError(f"side must be one of <, <=, >, >=, not {side!r}")
    low, high = interval.low, interval.high
    if model_error:
        low, high = low * (1 - model_error), high * (1 + model_error)
    below = side.startswith("<")
    inclusive = side.endswith("=")

    def on_claim_side(x):
        return (x < threshold or inclusive and x == threshold) if below else \
            (x > threshold or inclusive and x == threshold)

    shown = interval.text(unit)
    widened = f", widened by the model's {model_error:.0%} to [{_significant(low, 3)}, {_significant(high, 3)}]" \
        if model_error else ""
    need = f"{what} {side} {_significant(threshold, 3)}{unit}"
    if on_claim_side(low) and on_claim_side(high):
        return Verdict(HOLDS, f"{what} {shown}{widened}: all of it satisfies {need}", interval)
    if not on_claim_side(low) and not on_claim_side(high):  # a half-line: both ends outside, all outside
        return Verdict(DOES_NOT_HOLD, f"{what} {shown}{widened}: none of it satisfies {need}", interval)
    return Verdict(INCONCLUSIVE, f"{what} {shown}{widened} straddles {_significant(threshold, 3)}{unit}: "
                   f"the runs cannot tell whether {need}", interval)
