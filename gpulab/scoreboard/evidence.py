"""From a claim's numbers to its verdict: intervals from rounds, three outcomes, and what one run cannot say.

A claim's quantities are measured in interleaved rounds (``on_ranks``); each is the median over rounds with
its 95% distribution-free interval, and two things measured in the same rounds compare by their paired
ratio (``gpulab.stats``). ``decide`` asks ``gpulab.stats.judge`` whether the whole interval lies on the
claim's side of its threshold (holds), wholly on the other (does not hold), or straddles it (inconclusive).

One rule for values without such an interval: the order statistics of fewer than 6 samples cover the
median with less than 95% (a record of one run: no interval at all), so such a value decides nothing
and its verdict is inconclusive, saying on which side of the threshold its median lies. The values carry
intervals as dicts (``Interval.to_dict``), so that rows and records stay plain JSON.
"""

from __future__ import annotations

from gpulab import stats
from gpulab.scoreboard.claim import DOES_NOT_HOLD, HOLDS, INCONCLUSIVE, NotMeasured

OUTCOME = {stats.HOLDS: HOLDS, stats.DOES_NOT_HOLD: DOES_NOT_HOLD, stats.INCONCLUSIVE: INCONCLUSIVE}


def interval(samples) -> dict:
    """The median of ``samples`` and its interval."""
    return stats.median_interval(samples).to_dict()


def ratio(a, b) -> dict:
    """a / b from the same rounds (a's i-th beside b's i-th): the per-round ratios' median and interval."""
    if min(b) <= 0:
        raise NotMeasured(f"nothing to compare with: a base of zero or less in {list(b)}")
    return stats.paired_ratio(a, b).to_dict()


def unpaired(a, b) -> dict:
    """median(a) / median(b) for samples not taken in pairs (a bootstrap interval)."""
    return stats.ratio_of_medians(a, b).to_dict()


def rounds_of(row: dict, key: str) -> list[float]:
    """A measured row's samples of ``key``: every round's (``KEY_rounds``), else its one value."""
    return list(row.get(f"{key}_rounds") or [row[key]])


def text(iv: dict, unit: str = "x") -> str:
    """'1.85x [1.62, 2.01] (n=6, 97%)'; a single run's value: '1.85x (one run)'."""
    interval_ = stats.Interval.from_dict(iv)
    return interval_.text(unit).split(" [")[0] + " (one run)" if iv["n"] == 1 else interval_.text(unit)


def share_text(iv: dict, sign: int) -> str:
    """A ratio's interval as a share in percent: ``sign`` +1 gives ratio - 1 (+50% longer), -1 gives
    1 - ratio (30% hidden, 20% shorter)."""
    x = sorted(sign * (iv[k] - 1) * 100 for k in ("low", "high"))
    plus = "+" if sign > 0 else ""
    median = f"{sign * (iv['median'] - 1) * 100:{plus}.0f}%"
    return f"{median} (one run)" if iv["n"] == 1 else f"{median} [{x[0]:{plus}.0f}, {x[1]:{plus}.0f}]"


def decisive(iv: dict) -> bool:
    """Does the interval cover the median with the board's confidence (95%)?"""
    return iv["confidence"] >= stats.CONFIDENCE


def no_interval(n: int) -> str:
    if n == 1:
        return "one run, no interval: a single run decides nothing"
    return f"{n} rounds cannot give a 95% interval of the median (6 can), so they decide nothing"


def _satisfies(x: float, threshold: float, side: str) -> bool:
    return stats.judge(stats.Interval(x, x, x, 1, 0.0), threshold, side).outcome == stats.HOLDS


def undecided(ivs: list[dict], threshold: float, side: str, unit: str = "x") -> str | None:
    """None when every interval covers its median with 95%; else why they cannot decide, and how many of
    their medians lie on the claim's side (which is no evidence, only where to look)."""
    weak = [iv for iv in ivs if not decisive(iv)]
    if not weak:
        return None
    ok = sum(_satisfies(iv["median"], threshold, side) for iv in ivs)
    values = "its value" if len(ivs) == 1 and ivs[0]["n"] == 1 else \
        "its median" if len(ivs) == 1 else f"{ok} of {len(ivs)} medians"
    verb = ("satisfies" if ok else "does not satisfy") if len(ivs) == 1 else "satisfy"
    return f"{no_interval(min(iv['n'] for iv in weak))}; {values} {verb} {side} {threshold:g}{unit}"


def decide(iv: dict, threshold: float, side: str, what: str, unit: str = "x",
           model_error: float = 0.0) -> tuple[str, str]:
    """(verdict, why): is ``what`` (an interval) ``side`` ``threshold``? Without a 95% interval: inconclusive."""
    weak = undecided([iv], threshold, side, unit)
    if weak:
        return INCONCLUSIVE, f"{what} {text(iv, unit)}: {weak}"
    v = stats.judge(stats.Interval.from_dict(iv), threshold, side, what=what, model_error=model_error, unit=unit)
    return OUTCOME[v.outcome], v.why


def decide_each(named: dict, threshold: float, side: str, combine, unit: str = "x") -> tuple[str, str]:
    """``combine`` (``all_of`` or ``any_of``) of ``decide`` on every {what: interval}; when some interval has no
    95% interval, inconclusive in one sentence."""
    weak = undecided(list(named.values()), threshold, side, unit)
    if weak:
        return INCONCLUSIVE, weak
    return combine(*(decide(iv, threshold, side, what, unit) for what, iv in named.items()))


def all_of(*judged: tuple[str, str]) -> tuple[str, str]:
    """Several conditions that must all hold: holds when every one does, does not hold when one does not,
    else inconclusive; the why names the conditions that decided it."""
    outcomes = [v for v, _ in judged]
    verdict = DOES_NOT_HOLD if DOES_NOT_HOLD in outcomes else HOLDS if set(outcomes) == {HOLDS} else INCONCLUSIVE
    return verdict, "; ".join(why for v, why in judged if verdict == HOLDS or v == verdict)


def any_of(*judged: tuple[str, str]) -> tuple[str, str]:
    """Alternatives of which one holding is enough: holds when one does, does not hold when none does."""
    outcomes = [v for v, _ in judged]
    verdict = HOLDS if HOLDS in outcomes else DOES_NOT_HOLD if set(outcomes) == {DOES_NOT_HOLD} else INCONCLUSIVE
    return verdict, "; ".join(why for v, why in judged if verdict == DOES_NOT_HOLD or v == verdict)
