"""Each verdict follows from the numbers: every claim's judge fed made-up values on both sides of its threshold."""

import pytest

from gpulab.scoreboard.bcast_claims import (
    CHUNK_TOLERANCE,
    CROSSOVER_FACTOR,
    HIER_MARGIN,
    chunk_judge,
    chunk_value,
    crossover_interval,
    crossover_judge,
    placement_judge,
    placement_value,
)
from gpulab.scoreboard.claim import DOES_NOT_HOLD, HOLDS, NEEDS_GPU, VERDICTS
from gpulab.scoreboard.engine_claims import (
    GROUP_MARGIN,
    HIDE_MIN,
    SLOWER_BY,
    STRATEGY_MARGIN,
    groups_judge,
)
from gpulab.scoreboard.grid_claims import overlap_judge, pick_judge, strategies_judge
from gpulab.scoreboard.training_claim import (
    TRAIN_MARGIN,
    training_judge,
    training_value,
)
from gpulab.scoreboard.tuned_claims import (
    TUNED_MARGIN,
    nccl_judge,
    nccl_value,
    tuned_judge,
)

K, M = 1 << 10, 1 << 20
SIZES = [64 * K, 256 * K, M, 4 * M]


def times(chain, binomial):
    return {**{("chain", n): t for n, t in zip(SIZES, chain)}, **{("binomial", n): t for n, t in zip(SIZES, binomial)}}


def test_the_crossover_is_where_the_chain_stays_ahead():
    v = crossover_interval(times([2, 2, 1, 1], [1, 1, 2, 2]), SIZES)
    assert (v["below"], v["above"]) == (256 * K, M)
    v = crossover_interval(times([1, 2, 1, 1], [2, 1, 2, 2]), SIZES)  # an early win that does not last
    assert (v["below"], v["above"]) == (256 * K, M)
    assert crossover_interval(times([1] * 4, [2] * 4), SIZES)["below"] is None
    assert crossover_interval(times([1, 1, 1, 2], [2] * 4), SIZES)["above"] is None


@pytest.mark.parametrize("model_bytes, verdict", [
    (512 * K, HOLDS), (256 * K / CROSSOVER_FACTOR, HOLDS), (M * CROSSOVER_FACTOR, HOLDS),
    (256 * K / CROSSOVER_FACTOR - 1, DOES_NOT_HOLD), (M * CROSSOVER_FACTOR + 1, DOES_NOT_HOLD)])
def test_crossover_verdict_against_the_models(model_bytes, verdict):
    v = crossover_interval(times([2, 2, 1, 1], [1, 1, 2, 2]), SIZES)
    assert crossover_judge(v, {"crossover_bytes": int(model_bytes), "chain_from_start": False})[0] == verdict


def test_crossover_verdict_when_the_chain_never_wins_or_always_does():
    never = crossover_interval(times([2] * 4, [1] * 4), SIZES)
    assert crossover_judge(never, {"crossover_bytes": 512 * K, "chain_from_start": False})[0] == DOES_NOT_HOLD
    always = crossover_interval(times([1] * 4, [2] * 4), SIZES)
    assert crossover_judge(always, {"crossover_bytes": None, "chain_from_start": True})[0] == HOLDS
    assert crossover_judge(always, {"crossover_bytes": None, "chain_from_start": False})[0] == DOES_NOT_HOLD


@pytest.mark.parametrize("slower, verdict", [(1.0, HOLDS), (1 + CHUNK_TOLERANCE - 1e-9, HOLDS),
                                             (1 + CHUNK_TOLERANCE + 1e-3, DOES_NOT_HOLD)])
def test_chunk_verdict(slower, verdict):
    v = chunk_value({64 * K: 100.0, 256 * K: 100.0 * slower, M: 300.0}, model_chunk=200 * K)  # nearest: 256K
    assert v["measured_at"] == 256 * K and v["best_chunk"] == 64 * K
    assert chunk_judge(v, None)[0] == verdict


