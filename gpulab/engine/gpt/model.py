"""The serial reference GPT: parameters with nanoGPT's names, loss and hand-written gradients.

    params = init_params(cfg, seed=0)            # {"transformer.wte.weight": (V, C), ...}
    loss, grads = loss_and_grads(params, idx, targets, cfg)   # idx, targets: (B, T) ints

Architecture (GPT-2 / nanoGPT, no dropout): token + position embedding,
``n_layer`` pre-LayerNorm blocks ``x += attn(ln_1(x)); x += mlp(ln_2(x))``, a
final LayerNorm and an LM head tied to the token embedding. The parallel
engine must reproduce these numbers exactly; every test compares against it.
Works on numpy or CuPy parameters (the array module follows ``wte``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from gpulab.backend import array_module
from gpulab.engine.gpt import layers as L
from gpulab.engine.gpt.config import GPTConfig

WTE = "transformer.wte.weight"
WPE = "transformer.wpe.weight"


class BlockCache(NamedTuple):
    """What one transformer block's forward keeps for its backward: each field is the cache of the
    layer whose output llm.c calls by that name. The comments say what the serial layers keep; the
    parallel engine's layers (``gpulab.engine.parallel``) keep their shards' and what their backward needs."""

    ln1: tuple  # ln_1: normalised input, weight, 1/std
    qkv: tuple  # attn.c_attn: its input (ln1) and weight
    att: tuple  # attention: q, k, v, the softmax, the scale
    attproj: tuple  # attn.c_proj: its input (att) and weight
    ln2: tuple  # ln_2, of residual2 (x after attention)
    fch: tuple  # mlp.c_fc: its input (ln2) and weight
    fch_gelu: tuple  # GELU: its input (fch) and tanh
    fcproj: tuple  # mlp.c_proj: its input (fch_gelu) and weight


class ModelCache(NamedTuple):
    """What the whole forward keeps for the backward (blocks in order)."""

    encoded: tuple  # token embedding lookup (wte)
    blocks: list  # a BlockCache per block
    lnf: tuple  # ln_f
    logits: tuple  # the LM head (tied wte): its input (lnf) and weight


def param_shapes(config: GPTConfig) -> dict[str, tuple]:
    """Every parameter's name and PyTorch-layout shape, in nanoGPT's state-dict order."""
    V, T, C = config.vocab_size, config.block_size, config.n_embd
    shapes = {WTE: (V, C), WPE: (T, C)}
    for i in range(config.n_layer):
        p = f"transformer.h.{i}."
        shapes.update({
            p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
            p + "attn.c_attn.weight": (3 * C, C), p + "attn.c_attn.bias": (3 * C,),
            p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
            p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
            p + "mlp.c_fc.weight": (4 * C, C), p + "mlp.c_fc.bias": (4 * C,),
            p + "mlp.c_proj.weight": (C, 4 * C), p + "mlp.c_proj.bias": (C,),
        })
    shapes.update({"transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)})
    return shapes


def init_params(config: GPTConfig, seed: int = 0) -> dict:
    """nanoGPT's initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2 n_layer)),
    zero biases, LayerNorm weight 1. ``lm_head.weight`` is ``wte`` (tied), so it is not listed."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in param_shapes(config).items():
        if ".ln_" in name or name.startswith("transformer.ln_f"):
            value = np.ones(shape) if name.endswith("weight") else np.zeros(shape)
        elif name.endswith("bias"):
            value = np.zeros(shape)
        else:
            std = 0.02 / math.sqrt(2 * config.n_layer) if name.endswith("c_proj.weight") else 0.02
            value = rng.normal(0.0, std, size=shape)
        params[name] = value.astype(config.dtype)
    return params


def _check_batch(idx, targets, config):
    if idx.ndim != 2:
        raise ValueError(f"idx must be (B, T), got shape {tuple(idx.shape)}")
    if targets is not None and tuple(targets.shape) != tuple(idx.shape):
        raise ValueError(f"targets shape {tuple(targets.shape)} != idx shape {tuple(idx.shape)}")
    if idx.shape[1] > config.block_size:
        raise ValueError(f"sequence length {idx.shape[1]} exceeds block_size {config.block_size}")


