"""gpulab.stats against exact probabilities and simulation: the intervals cover what they say they cover."""

import math

import numpy as np
import pytest

from gpulab.stats import (
    DOES_NOT_HOLD,
    HOLDS,
    INCONCLUSIVE,
    Interval,
    judge,
    median_interval,
    order_statistic_ranks,
    paired_ratio,
    ratio_of_medians,
    repeat,
)


def exact_coverage(n: int, j: int) -> float:
    """P(j <= B <= n - j) for B ~ binomial(n, 1/2): the chance that [x(j), x(n+1-j)] holds the median."""
    return sum(math.comb(n, i) for i in range(j, n - j + 1)) / 2 ** n


@pytest.mark.parametrize("n", [6, 7, 10, 20, 31, 100])
def test_the_ranks_are_the_narrowest_that_reach_95_percent(n):
    j, k, coverage = order_statistic_ranks(n)
    assert k == n + 1 - j
    assert coverage == pytest.approx(exact_coverage(n, j), abs=1e-12)
    assert coverage >= 0.95
    assert exact_coverage(n, j + 1) < 0.95  # one rank narrower would not reach it


def test_the_ranks_agree_with_the_normal_approximation_for_large_n():
    """Le Boudec's large-sample ranks, floor((n - 1.96 sqrt n) / 2) and ceil(1 + (n + 1.96 sqrt n) / 2):
    the exact ranks are as narrow or one rank narrower."""
    n = 400
    j, k, _ = order_statistic_ranks(n)
    approx_j = math.floor((n - 1.96 * math.sqrt(n)) / 2)
    approx_k = math.ceil(1 + (n + 1.96 * math.sqrt(n)) / 2)
    assert 0 <= j - approx_j <= 1 and 0 <= approx_k - k <= 1


def test_too_few_samples_give_the_whole_range_and_say_how_sure_it_is():
    iv = median_interval([3.0, 1.0, 2.0, 5.0, 4.0])
    assert (iv.low, iv.median, iv.high, iv.n) == (1.0, 3.0, 5.0, 5)
    assert iv.confidence == pytest.approx(1 - 2 / 32)  # below 95%: the text shows it
    assert "94%" in iv.text()


def test_a_single_sample_is_its_own_interval_with_no_confidence():
    iv = median_interval([7.0])
    assert (iv.low, iv.median, iv.high) == (7.0, 7.0, 7.0) and iv.confidence == 0.0


@pytest.mark.parametrize("n", [6, 11, 25])
def test_the_median_interval_covers_the_true_median_of_a_skewed_distribution(n):
    """A log-normal (long right tail, like timings): over 4000 experiments the interval must hold the true
    median at least as often as promised, less a simulation allowance of 3 standard errors."""
    rng = np.random.default_rng(1)
    true_median = 1.0  # lognormal(0, s) has median e^0
    trials = 4000
    hits = 0
    for _ in range(trials):
        iv = median_interval(rng.lognormal(0.0, 0.8, n))
        hits += iv.low <= true_median <= iv.high
    promised = order_statistic_ranks(n)[2]
    allowance = 3 * math.sqrt(promised * (1 - promised) / trials)
    assert hits / trials >= promised - allowance


def test_bad_samples_are_refused():
    with pytest.raises(ValueError, match="at least one"):
        median_interval([])
    with pytest.raises(ValueError, match="finite"):
        median_interval([1.0, float("nan")])


