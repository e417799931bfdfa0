"""Each verdict follows from the intervals: every claim's judge fed made-up rounds of known spread, on each side of
its threshold and across it, gives holds, does not hold and inconclusive; a single run decides nothing."""

import numpy as np
import pytest

from gpulab.scoreboard.bcast_claims import (
    CHUNK_TOLERANCE,
    CROSSOVER_FACTOR,
    HIER_MARGIN,
    brackets,
    chunk_judge,
    chunk_value,
    crossover_judge,
    crossover_value,
    faster_of,
    placement_judge,
    placement_value,
)
from gpulab.scoreboard.claim import DECISIVE, DOES_NOT_HOLD, HOLDS, INCONCLUSIVE, NEEDS_GPU, VERDICTS
from gpulab.scoreboard.engine_claims import GROUP_MARGIN, HIDE_MIN, SLOWER_BY, STRATEGY_MARGIN, groups_judge
from gpulab.scoreboard.evidence import all_of, any_of, decide, interval, ratio
from gpulab.scoreboard.grid_claims import (
    overlap_judge,
    overlap_value,
    pick_judge,
    pick_value,
    strategies_judge,
    strategies_value,
)
from gpulab.scoreboard.training_claim import TRAIN_MARGIN, training_judge, training_value
from gpulab.scoreboard.tuned_claims import TUNED_MARGIN, nccl_judge, nccl_value, tuned_judge, tuned_value

K, M = 1 << 10, 1 << 20
SIZES = [64 * K, 256 * K, M, 4 * M]


def rounds(center: float, spread: float = 0.02, n: int = 6, seed: int = 0) -> list[float]:
    """n samples spread evenly over center x (1 -/+ spread), in a shuffled order: their median is center and
    with n >= 6 their 95% interval is the whole range."""
    x = center * (1 + spread * np.linspace(-1, 1, n))
    return list(np.random.default_rng(seed).permutation(x))


def paired(r: float, spread: float = 0.02, n: int = 6, base: float = 100.0) -> tuple[list, list]:
    """Rounds of two things whose per-round ratio spreads evenly over r x (1 -/+ spread)."""
    return [base * x for x in rounds(r, spread, n)], [base] * n


# the rule itself -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("center, spread, outcome", [(1.5, 0.05, HOLDS), (0.9, 0.05, DOES_NOT_HOLD),
                                                     (1.1, 0.2, INCONCLUSIVE)])
def test_an_interval_decides_only_when_wholly_on_one_side(center, spread, outcome):
    verdict, why = decide(ratio(*paired(center, spread)), 1.1, ">=", what="the speed-up")
    assert verdict == outcome and "the speed-up" in why


@pytest.mark.parametrize("n, says", [(1, "one run"), (5, "5 rounds")])
def test_without_a_95_percent_interval_nothing_is_decided(n, says):
    verdict, why = decide(interval(rounds(3.0, 0.01, n)), 1.1, ">=", what="the speed-up")  # far past the threshold
    assert verdict == INCONCLUSIVE and says in why and "satisfies >= 1.1x" in why


def test_conditions_combine():
    holds, fails, unsure = (HOLDS, "h"), (DOES_NOT_HOLD, "d"), (INCONCLUSIVE, "i")
    assert all_of(holds, holds) == (HOLDS, "h; h")
    assert all_of(holds, unsure) == (INCONCLUSIVE, "i") and all_of(unsure, fails) == (DOES_NOT_HOLD, "d")
    assert any_of(fails, holds) == (HOLDS, "h") and any_of(fails, unsure)[0] == INCONCLUSIVE
    assert any_of(fails, fails)[0] == DOES_NOT_HOLD


def test_every_verdict_is_one_of_four():
    assert set(VERDICTS) == {HOLDS, DOES_NOT_HOLD, INCONCLUSIVE, NEEDS_GPU} and set(DECISIVE) == {HOLDS, DOES_NOT_HOLD}


# (a) the crossover bracket ---------------------------------------------------------------------------------------
def crossover(chain_over_binomial: list[float], spread: float = 0.02, n: int = 6) -> dict:
    samples = {}
    for size, r in zip(SIZES, chain_over_binomial):
        samples[("chain", size)], samples[("binomial", size)] = paired(r, spread, n)
    return crossover_value(samples, SIZES)


