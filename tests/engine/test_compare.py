"""`gpulab model compare`: pipeline and activation formulas against hand-computed values, the search's
sanity, and the command's output."""

import json

import pytest

from gpulab.engine.parallel.pipeline import bubble_fraction
from gpulab.engine.perf.compare import best, compare, evaluate, time_split
from gpulab.engine.perf.machines import machine
from gpulab.engine.perf.pipeline import in_flight, p2p_bytes, stage_config
from gpulab.engine.perf.predict import gpt_config
from gpulab.engine.perf.terms import activation_bytes

M = machine("perlmutter")


def test_pipeline_formulas():
    cfg = gpt_config("gpt-80b")  # 42 layers, width 12288, 2048 tokens
    assert bubble_fraction(4, 16) == pytest.approx(3 / 19) and bubble_fraction(1, 8) == 0
    assert bubble_fraction(8, 64) < bubble_fraction(8, 8)  # more micro-batches, smaller bubble
    assert stage_config(cfg, 16).n_layer == 3 and stage_config(cfg, 4).n_layer == 11  # ceil(42/p)
    assert in_flight(16, 64) == 16 and in_flight(16, 4) == 4
    # micro-batch of 16 sequences over 8 replicas: 2 sequences x 2048 x 12288 bf16 values / TP4
    assert p2p_bytes(cfg, (4, 1, 1, 8), 16, 2) == 2 * 2048 * 12288 * 2 / 4


def test_activation_bytes_are_korthikantis():
    """s b h (34 + 5 a s / h) per layer without parallelism; s b h (10 + 24/t + 5 a s / (h t)) with
    tensor parallelism t (their eq. 2); 2 s b h per layer kept with full recomputation."""
    cfg = gpt_config("gpt-80b")
    s, h, a, L, V = 2048, 12288, 96, 42, 51200
    logits = 4 * s * V  # fp32 logits of one sequence
    full = activation_bytes(cfg, (1, 1, 1, 1), 1, recompute=False, flash_attention=False)
    assert full == pytest.approx(L * s * h * (34 + 5 * a * s / h) + logits)
    tp8 = activation_bytes(cfg, (8, 1, 1, 1), 1, recompute=False, flash_attention=False)
    assert tp8 == pytest.approx(L * s * h * (10 + 24 / 8 + 5 * a * s / (h * 8)) + logits / 8)
    flash = activation_bytes(cfg, (1, 1, 1, 1), 1, recompute=False, flash_attention=True)
    assert flash == pytest.approx(L * s * h * 34 + logits)
    kept = activation_bytes(cfg, (1, 1, 1, 1), 1, recompute=True, flash_attention=True)
    assert kept == pytest.approx(L * 2 * s * h + s * h * 34 + logits) and kept < flash
    # sequences spread over depth x data: per rank, a quarter
    assert activation_bytes(cfg, (1, 1, 2, 2), 4, recompute=True, flash_attention=True) == pytest.approx(kept)


def test_sharding_memory_and_the_pipeline_bubble_in_evaluate():
    cfg = gpt_config("gpt-5b")
    run = dict(recompute=True, global_batch=64, machine=M)
    ddp = evaluate(cfg, (1, 1, 1, 64), pipe=1, micro_batches=1, **run)
    zero3 = evaluate(cfg, (1, 1, 64, 1), pipe=1, micro_batches=1, **run)
    L, C, V, T = 24, 4096, 51200, 2048
    weights, copied = 12 * L * C * C + V * C, 13 * L * C + T * C + 2 * C  # copied: biases, LayerNorms, wpe
    assert ddp["memory"]["parameter_state"] == 16 * (weights + copied)  # AdamW, mixed precision
    assert zero3["memory"]["parameter_state"] == pytest.approx(16 * (weights / 64 + copied), rel=1e-4)
    assert zero3["memory"]["total"] < ddp["memory"]["total"] and not ddp["fits"] and zero3["fits"]
    sharded = evaluate(cfg, (1, 1, 1, 64), pipe=1, micro_batches=1, distributed_optimizer=True, **run)
    assert sharded["memory"]["parameter_state"] == pytest.approx((weights + copied) * (4 + 12 / 64))
    few = evaluate(cfg, (4, 1, 1, 4), pipe=4, micro_batches=2, **run)
    many = evaluate(cfg, (4, 1, 1, 4), pipe=4, micro_batches=16, **run)
    assert few["bubble"] == pytest.approx(3 / 5) and many["bubble"] == pytest.approx(3 / 19)
    assert many["bubble_s"] / many["iter_s"] < few["bubble_s"] / few["iter_s"]
    assert many["p2p_s"] > 0 == ddp["p2p_s"]
    # micro-batches hold fewer sequences: less activation memory per micro-batch in flight
    assert evaluate(cfg, (1, 1, 64, 1), pipe=1, micro_batches=1, **{**run, "global_batch": 256})["memory"][
        "activations"] > zero3["memory"]["activations"]
    off = evaluate(cfg, (1, 1, 64, 1), pipe=1, micro_batches=1, **{**run, "recompute": False})
    assert off["memory"]["activations"] > zero3["memory"]["activations"] and off["iter_s"] < zero3["iter_s"]
    for r in (ddp, zero3, few, many):
        assert 0 < r["comm_share"] < 1 and 0 < r["mfu"] < r["mfu_matmul"] < 1