def test_paired_ratio_is_the_median_of_the_pairs_ratios():
    a, b = [2.0, 4.0, 6.0, 8.0, 10.0, 12.0], [1.0, 2.0, 3.0, 4.0, 5.0, 12.0]
    iv = paired_ratio(a, b)
    assert iv.median == pytest.approx(2.0) and (iv.low, iv.high) == (1.0, 2.0)
    with pytest.raises(ValueError, match="as many"):
        paired_ratio([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        paired_ratio([1.0], [0.0])


def test_pairing_cancels_what_a_busy_moment_does_to_both():
    """Each pair shares a slowdown of up to 3x; the ratio is exactly 0.8 in every pair."""
    busy = np.array([1.0, 3.0, 1.2, 2.5, 1.0, 2.0, 1.1])
    iv = paired_ratio(0.8 * busy, busy)
    assert (iv.low, iv.median, iv.high) == pytest.approx((0.8, 0.8, 0.8))
    unpaired = ratio_of_medians(0.8 * busy, busy)
    assert unpaired.high - unpaired.low > 0.5  # without the pairing the same runs tell far less


def test_ratio_of_medians_covers_the_true_ratio():
    rng = np.random.default_rng(2)
    trials, hits = 300, 0
    for _ in range(trials):
        a, b = 0.7 * rng.lognormal(0, 0.3, 15), rng.lognormal(0, 0.3, 15)
        iv = ratio_of_medians(a, b, resamples=500, seed=int(rng.integers(1 << 30)))
        hits += iv.low <= 0.7 <= iv.high
    assert hits / trials >= 0.90  # a percentile bootstrap is a little optimistic at n = 15


def test_ratio_of_medians_is_reproducible():
    a, b = [1.0, 1.2, 0.9, 1.1, 1.3, 1.0], [2.0, 2.1, 1.9, 2.4, 2.0, 2.2]
    assert ratio_of_medians(a, b) == ratio_of_medians(a, b)


class FakeClock:
    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self):
        return self.now

    def tick(self):
        self.now += self.step


def test_repeat_stops_when_the_interval_is_narrow():
    clock = FakeClock(1.0)

    def measure():
        clock.tick()
        return 10.0 + 0.01 * (clock.now % 3)

    runs = repeat(measure, target=0.05, budget_s=1000, min_runs=6, clock=clock)
    assert runs.stopped == "narrow" and len(runs.samples) == 6
    assert runs.interval.half_width <= 0.05 and "within 5%" in runs.text("ms")


def test_repeat_stops_before_the_budget_is_overrun():
    clock = FakeClock(2.0)
    rng = np.random.default_rng(3)

    def measure():
        clock.tick()
        return float(rng.lognormal(0, 1.0))  # far too noisy for 1%

    runs = repeat(measure, target=0.01, budget_s=30, min_runs=6, clock=clock)
    assert runs.stopped == "budget"
    assert runs.seconds <= 30 and len(runs.samples) == 15  # the 16th would end at 32 s


def test_repeat_runs_at_least_min_runs_even_when_the_budget_is_small():
    clock = FakeClock(10.0)
    runs = repeat(lambda: (clock.tick(), 1.0)[1], target=0.05, budget_s=5, min_runs=3, clock=clock)
    assert len(runs.samples) == 3 and runs.stopped == "budget"


def test_repeat_stops_at_max_runs():
    values = iter(range(1, 1000))
    runs = repeat(lambda: float(next(values)), target=0.001, budget_s=1e9, min_runs=6, max_runs=8)
    assert runs.stopped == "max_runs" and len(runs.samples) == 8


def test_repeat_follows_the_agreed_decision():
    """In an MPI job one rank decides for all: here the others are told to stop at the 7th run."""
    calls = []

    def agree(stop):
        calls.append(stop)
        return len(calls) >= 7

    runs = repeat(lambda: 1.0 + len(calls), target=1e-9, budget_s=1e9, min_runs=2, agree=agree)
    assert len(runs.samples) == 7 and runs.stopped == "budget"


def test_repeat_refuses_nonsense():
    with pytest.raises(ValueError):
        repeat(lambda: 1.0, min_runs=0)
    with pytest.raises(ValueError):
        repeat(lambda: 1.0, target=0)


def iv(low, median, high, n=9):
    return Interval(median, low, high, n, 0.96)


@pytest.mark.parametrize("interval, side, threshold, outcome", [
    (iv(0.5, 0.6, 0.7), "<", 1.0, HOLDS),
    (iv(1.1, 1.2, 1.3), "<", 1.0, DOES_NOT_HOLD),
    (iv(0.9, 1.0, 1.1), "<", 1.0, INCONCLUSIVE),
    (iv(1.0, 1.1, 1.2), "<", 1.0, DOES_NOT_HOLD),  # touching the threshold is not below it
    (iv(1.0, 1.1, 1.2), ">=", 1.0, HOLDS),
    (iv(1.2, 1.3, 1.4), ">", 1.0, HOLDS),
    (iv(0.8, 0.85, 0.9), ">", 1.0, DOES_NOT_HOLD),
    (iv(0.85, 0.89, 0.95), ">=", 0.9, INCONCLUSIVE),  # 0.89 against 0.90 with this spread: not decided
])
def test_verdicts_have_three_outcomes(interval, side, threshold, outcome):
    v = judge(interval, threshold, side)
    assert v.outcome == outcome, v.why


def test_the_model_error_widens_the_interval():
    measured = iv(1.08, 1.12, 1.15)
    assert judge(measured, 1.0, ">").outcome == HOLDS
    widened = judge(measured, 1.0, ">", model_error=0.10, what="the speed-up")
    assert widened.outcome == INCONCLUSIVE and "widened by the model's 10%" in widened.why


def test_judge_refuses_an_unknown_side():
    with pytest.raises(ValueError, match="side"):
        judge(iv(1, 2, 3), 1.0, "=")


def test_an_interval_round_trips_through_a_record_and_changes_units():
    x = Interval(0.331, 0.318, 0.352, 9, 0.96)
    assert Interval.from_dict(x.to_dict()) == x
    ms = x.scaled(1e3)
    assert (ms.median, ms.low, ms.high) == pytest.approx((331, 318, 352))
    assert ms.text("ms") == "331 ms [318, 352] (n=9, 96%)"