def model(low, high, c=None):
    return {"crossover_bytes": c, "chain_from_start": low == 0 and high == 0, "range": [low, high], "error": 0.05,
            "error_source": "a made-up record"}


def test_each_size_says_which_is_faster_or_that_it_cannot_tell():
    v = crossover([2.0, 1.05, 0.98, 0.5], spread=0.1)
    assert v["faster"] == ["binomial", "undecided", "undecided", "chain"]
    assert faster_of(interval([0.5])) == "undecided"  # one run: no interval


@pytest.mark.parametrize("faster, expected", [
    (["binomial", "binomial", "chain", "chain"], [(256 * K, M)]),
    (["chain", "binomial", "chain", "chain"], [(256 * K, M)]),  # an early win that does not last
    (["chain"] * 4, [(None, 64 * K)]),
    (["binomial", "undecided", "chain", "chain"], [(64 * K, 256 * K), (256 * K, M)]),
    (["undecided", "chain", "chain", "undecided"], [(None, 64 * K), (64 * K, 256 * K), (4 * M, None)]),
    (["binomial"] * 4, [(4 * M, None)])])
def test_the_brackets_are_every_crossover_the_sizes_allow(faster, expected):
    assert [(b["below"], b["above"]) for b in brackets(SIZES, faster)] == expected


def test_crossover_holds_when_every_allowed_crossover_is_within_the_factor_of_the_model():
    v = crossover([2.0, 1.5, 0.5, 0.5])  # binomial to 256K, the chain from 1M: bracket 256K..1M
    assert crossover_judge(v, model(512 * K, 600 * K))[0] == HOLDS
    assert crossover_judge(v, model(256 * K / CROSSOVER_FACTOR, M * CROSSOVER_FACTOR))[0] == HOLDS
    assert crossover_judge(v, model(16 * K, 20 * K))[0] == DOES_NOT_HOLD  # far below 256K / 2
    assert crossover_judge(v, model(4 * M, 8 * M))[0] == DOES_NOT_HOLD  # far above 1M x 2
    assert crossover_judge(v, model(64 * K, 512 * K))[0] == INCONCLUSIVE  # the model's own error spans the edge


def test_crossover_is_inconclusive_when_the_sizes_leave_brackets_on_both_sides():
    v = crossover([2.0, 1.02, 0.5, 0.5], spread=0.1)  # 256K undecided: 64K..256K or 256K..1M
    assert [b["below"] for b in v["brackets"]] == [64 * K, 256 * K]
    verdict, why = crossover_judge(v, model(600 * K, 700 * K))  # within 2x of 256K..1M, not of 64K..256K
    assert verdict == INCONCLUSIVE and "may or may not lie" in why and "a made-up record" in why
    assert crossover_judge(v, model(160 * K, 200 * K))[0] == HOLDS  # within 2x of both brackets


def test_crossover_when_the_chain_never_wins_or_always_does():
    never = crossover([2.0, 2.0, 1.5, 1.5])
    assert crossover_judge(never, model(512 * K, 512 * K))[0] == DOES_NOT_HOLD
    always = crossover([0.5] * 4)
    # the chain first at every measured size: the crossover lies below them, so the run cannot confirm where
    verdict, why = crossover_judge(always, model(0, 0))
    assert verdict == INCONCLUSIVE and "may or may not lie" in why
    assert crossover_judge(always, model(None, None))[0] == DOES_NOT_HOLD  # the model predicts no crossover


def test_crossover_from_a_single_run_or_without_a_model_is_inconclusive():
    v = crossover([2.0, 2.0, 0.5, 0.5], n=1)
    verdict, why = crossover_judge(v, model(512 * K, 600 * K))
    assert verdict == INCONCLUSIVE and "one run" in why
    assert crossover_judge(crossover([2.0, 2.0, 0.5, 0.5]), None)[0] == INCONCLUSIVE


# (b) - (d) ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("slower, spread, verdict", [(1.0, 0.02, HOLDS), (1 + CHUNK_TOLERANCE - 0.03, 0.02, HOLDS),
                                                     (1 + CHUNK_TOLERANCE + 0.05, 0.02, DOES_NOT_HOLD),
                                                     (1 + CHUNK_TOLERANCE, 0.1, INCONCLUSIVE)])
