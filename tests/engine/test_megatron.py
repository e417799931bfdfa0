"""Megatron-LM's features in the engine: recomputation, sequence parallelism, the distributed optimizer,
the interleaved 1F1B schedule.

Each is checked as the pipeline is (tests/engine/pipe_cases.py: loss, every gradient, the norm and
two AdamW steps against the serial model in float64, tolerance 1e-10 relative) on 4 and 8 ranks,
alone and together, with pipeline stages and overlap; then what it saves or costs (activation
bytes from ``memory_report``, the timeline's recomputation, the row group's collectives); then a
planted bug per feature, which the same exactness check must catch. One mpiexec job per rank count.
"""

import pytest

from gpulab.engine.parallel.pipeline import bubble_fraction, check_pipeline, schedule, simulate
from gpulab.engine.parallel.timeline_plot import gantt
from tests.mpi_harness import batched_jobs

FULL, SEL = {"recompute": "full"}, {"recompute": "selective"}
SP, ZERO1 = {"sequence_parallel": True}, {"distributed_optimizer": True}
ALL = {"recompute": "selective", "sequence_parallel": True, "distributed_optimizer": True}
IL2 = {"virtual_stages": 2, "n_layer": 9}  # uneven: 9 blocks in 8 chunks on 4 stages (5 on 2 stages x 2)

CASES = {
    4: [[[2, 1, 1, 2], 1, 1, "1f1b", FULL], [[1, 2, 1, 2], 1, 1, "1f1b", SEL], [[2, 1, 1, 1], 2, 4, "1f1b", FULL],
        [[1, 1, 2, 1], 2, 2, "gpipe", SEL],
        [[4, 1, 1, 1], 1, 1, "1f1b", SP], [[2, 1, 1, 2], 1, 1, "1f1b", SP], [[2, 2, 1, 1], 1, 1, "1f1b", SP],
        [[2, 1, 2, 1], 1, 1, "1f1b", SP], [[2, 1, 1, 1], 2, 2, "1f1b", SP],
        [[1, 1, 1, 4], 1, 1, "1f1b", ZERO1], [[1, 2, 1, 2], 1, 1, "1f1b", ZERO1], [[1, 1, 1, 2], 2, 2, "1f1b", ZERO1],
        [[2, 1, 1, 2], 1, 2, "1f1b", ALL],
        [[1, 1, 1, 1], 4, 4, "interleaved", IL2], [[1, 1, 1, 1], 4, 8, "interleaved", IL2],
        [[2, 1, 1, 1], 2, 4, "interleaved", {"virtual_stages": 3, "n_layer": 7}],
        [[1, 1, 1, 2], 2, 2, "interleaved", IL2],
        [[2, 1, 1, 1], 2, 4, "interleaved", {**IL2, **ALL}]],
    8: [[[2, 1, 1, 2], 2, 4, "1f1b", {**ALL, "recompute": "full"}], [[4, 1, 1, 2], 1, 1, "1f1b", ALL],
        [[2, 2, 2, 1], 1, 1, "1f1b", {**SP, **FULL}], [[1, 1, 2, 4], 1, 3, "1f1b", {**SEL, **ZERO1}],
        [[1, 2, 1, 1], 4, 4, "interleaved", IL2], [[2, 1, 1, 1], 4, 8, "interleaved", {**IL2, **SP, **FULL}],
        [[1, 1, 2, 2], 2, 2, "interleaved", {**IL2, **ZERO1}]],
}
PLANTED = {"stale parameters in full recomputation": [[2, 1, 1, 1], 2, 2, "1f1b", FULL],
           "wrong heads in selective recomputation": [[1, 2, 1, 2], 1, 1, "1f1b", SEL],
           "no sum over the sequence": [[2, 1, 1, 2], 1, 1, "1f1b", SP],
           "no all-gather after the distributed step": [[1, 1, 1, 4], 1, 1, "1f1b", ZERO1],
           "reduce-scattered sums kept in another rank's slice": [[1, 1, 2, 2], 1, 1, "1f1b", ZERO1],
           "blocks placed stage-major under interleaving": [[1, 1, 1, 1], 4, 4, "interleaved", IL2]}
TIMELINES = [(4, 8, 2), (2, 4, 3)]