@pytest.mark.parametrize("flat, verdict", [(1 + HIER_MARGIN, HOLDS), (1 + HIER_MARGIN - 1e-3, DOES_NOT_HOLD),
                                           (0.5, DOES_NOT_HOLD)])
def test_hierarchical_verdict(flat, verdict):
    v = placement_value({("binomial", M): flat * 100, ("hierarchical", M): 100.0}, [M])
    assert placement_judge(v, None)[0] == verdict


@pytest.mark.parametrize("speedup, verdict", [(1.5, HOLDS), (1 + TUNED_MARGIN, HOLDS), (1.05, DOES_NOT_HOLD)])
def test_tuned_and_nccl_verdicts(speedup, verdict):
    v = {"sizes": [M, 8 * M], "speedups": [3.0, speedup], "largest_speedup": speedup, "chose": "chain"}
    assert tuned_judge(v, None)[0] == verdict  # judged at the largest size: 3x at 1M does not count
    records = [{"algorithm": a, "nbytes": n, "max_us": t} for n in (M, 8 * M)
               for a, t in (("chain", 100.0), ("nccl", 100.0 * (speedup if n == M else 0.5)))]
    assert nccl_judge(nccl_value(records), None)[0] == verdict


@pytest.mark.parametrize("ratio, groups, verdict", [(1 - GROUP_MARGIN, (2, 4), HOLDS), (0.95, (2, 4), DOES_NOT_HOLD),
                                                    (0.5, (4, 4), DOES_NOT_HOLD)])
def test_small_groups_verdict(ratio, groups, verdict):
    v = {"ratio": ratio, "largest_group_3d": groups[0], "largest_group_1d": groups[1]}
    assert groups_judge(v, None)[0] == verdict


@pytest.mark.parametrize("hidden, iter_ratio, verdict", [
    (HIDE_MIN, 1.0, HOLDS), (0.5, 1 + SLOWER_BY, HOLDS), (HIDE_MIN - 0.01, 0.9, DOES_NOT_HOLD),
    (0.5, 1 + SLOWER_BY + 0.01, DOES_NOT_HOLD)])
def test_overlap_verdict(hidden, iter_ratio, verdict):
    verdict_, why = overlap_judge({"hidden_share": hidden, "iter_ratio": iter_ratio}, None)
    assert verdict_ == verdict
    assert ("share 2 cores" in why) == (hidden >= HIDE_MIN and iter_ratio > 1 + SLOWER_BY)


@pytest.mark.parametrize("over_best, verdict", [(1.0, HOLDS), (1.10, HOLDS), (1.11, DOES_NOT_HOLD)])
def test_grid_pick_verdict(over_best, verdict):
    v = {"model_pick": [1, 1, 1, 4], "measured_best": [1, 1, 2, 2], "pick_over_best": over_best}
    assert pick_judge(v, None)[0] == verdict


@pytest.mark.parametrize("megatron, zero3, verdict", [(0.3, 0.2, HOLDS), (STRATEGY_MARGIN, STRATEGY_MARGIN, HOLDS),
                                                      (0.0, 0.3, DOES_NOT_HOLD), (0.3, -0.1, DOES_NOT_HOLD)])
def test_strategies_verdict(megatron, zero3, verdict):
    v = {"axonn_pick": [2, 1, 2, 1], "speedup_vs_megatron": megatron, "speedup_vs_zero3": zero3}
    assert strategies_judge(v, None)[0] == verdict


@pytest.mark.parametrize("auto_s, same, verdict", [(0.9, True, HOLDS), (1 - TRAIN_MARGIN, True, HOLDS),
                                                   (0.99, True, DOES_NOT_HOLD), (0.5, False, DOES_NOT_HOLD)])
def test_training_verdict(auto_s, same, verdict):
    v = training_value({"step_s": 1.0}, {"step_s": auto_s}, same)
    assert training_judge(v, None)[0] == verdict


def test_every_verdict_is_one_of_three():
    assert set(VERDICTS) == {HOLDS, DOES_NOT_HOLD, NEEDS_GPU}
