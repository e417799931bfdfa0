"""The memory calculator's formulas against hand-computed values (no MPI); the engine check is
test_memory_engine.py."""

import math

import pytest

from gpulab.engine import GPTConfig, param_shapes
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.parallel.pipeline import schedule
from gpulab.engine.perf.machines import machine
from gpulab.engine.perf.memory_model import (
    KINDS,
    engine_precision,
    fit,
    in_flight,
    machine_precision,
    memory_breakdown,
    stage_memory,
    weight_cache_values,
)
from gpulab.engine.perf.predict import gpt_config
from gpulab.engine.perf.terms import activation_bytes, activation_values, local_params, memory_terms

M = machine("perlmutter")
GPT80 = gpt_config("gpt-80b")  # 42 layers, width 12288, 96 heads, vocabulary 51200


def _n_params(cfg) -> int:
    return sum(math.prod(s) for s in param_shapes(cfg).values())


def test_precisions():
    assert engine_precision("float64") == engine_precision("float64")
    p64, p32, p16 = (engine_precision(d) for d in ("float64", "float32", "float16"))
    assert (p64.weight_bytes, p64.optimizer_bytes) == (8, 16)  # two float64 moments
    assert (p32.weight_bytes, p32.optimizer_bytes) == (4, 8)
    assert (p16.weight_bytes, p16.optimizer_bytes) == (2, 12)  # two float32 moments + float32 master
    mp = machine_precision(M)
    assert (mp.weight_bytes, mp.grad_bytes, mp.optimizer_bytes) == (2, 2, 12)  # ZeRO paper: 2 + 2 + K=12


def test_one_gpu_holds_the_whole_model_state_16_bytes_per_parameter():
    b = memory_breakdown(GPT80, (1, 1, 1, 1), global_batch=1, precision=machine_precision(M))
    n = _n_params(GPT80)
    assert 76e9 < n < 78e9  # 42 x 12 x 12288^2 blocks + embeddings: "80B" as AxoNN names it
    assert (b["weights"], b["gradients"], b["optimizer"]) == (2 * n, 2 * n, 12 * n)
    assert b["activations"] == pytest.approx(activation_bytes(GPT80, (1, 1, 1, 1), 1, recompute=False,
                                                              flash_attention=False))
    assert b["total"] == pytest.approx(sum(b[k] for k in KINDS))
    f = fit(b, M)
    assert not f["fits"] and f["limit"] == pytest.approx(0.9 * 40e9) and f["advice"]


@pytest.mark.parametrize("zero, sharded", [(0, ()), (1, ("optimizer",)), (2, ("optimizer", "gradients")),
                                           (3, ("optimizer", "gradients", "weights"))])
def test_zero_shards_over_the_data_replicas(zero, sharded):
    kw = dict(global_batch=64, precision=machine_precision(M))
    plain = memory_breakdown(GPT80, (4, 2, 2, 8), **kw)
    z = memory_breakdown(GPT80, (4, 2, 2, 8), zero=zero, **kw)
    for kind in ("weights", "gradients", "optimizer"):
        assert z[kind] == pytest.approx(plain[kind] / (8 if kind in sharded else 1))


def test_depth_shards_weights_row_and_col_split_activations():
    kw = dict(global_batch=64, precision=machine_precision(M), flash_attention=True)
    one = memory_breakdown(GPT80, (1, 1, 1, 64), **kw)
    depth = memory_breakdown(GPT80, (1, 1, 8, 8), **kw)
    # wpe, biases and LayerNorms stay copied over depth (0.3% of the weights here)
    assert depth["weights"] == pytest.approx(one["weights"] / 8, rel=5e-3) and depth["weights"] > one["weights"] / 8
    tp = memory_breakdown(GPT80, (8, 1, 1, 8), global_batch=8, **{k: v for k, v in kw.items() if k != "global_batch"})
    assert tp["activations"] < memory_breakdown(GPT80, (1, 1, 1, 8), global_batch=8, precision=kw["precision"],
                                                flash_attention=True)["activations"] / 2


def test_pipeline_stages_hold_their_blocks_and_the_micro_batches_in_flight():
    cfg = GPTConfig(vocab_size=96, block_size=32, n_layer=5, n_head=8, n_embd=96)
    shape = (2, 1, 1, 1)
    whole = local_params(cfg, shape)
    stages = [local_params(cfg, shape, 2, s) for s in range(2)]
    wte = 96 * 96 // 2  # the tied embedding's piece: held by the first and the last stage
    assert sum(s["weight"] for s in stages) == whole["weight"] + wte
    for kind in ("1f1b", "gpipe"):
        for stage in range(4):
            ops = schedule(kind, 4, stage, 6)
            live = max(sum(op == "F" for op, _ in ops[:k + 1]) - sum(op == "B" for op, _ in ops[:k + 1])
                       for k in range(len(ops)))
            assert in_flight(kind, 4, stage, 6) == live
    p = engine_precision("float64")
    first = stage_memory(cfg, shape, 0, global_batch=8, precision=p, pipe=2, micro_batches=4)
    last = stage_memory(cfg, shape, 1, global_batch=8, precision=p, pipe=2, micro_batches=4)
    assert (first["layers"], last["layers"], first["in_flight"], last["in_flight"]) == (3, 2, 2, 1)
    per_micro = activation_values(cfg, shape, 2, layers=3, last=False) * 8
    assert first["activations"] == pytest.approx(2 * per_micro)
    assert memory_breakdown(cfg, shape, global_batch=8, precision=p, pipe=2, micro_batches=4)["stage"] == 0
    gpipe = stage_memory(cfg, shape, 1, global_batch=8, precision=p, pipe=2, micro_batches=4, schedule_kind="gpipe")
    assert gpipe["in_flight"] == 4 and gpipe["activations"] == pytest.approx(4 * last["activations"])