@pytest.fixture(scope="module")
def job():
    return batched_jobs({
        **{f"exact {n}": (n, "tests.engine.pipe_cases:equivalence", dict(cases=cases)) for n, cases in CASES.items()},
        "recompute": (4, "tests.engine.megatron_cases:recompute_costs", dict(shape=[2, 1, 1, 2])),
        "sequence": (4, "tests.engine.megatron_cases:sequence_parallel_costs", dict(shape=[4, 1, 1, 1])),
        "optimizer": (4, "tests.engine.megatron_cases:optimizer_memory", dict(shape=[1, 1, 1, 4])),
        **{f"wire {b}": (4, "tests.engine.megatron_cases:optimizer_wire", dict(shape=[1, 1, 2, 2], bucket_bytes=b))
           for b in (None, 512)},
        **{f"timeline {pipe} {micro} {v}": (4, "tests.engine.megatron_cases:interleaved_timeline",
                                            dict(pipe=pipe, micro=micro, virtual=v)) for pipe, micro, v in TIMELINES},
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


@pytest.mark.parametrize("bucket_bytes", [None, 512])
def test_distributed_optimizer_reduce_scatters_and_all_gathers_the_all_reduces_bytes(bucket_bytes, job):
    """Megatron-LM's distributed optimizer: no gradient all-reduce over data or depth x data, a reduce-scatter
    and an all-gather of the same buffer instead, so each group sends what AdamW's all-reduce sent; every call
    as ``volume.collective_calls`` predicts it, and the bytes per group as ``wire.wire_by_group`` does."""
    for rank, r in enumerate(job(f"wire {bucket_bytes}")):
        plain, zero1 = r["False"], r["True"]
        for run in (plain, zero1):
            assert run["engine"] == run["model"], rank
        sync = {"data", "batch"}
        assert not [c for c in zero1["engine"] if c[0] in sync and c[1] == "all_reduce" and c[2] > 8], rank
        scattered = sorted(c[::2] for c in zero1["engine"] if c[1] == "reduce_scatter" and c[0] in sync)
        gathered = sorted(c[::2] for c in zero1["engine"] if c[1] == "all_gather" and c[0] in sync)
        assert scattered == gathered and scattered, rank  # one of each per bucket, same buffer
        sizes = {"data": 2, "batch": 4}
        for group in sync:  # the all-reduce's bytes, but for the padding (< one value per member and bucket)
            buckets = sum(c[0] == group for c in scattered)
            extra = zero1["sent"][group] - plain["sent"][group]
            assert 0 <= extra < 2 * buckets * sizes[group] * 8, (rank, group, extra)
        if bucket_bytes is None:  # wire_by_group estimates bucket counts from sizes: without buckets, exact
            for run in (plain, zero1):
                assert run["wire"] == pytest.approx(run["sent"], rel=1e-12), rank


@pytest.mark.parametrize("bug", list(PLANTED))
def test_a_planted_bug_fails_the_exactness_check(bug, job):
    messages = job(f"planted {bug}")
    assert all(m == messages[0] and m for m in messages)


# --- the interleaved schedule: geometry and its bubble (no MPI) --------------------------------------

@pytest.mark.parametrize("pipe, micro, v", [(2, 4, 2), (4, 8, 2), (4, 8, 4), (4, 12, 3), (8, 16, 2)])
def test_interleaved_runs_each_chunk_of_each_micro_batch_once_in_order(pipe, micro, v):
    for stage in range(pipe):
        ops = schedule("interleaved", pipe, stage, micro, v)
        want = [(op, i, c) for op in "FB" for i in range(micro) for c in range(v)]
        assert sorted(ops) == sorted(want)
        for i in range(micro):  # a micro-batch's chunks forward in order, backward in reverse, F before B
            fwd = [ops.index(("F", i, c)) for c in range(v)]
            bwd = [ops.index(("B", i, c)) for c in reversed(range(v))]
            assert fwd == sorted(fwd) and bwd == sorted(bwd) and fwd[-1] < bwd[0]


@pytest.mark.parametrize("pipe, micro, v", [(2, 4, 2), (4, 8, 2), (4, 8, 4), (4, 12, 3), (8, 16, 2), (4, 16, 2)])
def test_interleaved_bubble_is_megatrons_p_minus_1_over_v_m(pipe, micro, v):
    """Simulated with fixed times (backward = 2 forward): bubble / ideal time = (p-1)/(v m) exactly,
    (p-1)/(m) without interleaving; as a share of the step, ``bubble_fraction``."""
    ideal = micro * 3.0
    step = simulate("interleaved", pipe, micro, v)
    assert (step - ideal) / ideal == pytest.approx((pipe - 1) / (v * micro), abs=1e-12)
    assert 1 - ideal / step == pytest.approx(bubble_fraction(pipe, micro, v), abs=1e-12)
    plain = simulate("1f1b", pipe, micro)
    assert (plain - ideal) / ideal == pytest.approx((pipe - 1) / micro, abs=1e-12)


def test_interleaved_validation_messages():
    with pytest.raises(ValueError, match=r"n_layer \(6\) must be at least pipe x virtual stages \(4 x 2\)"):
        check_pipeline(6, 4, 4, "interleaved", virtual=2)
    with pytest.raises(ValueError, match=r"micro-batches \(6\) divisible by the stages \(4\)"):
        check_pipeline(8, 4, 6, "interleaved", virtual=2)
    with pytest.raises(ValueError, match=r"virtual stages \(2\) need the interleaved schedule"):
        check_pipeline(8, 4, 4, "1f1b", virtual=2)


@pytest.mark.parametrize("pipe, micro, v", TIMELINES)
def test_interleaved_timeline_follows_the_schedule(pipe, micro, v, job):
    results = job(f"timeline {pipe} {micro} {v}")
    assert all(r["phases"] == 2 * micro * v for r in results)
    ax = gantt(results[0]["events"]).axes[0]  # every chunk's forward and backward drawn
    labels = sorted(t.get_text() for t in ax.texts)
    assert labels == sorted(f"{op}{i}.{c}" for op in "FB" for i in range(micro) for c in range(v) for _ in range(4))


@pytest.mark.parametrize("path", ["staged", "cuda-aware"])
def test_megatron_features_on_the_fake_device(path):
    """Every feature at once with the arrays on the fake device: they stay there, every collective and
    send takes the device path, and the numbers are still the serial model's."""
    from tests.gpu.test_engine_device import AWARE, STAGED
    from tests.mpi_harness import run_mpi

    cases = [[[2, 1, 1, 2], 1, 2, "1f1b", {**ALL, "recompute": "full"}],
             [[2, 1, 1, 1], 2, 2, "interleaved", {**IL2, **ALL}]]
    rows = run_mpi(4, "tests.engine.pipe_cases:equivalence", timeout=300, cases=cases, steps=1, device="fake",
                   expect_path=path, env=STAGED if path == "staged" else AWARE)[0]
    assert max(v for r in rows for k, v in r.items() if k.endswith("_err")) < 1e-10