def test_chunk_verdict(slower, spread, verdict):
    base = rounds(100.0, 0.0)
    at_model = [b * s for b, s in zip(base, rounds(slower, spread))]
    v = chunk_value({64 * K: base, 256 * K: at_model, M: [3 * b for b in base]}, model_chunk=200 * K)  # nearest: 256K
    assert v["measured_at"] == 256 * K and v["best_chunk"] == 64 * K  # the first of equals when not slower
    assert chunk_judge(v, None)[0] == verdict


@pytest.mark.parametrize("speedup, spread, verdict", [(1.5, 0.05, HOLDS), (1.0, 0.05, DOES_NOT_HOLD),
                                                      (1 + HIER_MARGIN, 0.1, INCONCLUSIVE)])
def test_hierarchical_verdict(speedup, spread, verdict):
    flat, hier = paired(speedup, spread)
    v = placement_value({("binomial", M): flat, ("hierarchical", M): hier}, [M])
    assert placement_judge(v, None)[0] == verdict


@pytest.mark.parametrize("speedup, spread, verdict", [(1.5, 0.05, HOLDS), (1.0, 0.05, DOES_NOT_HOLD),
                                                      (1 + TUNED_MARGIN, 0.1, INCONCLUSIVE)])
def test_tuned_verdict_is_the_largest_sizes(speedup, spread, verdict):
    mpi_small, auto_small = paired(3.0)
    mpi, auto = paired(speedup, spread)
    rows = [{"algorithm": a, "nbytes": n, "max_us": float(np.median(s)), "max_us_rounds": s,
             **({"chose": {"algorithm": "chain"}} if a == "auto" else {})}
            for n, pair in ((M, (mpi_small, auto_small)), (8 * M, (mpi, auto))) for a, s in zip(("mpi", "auto"), pair)]
    assert tuned_judge(tuned_value(rows), None)[0] == verdict  # 3x at 1M does not count


@pytest.mark.parametrize("small, large, verdict", [(3.0, 0.5, HOLDS), (0.8, 0.5, DOES_NOT_HOLD),
                                                   (1 + TUNED_MARGIN, 0.5, INCONCLUSIVE)])
def test_nccl_verdict_needs_one_size(small, large, verdict):
    records = []
    for n, r in ((M, small), (8 * M, large)):
        nccl, chain = paired(r, 0.1 if verdict == INCONCLUSIVE else 0.02)
        records += [{"algorithm": "nccl", "nbytes": n, "max_us": 1.0, "max_us_rounds": nccl},
                    {"algorithm": "chain", "nbytes": n, "max_us": 1.0, "max_us_rounds": chain}]
    assert nccl_judge(nccl_value(records), None)[0] == verdict


# (e) - (i) ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("r, spread, groups, verdict", [(0.7, 0.05, (2, 4), HOLDS), (1.1, 0.05, (2, 4), DOES_NOT_HOLD),
                                                        (1 - GROUP_MARGIN, 0.1, (2, 4), INCONCLUSIVE),
                                                        (0.5, 0.05, (4, 4), DOES_NOT_HOLD)])
def test_small_groups_verdict(r, spread, groups, verdict):
    v = {"ratio": ratio(*paired(r, spread)), "largest_group_3d": groups[0], "largest_group_1d": groups[1]}
    assert groups_judge(v, None)[0] == verdict


@pytest.mark.parametrize("sent, verdict", [((3.9, 7.9), HOLDS), ((7.5, 7.9), DOES_NOT_HOLD)])
@pytest.mark.parametrize("time_ratio", [0.6, 1.0, 1.4])
def test_small_groups_are_judged_on_counted_bytes_not_on_time(sent, verdict, time_ratio):
    """The bytes a rank sends are counted (the same every run); the time is shown beside them, whatever it was."""
    v = {"ratio": ratio(*paired(time_ratio, 0.2)), "largest_group_3d": 2, "largest_group_1d": 4,
         "sent_mb_3d": sent[0], "sent_mb_1d": sent[1]}
    outcome, why = groups_judge(v, None)
    assert outcome == verdict and f"{sent[0] / sent[1]:.2f}x the bytes" in why


def engine_row(shape, iters: list[float], exposed=None, overlap_label="none", predicted=None):
    exposed = exposed or [0.5 * t for t in iters]
    return {"shape": list(shape), "overlap_label": overlap_label,
            "overlap": {"oar": overlap_label != "none", "progress": "thread"},
            "rounds": [{"iter_s": t, "exposed_comm_s": e, "hidden_comm_s": 0.0, "wall_s": t, "compute_s": t - e}
                       for t, e in zip(iters, exposed)],
            "prediction": {"iter_s": predicted if predicted is not None else float(np.median(iters))}}