def test_compare_searches_each_strategy_and_axonn_includes_the_sharded_ones():
    rows = compare(gpt_config("gpt-5b"), 64, 64, M)
    assert [r["strategy"] for r in rows] == ["axonn", "megatron", "zero3", "hsdp", "ddp"]
    fitting = {r["strategy"]: r for r in rows if r["fits"]}
    for r in fitting.values():
        assert r["memory"]["total"] <= M.usable_memory * M.memory_bytes and r["searched"] > 0
    for name in ("zero3", "hsdp", "ddp"):  # special cases of AxoNN's grid: never faster than its best
        if name in fitting:
            assert fitting["axonn"]["iter_s"] <= fitting[name]["iter_s"]
    assert "megatron" in fitting and fitting["megatron"]["shape"][0] <= M.ranks_per_node
    small = best("zero3", gpt_config("gpt-5b"), 64, 32, M)  # 32 sequences cannot feed 64 replicas
    assert not small["fits"] and "at least one sequence per replica" in small["why"]


def test_the_issue_command_prints_every_strategy_and_the_assumptions(capsys):
    from gpulab.cli import main

    assert main(["model", "compare", "--world", "1024", "--model", "gpt-80b", "--machine", "perlmutter"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "gpt-80b on 1024 x perlmutter, global batch 1024 x 2048 tokens"
    for name in ("axonn", "megatron", "zero3", "hsdp", "ddp"):
        assert any(line.startswith(name) for line in lines), name
    assert "Megatron-LM TP" in out and "PP" in out and "assumptions:" in out and "Korthikanti" in out
    assert "ddp       does not fit" in out  # 80B x 16 bytes on every GPU
    main(["model", "compare", "--world", "64", "--model", "gpt-5b", "--global-batch", "64", "--json",
          "--strategies", "zero3,megatron"])
    data = json.loads(capsys.readouterr().out)
    assert [r["strategy"] for r in data["rows"]] == ["zero3", "megatron"] and data["global_batch"] == 64
    assert {"iter_s", "memory", "comm_share", "mfu", "mfu_matmul", "bubble", "config"} <= set(data["rows"][1])


def test_time_split_adds_up_and_puts_the_idle_slots_in_the_bubble():
    cfg, m = gpt_config("gpt-80b"), machine("perlmutter")
    for shape, pipe, micro in (((4, 1, 1, 16), 16, 64), ((1, 1, 64, 16), 1, 1)):
        row = evaluate(cfg, shape, pipe=pipe, micro_batches=micro, recompute=True, global_batch=1024, machine=m)
        parts = time_split(row)
        assert sum(parts.values()) == pytest.approx(row["iter_s"])
        assert parts["bubble"] == row["bubble_s"] and (parts["bubble"] > 0) == (pipe > 1)
        assert parts["compute"] > 0 and parts["exposed communication"] > 0


# --- Megatron-LM's features in the model ----------------------------------------------------------

def test_interleaving_shrinks_the_bubble_and_multiplies_the_sends():
    cfg = gpt_config("gpt-80b")
    run = dict(recompute=True, global_batch=1024, machine=M)
    plain = evaluate(cfg, (4, 1, 1, 16), pipe=16, micro_batches=64, **run)
    inter = evaluate(cfg, (4, 1, 1, 16), pipe=16, micro_batches=64, virtual_stages=2, **run)
    assert plain["bubble"] == pytest.approx(15 / 79) and inter["bubble"] == pytest.approx(7.5 / 71.5)
    assert inter["bubble_s"] == pytest.approx(plain["bubble_s"] / 2)
    assert inter["p2p_s"] / plain["p2p_s"] == pytest.approx((2 * 64 + 15) / (64 + 15))
    # the first stage holds p + (p-1)/v micro-batches' activations: 23.5 against 16
    assert inter["memory"]["activations"] / plain["memory"]["activations"] == pytest.approx(23.5 / 16)
    assert in_flight(16, 64, 2) == 23.5 and in_flight(8, 32, 3) == pytest.approx(8 + 7 / 3)
    assert sum(time_split(inter).values()) == pytest.approx(inter["iter_s"])


def test_sequence_parallelism_splits_the_layernorm_region_in_korthikantis_count():
    """Their eq. 5: s b h (34/t + 5 a s / (h t)) per layer with tensor and sequence parallelism t."""
    cfg = gpt_config("gpt-80b")
    s, h, a, L, V = 2048, 12288, 96, 42, 51200
    sp = activation_bytes(cfg, (8, 1, 1, 1), 1, recompute=False, flash_attention=False, sequence_parallel=True)
    assert sp == pytest.approx(L * s * h * (34 / 8 + 5 * a * s / (h * 8)) + 4 * s * V / 8)
    kept = activation_bytes(cfg, (8, 1, 1, 1), 1, recompute=True, flash_attention=True, sequence_parallel=True)
    assert kept == pytest.approx(L * 2 * s * h / 8 + s * h * 34 / 8 + 4 * s * V / 8)


def test_hardware_flops_count_the_recomputed_forward():
    cfg = gpt_config("gpt-80b")
    run = dict(pipe=1, micro_batches=1, global_batch=1024, machine=M)
    on = evaluate(cfg, (1, 1, 64, 16), recompute=True, **run)
    off = evaluate(cfg, (1, 1, 64, 16), recompute=False, **run)
    assert off["hfu"] == pytest.approx(off["mfu"])
    # the blocks' forward again: 1/3 of their 6N + attention, nearly all of the model's FLOPs
    assert 1.30 < on["hfu"] / on["mfu"] < 4 / 3


def test_megatron_is_searched_as_a_tuned_run_and_the_paper_stands_beside_it(capsys):
    from gpulab.cli import main
    from gpulab.engine.perf.compare import against_paper

    rows = compare(gpt_config("gpt-80b"), 1024, 1024, M)
    meg = next(r for r in rows if r["strategy"] == "megatron")
    assert meg["sequence_parallel"] and meg["distributed_optimizer"] and "SP ZeRO-1" in meg["config"]
    zero3 = next(r for r in rows if r["strategy"] == "zero3")
    assert not zero3["distributed_optimizer"] and not zero3["sequence_parallel"]
    gap = against_paper(rows)
    axonn = next(r for r in rows if r["strategy"] == "axonn")
    assert gap["predicted_axonn_faster_than_megatron"] == pytest.approx(meg["iter_s"] / axonn["iter_s"] - 1)
    assert (gap["axonn_faster_than_megatron"], gap["axonn_peak_share"]) == (0.26, 0.57)
    # beside it, the same search without the tuned features: what they are worth
    plain = meg["untuned"]
    assert not (plain["sequence_parallel"] or plain["distributed_optimizer"] or plain.get("virtual_stages", 1) > 1)
    assert plain["iter_s"] >= meg["iter_s"] and "SP" not in plain["config"]
    assert gap["predicted_axonn_faster_than_untuned_megatron"] == pytest.approx(plain["iter_s"] / axonn["iter_s"] - 1)
    assert "untuned" not in zero3  # ZeRO-3 has no tuned features to take away
    # 42 layers do not split evenly over 4 stages: no interleaving there; 40 layers over 2 stages x 4 chunks do
    cfg40 = gpt_config("gpt-80b")
    cfg40 = type(cfg40)(**{**cfg40.to_dict(), "n_layer": 40})
    run = dict(recompute=True, global_batch=1024, machine=M)
    assert evaluate(cfg40, (4, 1, 1, 32), pipe=8, micro_batches=64, virtual_stages=5, **run)["bubble"] < \
        evaluate(cfg40, (4, 1, 1, 32), pipe=8, micro_batches=64, **run)["bubble"]

    assert main(["model", "compare", "--world", "1024", "--model", "gpt-80b", "--machine", "perlmutter"]) == 0
    out = capsys.readouterr().out
    assert "against the paper (Singh et al., arXiv 2305.13525" in out and "paper 26% faster" in out
    assert "paper 57% of peak" in out and "model FLOPs" in out and "hardware FLOPs" in out
    assert "could not be read here" in out and "megatron as a tuned run uses it" in out
    assert "  untuned Megatron-LM" in out and "against Megatron-LM without the features of a tuned run" in out
