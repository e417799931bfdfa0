"""Megatron-LM's features in the engine: recomputation, sequence parallelism, the distributed optimizer.

Each is checked as the pipeline is (tests/engine/pipe_cases.py: loss, every gradient, the norm and
two AdamW steps against the serial model in float64, tolerance 1e-10 relative) on 4 and 8 ranks,
alone and together, with pipeline stages and overlap; then what it saves or costs (activation
bytes from ``memory_report``, the timeline's recomputation, the row group's collectives); then a
planted bug per feature, which the same exactness check must catch. One mpiexec job per rank count.
"""

import pytest

from tests.mpi_harness import batched_jobs

FULL, SEL = {"recompute": "full"}, {"recompute": "selective"}
SP, ZERO1 = {"sequence_parallel": True}, {"distributed_optimizer": True}
ALL = {"recompute": "selective", "sequence_parallel": True, "distributed_optimizer": True}

CASES = {
    4: [[[2, 1, 1, 2], 1, 1, "1f1b", FULL], [[1, 2, 1, 2], 1, 1, "1f1b", SEL], [[2, 1, 1, 1], 2, 4, "1f1b", FULL],
        [[1, 1, 2, 1], 2, 2, "gpipe", SEL],
        [[4, 1, 1, 1], 1, 1, "1f1b", SP], [[2, 1, 1, 2], 1, 1, "1f1b", SP], [[2, 2, 1, 1], 1, 1, "1f1b", SP],
        [[2, 1, 2, 1], 1, 1, "1f1b", SP], [[2, 1, 1, 1], 2, 2, "1f1b", SP],
        [[1, 1, 1, 4], 1, 1, "1f1b", ZERO1], [[1, 2, 1, 2], 1, 1, "1f1b", ZERO1], [[1, 1, 1, 2], 2, 2, "1f1b", ZERO1],
        [[2, 1, 1, 2], 1, 2, "1f1b", ALL]],
    8: [[[2, 1, 1, 2], 2, 4, "1f1b", {**ALL, "recompute": "full"}], [[4, 1, 1, 2], 1, 1, "1f1b", ALL],
        [[2, 2, 2, 1], 1, 1, "1f1b", {**SP, **FULL}], [[1, 1, 2, 4], 1, 3, "1f1b", {**SEL, **ZERO1}]],
}
PLANTED = {"stale parameters in full recomputation": [[2, 1, 1, 1], 2, 2, "1f1b", FULL],
           "wrong heads in selective recomputation": [[1, 2, 1, 2], 1, 1, "1f1b", SEL],
           "no sum over the sequence": [[2, 1, 1, 2], 1, 1, "1f1b", SP],
           "no all-gather after the distributed step": [[1, 1, 1, 4], 1, 1, "1f1b", ZERO1]}


@pytest.fixture(scope="module")
def job():
    return batched_jobs({
        **{f"exact {n}": (n, "tests.engine.pipe_cases:equivalence", dict(cases=cases)) for n, cases in CASES.items()},
        "recompute": (4, "tests.engine.megatron_cases:recompute_costs", dict(shape=[2, 1, 1, 2])),
        "sequence": (4, "tests.engine.megatron_cases:sequence_parallel_costs", dict(shape=[4, 1, 1, 1])),
        "optimizer": (4, "tests.engine.megatron_cases:optimizer_memory", dict(shape=[1, 1, 1, 4])),
        **{f"planted {bug}": (4, "tests.engine.megatron_cases:planted", dict(bug=bug, case=case))
           for bug, case in PLANTED.items()},
    }, timeout=400)


@pytest.mark.parametrize("n", list(CASES))
def test_each_feature_alone_and_together_matches_serial_float64(n, job):
    results = job(f"exact {n}")
    rows = results[0]
    assert [[r["shape"], r["pipe"], r["micro"], r["schedule"], r["options"]] for r in rows] == CASES[n]
    for other in results[1:]:  # every rank saw the same global numbers
        assert [r["loss_err"] for r in other] == [r["loss_err"] for r in rows]
    for r in rows:
        assert max(v for k, v in r.items() if k.endswith("_err")) < 1e-10, r


def test_recomputation_keeps_less_and_recomputes_in_the_timeline(job):
    r = job("recompute")[0]
    none, sel, full = r["None"], r["selective"], r["full"]
    # selective drops exactly the attention probabilities; full keeps each block's input only
    assert none["activations"] - sel["activations"] == r["probabilities_bytes"]
    assert full["activations"] < sel["activations"] / 4
    assert sel["attn_recompute_kernels"] == 3 and none["attn_recompute_kernels"] == 0  # one per block
    assert full["recompute_phases"] == 3 and sel["recompute_phases"] == 0
    assert full["forward_kernels"] > none["forward_kernels"]  # the blocks' forward kernels run twice


def test_sequence_parallelism_splits_the_layernorm_region_and_swaps_the_all_reduce(job):
    r = job("sequence")[0]
    off, on = r["False"], r["True"]
    assert off["ln1_shape"][1] == 4 * on["ln1_shape"][1]  # (b, T, C) -> (b, T/4, C) on 4 rows
    assert on["activations"] < off["activations"]
    # per block: attn and MLP outputs reduce-scattered, QKV/FC1 inputs gathered (forward and again in
    # backward), their dX reduce-scattered; the embedding's sum too; the LM head's input gathered
    assert off["row_ops"]["reduce_scatter"] == 0 and on["row_ops"]["reduce_scatter"] > 0
    assert on["row_ops"]["all_gather"] > 0
    # what stays an all-reduce over row: the loss's two (max, sums) and the LayerNorm/wpe gradient sum
    assert on["row_ops"]["all_reduce"] == 3 < off["row_ops"]["all_reduce"]


def test_distributed_optimizer_keeps_a_quarter_of_the_state_on_four_data_ranks(job):
    r = job("optimizer")[0]
    assert r["distributed"] * 4 >= r["adamw"] and r["distributed"] * 4 - r["adamw"] <= 4 * 16
    assert r["distributed"] < r["adamw"] / 3


@pytest.mark.parametrize("bug", list(PLANTED))
def test_a_planted_bug_fails_the_exactness_check(bug, job):
    messages = job(f"planted {bug}")
    assert all(m == messages[0] and m for m in messages)