@pytest.mark.parametrize("exposed, slower, verdict", [
    (0.5, 0.95, HOLDS), (0.9, 0.95, DOES_NOT_HOLD), (0.5, 1.2, DOES_NOT_HOLD), (1 - HIDE_MIN, 0.95, INCONCLUSIVE),
    (0.5, 1 + SLOWER_BY, INCONCLUSIVE)])
def test_overlap_verdict(exposed, slower, verdict):
    iters_off = rounds(0.1, 0.0)
    spread = lambda x, edge: 0.1 if x == edge else 0.02  # noqa: E731 - across the threshold: a wide spread
    iters_on = [t * s for t, s in zip(iters_off, rounds(slower, spread(slower, 1 + SLOWER_BY)))]
    exposed_on = [0.05 * s for s in rounds(exposed, spread(exposed, 1 - HIDE_MIN))]
    rows = [engine_row((1, 1, 2, 2), iters_off, [0.05] * 6),
            engine_row((1, 1, 2, 2), iters_on, exposed_on, overlap_label="all")]
    verdict_, why = overlap_judge(overlap_value(rows), None)
    assert verdict_ == verdict
    assert ("share the machine's cores" in why) == (exposed < 1 - HIDE_MIN and slower > 1.1)


SHAPES = [(1, 1, 1, 4), (1, 1, 2, 2), (2, 1, 1, 2), (4, 1, 1, 1), (1, 1, 4, 1)]  # ddp, hsdp, megatron x2, zero3


def grid(times: dict, spread: float = 0.02, pick=(1, 1, 1, 4)) -> list[dict]:
    """Rows of a sweep whose model picks ``pick``, each grid's time spread around ``times[shape]``."""
    return [engine_row(s, rounds(times[s], spread, seed=i), predicted=0.0 if s == pick else 1.0 + i)
            for i, s in enumerate(SHAPES)]


@pytest.mark.parametrize("pick_time, spread, verdict", [(1.0, 0.02, HOLDS), (1.2, 0.02, DOES_NOT_HOLD),
                                                        (1.1, 0.1, INCONCLUSIVE)])
def test_grid_pick_verdict(pick_time, spread, verdict):
    times = {(1, 1, 1, 4): pick_time, (1, 1, 2, 2): 1.0, (2, 1, 1, 2): 1.5, (4, 1, 1, 1): 2.0, (1, 1, 4, 1): 3.0}
    v = pick_value(grid(times, spread))
    assert v["model_pick"] == [1, 1, 1, 4] and v["shapes"] == 5
    assert pick_judge(v, None)[0] == verdict


@pytest.mark.parametrize("megatron, zero3, spread, verdict", [
    (1.3, 1.2, 0.02, HOLDS), (1.0, 1.3, 0.02, DOES_NOT_HOLD), (1.3, 0.9, 0.02, DOES_NOT_HOLD),
    (1 + STRATEGY_MARGIN, 1.3, 0.08, INCONCLUSIVE)])
def test_strategies_verdict(megatron, zero3, spread, verdict):
    times = {(1, 1, 1, 4): 1.0, (1, 1, 2, 2): 1.1, (2, 1, 1, 2): megatron, (4, 1, 1, 1): megatron * 1.5,
             (1, 1, 4, 1): zero3}
    v = strategies_value(grid(times, spread))
    assert v["axonn_pick"] == [1, 1, 1, 4] and v["megatron_shape"] == [2, 1, 1, 2]
    assert strategies_judge(v, None)[0] == verdict


@pytest.mark.parametrize("auto, spread, same, verdict", [(0.8, 0.05, True, HOLDS), (1.0, 0.02, True, DOES_NOT_HOLD),
                                                         (1 - TRAIN_MARGIN, 0.05, True, INCONCLUSIVE),
                                                         (0.5, 0.02, False, DOES_NOT_HOLD)])
def test_training_verdict(auto, spread, same, verdict):
    auto_s, mpi_s = paired(auto, spread, base=1.0)
    assert training_judge(training_value(mpi_s, auto_s, same), None)[0] == verdict
