"""The live comparison: which configurations each strategy may run, the model's pick, and real runs
whose bytes per group are the volume model's (``gpulab.engine.perf.live_plans``)."""

import pytest

from gpulab.engine.perf.compare import evaluate
from gpulab.engine.perf.fitted_machine import FittedMachine
from gpulab.engine.perf.live_plans import best_plans, configurations, live_names
from gpulab.engine.strategies import strategy_of
from tests.engine.live_plans_cases import BATCH, CFG
from tests.mpi_harness import run_mpi

# a made-up machine: collectives of 4 ranks cost more than of 2; numbers of the order fitted here
MACHINE = FittedMachine(
    name="test", ranks=4, cores=2, matmul_rate=5e10, elementwise_rate=1e9, kernel_overhead=1e-5, share=2.0,
    machine_peak=1e11, overlap={"poll": 0.2}, memory_bytes=8e9,
    collectives={f"{op}/{g}": [1e-4 * g, 1e-9 * g] for op in ("all_reduce", "all_gather", "reduce_scatter")
                 for g in (2, 4)})


def test_each_strategy_runs_only_its_own_grids():
    assert live_names() == ["axonn", "megatron", "megatron-pp", "zero3", "hsdp", "ddp"]
    for strategy in live_names():
        options = list(configurations(strategy, CFG, 4, BATCH))
        assert options, strategy
        for shape, pipe, micro in options:
            named = "megatron" if strategy == "megatron-pp" else strategy
            assert strategy_of(shape) == named and (pipe > 1) == (strategy == "megatron-pp")
            assert micro == (2 * pipe if pipe > 1 else 1) and BATCH % (micro * shape[2] * shape[3]) == 0
    assert {s for s, _, _ in configurations("axonn", CFG, 4, BATCH)} == {(2, 1, 2, 1), (2, 2, 1, 1), (1, 2, 2, 1),
                                                                          (1, 2, 1, 2), (1, 4, 1, 1)}
    assert list(configurations("megatron-pp", CFG, 4, BATCH)) == [((2, 1, 1, 1), 2, 4)]  # 2 layers: 2 stages
    with pytest.raises(ValueError, match="unknown strategy 'fsdp'"):
        list(configurations("fsdp", CFG, 4, BATCH))


def test_best_plan_is_the_fastest_prediction_of_the_strategy():
    plans = best_plans(CFG, 4, BATCH, MACHINE)
    assert [p["strategy"] for p in plans] == live_names()
    for plan in plans:
        times = [evaluate(CFG, s, pipe=p, micro_batches=m, recompute=False, global_batch=BATCH, machine=MACHINE,
                          flash_attention=False)["iter_s"]
                 for s, p, m in configurations(plan["strategy"], CFG, 4, BATCH)]
        assert plan["predicted"]["iter_s"] == pytest.approx(min(times))
    pp = next(p for p in plans if p["strategy"] == "megatron-pp")
    assert pp["predicted"]["bubble"] == pytest.approx(1 / 5) and pp["predicted"]["p2p_s"] > 0  # p=2, m=4
    assert pp["predicted_bytes"] is None


def test_measured_bytes_per_group_are_the_volume_models():
    """Every strategy's plan trained on 4 ranks: the bytes each group moved per rank (collectives.trace)
    equal the volume model's count; the pipeline's stage-to-stage sends appear as group 'pipe'."""
    plans = [{"strategy": s, "shape": list(shape), "pipe": p, "micro_batches": m}
             for s in live_names() for shape, p, m in list(configurations(s, CFG, 4, BATCH))[:1]]
    rows = run_mpi(4, "tests.engine.live_plans_cases:measure_plans", timeout=240, plans=plans)[0]
    assert [r["strategy"] for r in rows] == live_names()
    for row in rows:
        assert row["iter_s"] > 0
        if row["pipe"] == 1:
            assert row["measured"] == pytest.approx(row["predicted"]), row["strategy"]
        else:  # each rank sends (or receives) every micro-batch's [B/m, T, C] float32 activations, then their
            # gradients; and over the stages the loss (float32) and the gradient norm's square (float64) are summed
            assert row["measured"]["pipe"] == 2 * BATCH * CFG.block_size * CFG.n_embd * 4 + 4 + 8