def _forward(params, idx, config):
    """Logits (B, T, V) and the caches the backward pass needs, in order."""
    T = idx.shape[1]
    tok, c_tok = L.embedding_forward(idx, params[WTE])  # (B, T, C)
    x = tok + params[WPE][:T]  # (B, T, C), positions broadcast over the batch
    blocks = []
    for i in range(config.n_layer):
        p = f"transformer.h.{i}."
        h, ln1 = L.layernorm_forward(x, params[p + "ln_1.weight"], params[p + "ln_1.bias"])
        qkv, c_qkv = L.linear_forward(h, params[p + "attn.c_attn.weight"], params[p + "attn.c_attn.bias"])
        a, att = L.attention_forward(qkv, config.n_head)  # (B, T, 3C) -> (B, T, C)
        y, attproj = L.linear_forward(a, params[p + "attn.c_proj.weight"], params[p + "attn.c_proj.bias"])
        x = x + y  # residual2
        h, ln2 = L.layernorm_forward(x, params[p + "ln_2.weight"], params[p + "ln_2.bias"])
        f, fch = L.linear_forward(h, params[p + "mlp.c_fc.weight"], params[p + "mlp.c_fc.bias"])
        g, fch_gelu = L.gelu_forward(f)  # (B, T, 4C)
        y, fcproj = L.linear_forward(g, params[p + "mlp.c_proj.weight"], params[p + "mlp.c_proj.bias"])
        x = x + y
        blocks.append(BlockCache(ln1, c_qkv, att, attproj, ln2, fch, fch_gelu, fcproj))
    xf, c_lnf = L.layernorm_forward(x, params["transformer.ln_f.weight"], params["transformer.ln_f.bias"])
    logits, c_head = L.linear_forward(xf, params[WTE])  # tied LM head: (B, T, C) -> (B, T, V)
    return logits, ModelCache(c_tok, blocks, c_lnf, c_head)


def logits(params, idx, config: GPTConfig):
    """Forward pass only: (B, T) token ids -> (B, T, V) logits."""
    idx = array_module(params[WTE]).asarray(idx)
    _check_batch(idx, None, config)
    return _forward(params, idx, config)[0]


def loss_and_grads(params, idx, targets, config: GPTConfig):
    """Mean cross-entropy over all B*T tokens and its gradient for every parameter."""
    xp = array_module(params[WTE])
    idx, targets = xp.asarray(idx), xp.asarray(targets)
    _check_batch(idx, targets, config)
    T = idx.shape[1]
    out, cache = _forward(params, idx, config)
    loss, c_ce = L.cross_entropy_forward(out, targets)

    grads = {}
    dlogits, _ = L.cross_entropy_backward(1.0, c_ce)
    dxf, d = L.linear_backward(dlogits, cache.logits)
    dwte_head = d["weight"]
    dx, d = L.layernorm_backward(dxf, cache.lnf)
    grads["transformer.ln_f.weight"], grads["transformer.ln_f.bias"] = d["weight"], d["bias"]
    for i in reversed(range(config.n_layer)):
        p = f"transformer.h.{i}."
        block = cache.blocks[i]
        dg, d = L.linear_backward(dx, block.fcproj)  # the residual branch gets dx unchanged
        _put(grads, p + "mlp.c_proj", d)
        df, _ = L.gelu_backward(dg, block.fch_gelu)
        dh, d = L.linear_backward(df, block.fch)
        _put(grads, p + "mlp.c_fc", d)
        dh, d = L.layernorm_backward(dh, block.ln2)
        _put(grads, p + "ln_2", d)
        dx = dx + dh
        da, d = L.linear_backward(dx, block.attproj)
        _put(grads, p + "attn.c_proj", d)
        dqkv, _ = L.attention_backward(da, block.att)
        dh, d = L.linear_backward(dqkv, block.qkv)
        _put(grads, p + "attn.c_attn", d)
        dh, d = L.layernorm_backward(dh, block.ln1)
        _put(grads, p + "ln_1", d)
        dx = dx + dh
    dwpe = xp.zeros_like(params[WPE])
    dwpe[:T] = dx.sum(axis=0)  # (T, C): summed over the batch
    grads[WPE] = dwpe
    _, d = L.embedding_backward(dx, cache.encoded)
    grads[WTE] = dwte_head + d["weight"]  # tied weight: LM head + embedding
    return float(loss), {name: grads[name] for name in param_shapes(config)}


def _put(grads, prefix, dparams):
    for key, value in dparams.items():
        grads[f"{prefix}.{key}"] = value
