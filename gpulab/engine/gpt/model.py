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

import numpy as np

from gpulab.backend import array_module
from gpulab.engine.gpt import layers as L
from gpulab.engine.gpt.config import GPTConfig

WTE = "transformer.wte.weight"
WPE = "transformer.wpe.weight"


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
        h, c1 = L.layernorm_forward(x, params[p + "ln_1.weight"], params[p + "ln_1.bias"])
        qkv, c2 = L.linear_forward(h, params[p + "attn.c_attn.weight"], params[p + "attn.c_attn.bias"])
        a, c3 = L.attention_forward(qkv, config.n_head)  # (B, T, 3C) -> (B, T, C)
        y, c4 = L.linear_forward(a, params[p + "attn.c_proj.weight"], params[p + "attn.c_proj.bias"])
        x = x + y
        h, c5 = L.layernorm_forward(x, params[p + "ln_2.weight"], params[p + "ln_2.bias"])
        f, c6 = L.linear_forward(h, params[p + "mlp.c_fc.weight"], params[p + "mlp.c_fc.bias"])
        g, c7 = L.gelu_forward(f)  # (B, T, 4C)
        y, c8 = L.linear_forward(g, params[p + "mlp.c_proj.weight"], params[p + "mlp.c_proj.bias"])
        x = x + y
        blocks.append((c1, c2, c3, c4, c5, c6, c7, c8))
    xf, c_lnf = L.layernorm_forward(x, params["transformer.ln_f.weight"], params["transformer.ln_f.bias"])
    logits, c_head = L.linear_forward(xf, params[WTE])  # tied LM head: (B, T, C) -> (B, T, V)
    return logits, (c_tok, blocks, c_lnf, c_head)


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
    out, (c_tok, blocks, c_lnf, c_head) = _forward(params, idx, config)
    loss, c_ce = L.cross_entropy_forward(out, targets)

    grads = {}
    dlogits, _ = L.cross_entropy_backward(1.0, c_ce)
    dxf, d = L.linear_backward(dlogits, c_head)
    dwte_head = d["weight"]
    dx, d = L.layernorm_backward(dxf, c_lnf)
    grads["transformer.ln_f.weight"], grads["transformer.ln_f.bias"] = d["weight"], d["bias"]
    for i in reversed(range(config.n_layer)):
        p = f"transformer.h.{i}."
        c1, c2, c3, c4, c5, c6, c7, c8 = blocks[i]
        dg, d = L.linear_backward(dx, c8)  # the residual branch gets dx unchanged
        _put(grads, p + "mlp.c_proj", d)
        df, _ = L.gelu_backward(dg, c7)
        dh, d = L.linear_backward(df, c6)
        _put(grads, p + "mlp.c_fc", d)
        dh, d = L.layernorm_backward(dh, c5)
        _put(grads, p + "ln_2", d)
        dx = dx + dh
        da, d = L.linear_backward(dx, c4)
        _put(grads, p + "attn.c_proj", d)
        dqkv, _ = L.attention_backward(da, c3)
        dh, d = L.linear_backward(dqkv, c2)
        _put(grads, p + "attn.c_attn", d)
        dh, d = L.layernorm_backward(dh, c1)
        _put(grads, p + "ln_1", d)
        dx = dx + dh
    dwpe = xp.zeros_like(params[WPE])
    dwpe[:T] = dx.sum(axis=0)  # (T, C): summed over the batch
    grads[WPE] = dwpe
    _, d = L.embedding_backward(dx, c_tok)
    grads[WTE] = dwte_head + d["weight"]  # tied weight: LM head + embedding
    return float(loss), {name: grads[name] for name in param_shapes(config)}


def _put(grads, prefix, dparams):
    for key, value in dparams.items():
        grads[f"{prefix}.{key}"] = value