def test_stage_activations_add_up_to_the_whole_model():
    cfg = gpt_config("gpt-20b")
    whole = activation_values(cfg, (2, 2, 1, 1), 4)
    parts = activation_values(cfg, (2, 2, 1, 1), 4, layers=20, last=False) + \
        activation_values(cfg, (2, 2, 1, 1), 4, layers=cfg.n_layer - 20, last=True)
    assert parts == pytest.approx(whole)
    assert activation_bytes(cfg, (1, 1, 1, 1), 2, recompute=True, flash_attention=True, layers=0, last=False) == 0


def test_weight_cache_replays_the_fetcher():
    cfg = GPTConfig(vocab_size=96, block_size=32, n_layer=3, n_head=8, n_embd=96)
    shape = (2, 1, 4, 1)
    C, V, L = 96, 96, 3
    assert weight_cache_values(cfg, shape, Overlap(cache=True)) == (12 * L * C * C + V * C) // 2
    # terms.memory_terms' closed form for the cache is the same count
    terms = memory_terms(cfg, shape, 8, value_bytes=1, state_bytes_per_param=1, overlap=Overlap(cache=True))
    assert terms["weight_cache"] == pytest.approx((12 * L * C * C + V * C) / 2)
    # prefetch alone: one gathered buffer ahead, at most the largest (padded) block
    oag = weight_cache_values(cfg, shape, Overlap(oag=True))
    assert 4 * C * C // 2 <= oag <= 4 * C * C // 2 + 4
    assert weight_cache_values(cfg, (2, 1, 1, 4), Overlap(cache=True, oag=True)) == 0  # depth 1: views


def test_advice_names_the_largest_saving_first():
    b = memory_breakdown(GPT80, (8, 1, 1, 128), global_batch=1024, precision=machine_precision(M))
    f = fit(b, M)
    assert not f["fits"]
    assert "recompute" in f["advice"][0] or "micro-batch" in f["advice"][0]
    ok = memory_breakdown(GPT80, (8, 1, 4, 8), global_batch=1024, precision=machine_precision(M), pipe=4,
                          micro_batches=64, recompute=True, zero=1, flash_attention=True)
    assert fit(ok, M)["fits"] and fit(ok, M)["advice"] == []


def test_recomputation_and_sequence_parallelism_count_what_the_engine_keeps():
    cfg = GPTConfig(vocab_size=96, block_size=32, n_layer=4, n_head=8, n_embd=96)
    p, shape = engine_precision("float64"), (2, 1, 1, 1)
    tok, C, V, L = 8 * 32, 96, 96, 4  # tokens on the rank, width, vocabulary, layers
    scores = 8 * (8 // 2) * 32 * 32  # (b, n_head/row, T, T)
    norms = 4 * tok * C + 2 * tok  # the LayerNorms' xhat, their outputs (the next layers' inputs), rstd
    block = norms + 16 * tok * C // 2 + scores  # and QKV, attention out, the MLP's hidden (split over row)
    outside = 2 * tok * C + tok + tok * V // 2  # ln_f, the LM head's input, the probabilities

    def mem(precision=p, **kw):
        return stage_memory(cfg, shape, 0, global_batch=8, precision=precision, **kw)

    plain, full, selective = mem(), mem(recompute="full"), mem(recompute="selective")
    assert plain["activations"] == 8 * (L * block + outside)
    assert full["activations"] == 8 * (L * tok * C + outside)  # each block's input
    # the block rebuilt in backward and its recomputed output are backward's, beside everything else
    assert full["working_set"] == plain["working_set"] + 8 * (block + tok * C)
    assert mem(recompute=True) == {**full, "recompute": True}
    assert selective["activations"] == plain["activations"] - 8 * L * scores  # QKV kept, probabilities not
    assert selective["working_set"] > plain["working_set"]  # rebuilt in the attention's backward
    sp = mem(sequence_parallel=True)  # the residual stream's region holds T/row positions
    assert sp["activations"] == 8 * (L * (block - norms // 2) + outside - (2 * tok * C + tok) // 2)
    one_row = (1, 1, 1, 2)  # nothing to split on one row: the engine ignores it, so does the model
    assert stage_memory(cfg, one_row, 0, global_batch=8, precision=p, sequence_parallel=True) == \
        stage_memory(cfg, one_row, 0, global_batch=8, precision=p)
    # Korthikanti et al.'s count has the rebuilt layer in the activations already: not twice
    mp = machine_precision(M)
    assert mem(mp, recompute="full")["working_set"] == mem(mp)["working_set"] + tok * C * mp.value_bytes
    a, s, b, t = 8, 32, 8, 2  # their 5 a s^2 b / t bytes of attention per layer, which selective drops
    dropped = L * 5 * a * s**2 * b / t
    assert mem(mp, recompute="selective")["activations"] == pytest.approx(mem(mp)["activations"] - dropped)
