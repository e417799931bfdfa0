"""The GPT's layers as forward/backward function pairs (serial, backend-neutral).

Each layer is ``x_forward(...) -> (out, cache)`` and ``x_backward(dout, cache)
-> (dx, dparams)``, as in llm.c: the backward pass is written by hand and calls
nothing but array arithmetic, so it runs on numpy or CuPy arrays alike (the
array module comes from the inputs). Gradients carry a ``d`` prefix.

Shape legend: B batch, T sequence, C n_embd, V vocab, nh heads, hs = C / nh.
The parallel engine reuses ``attention_*`` and ``gelu_*`` unchanged on its
local shards (a rank's heads, a rank's hidden features).
"""

from __future__ import annotations

import math

from gpulab.backend import array_module
from gpulab.engine.gpt.config import accum_dtype

LN_EPS = 1e-5
_GELU_C = math.sqrt(2.0 / math.pi)


# --- Linear: y = x W^T + b, W in PyTorch layout [n_out, k_in] -------------------------------

def linear_forward(x, w, b=None):
    out = x @ w.T  # (..., k) @ (k, n) -> (..., n)
    if b is not None:
        out = out + b
    return out, (x, w, b is not None)


def linear_backward(dout, cache):
    x, w, has_bias = cache
    n, k = w.shape
    dx = dout @ w  # (..., n) @ (n, k) -> (..., k)
    dparams = {"weight": dout.reshape(-1, n).T @ x.reshape(-1, k)}  # (n, M) @ (M, k)
    if has_bias:
        dparams["bias"] = dout.reshape(-1, n).sum(axis=0)
    return dx, dparams


# --- LayerNorm over the last axis ---------------------------------------------------------------

def layernorm_forward(x, w, b, eps=LN_EPS):
    xp = array_module(x)
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    xc = x - mean
    var = (xc * xc).mean(axis=-1, keepdims=True)  # biased variance, as PyTorch
    rstd = 1.0 / xp.sqrt(var + eps)
    xhat = xc * rstd  # (..., C)
    return xhat * w + b, (xhat, w, rstd)


def layernorm_backward(dout, cache):
    xhat, w, rstd = cache
    c = xhat.shape[-1]
    dxhat = dout * w
    # d/dx of (x - mean) * rstd: remove the gradient's mean and its projection on xhat
    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    dparams = {"weight": (dout * xhat).reshape(-1, c).sum(axis=0),
               "bias": dout.reshape(-1, c).sum(axis=0)}
    return dx, dparams


# --- GELU, tanh approximation (GPT-2's "gelu_new") --------------------------------------------

def gelu_forward(x):
    xp = array_module(x)
    u = x * x  # in place from here: fewer temporaries (and page faults); x*x, not x**3 (pow is slow)
    u *= 0.044715
    u += 1.0
    u *= x
    u *= _GELU_C
    t = xp.tanh(u, out=u)  # tanh(c (x + 0.044715 x^3))
    out = t + 1.0
    out *= x
    out *= 0.5
    return out, (x, t)


def gelu_backward(dout, cache):
    xp = array_module(dout)
    x, t = cache
    du = x * x
    du *= 3 * 0.044715
    du += 1.0  # d(x + 0.044715 x^3)/dx
    g = t * t
    xp.subtract(1.0, g, out=g)  # tanh' = 1 - t^2
    g *= x
    g *= du
    g *= _GELU_C
    g += t
    g += 1.0
    g *= 0.5  # d/dx of 0.5 x (1 + t) = 0.5 (1 + t) + 0.5 x (1 - t^2) c du
    g *= dout
    return g, {}


# --- Causal multi-head self-attention (the part between c_attn and c_proj) ----------------------

_MASKS: dict = {}


def _causal_mask(xp, T: int, dtype):
    """(T, T) additive mask, -inf above the diagonal, built once per (backend, T, dtype)."""
    key = (xp.__name__, T, str(dtype))
    if key not in _MASKS:
        _MASKS[key] = xp.where(xp.triu(xp.ones((T, T), dtype=bool), k=1), -xp.inf, 0.0).astype(dtype)
    return _MASKS[key]


def attention_forward(qkv, n_head):
    """qkv (B, T, 3C) laid out [q | k | v] -> y (B, T, C), heads concatenated."""
    xp = array_module(qkv)
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head

    def heads(a):  # (B, T, C) -> (B, nh, T, hs)
        return a.reshape(B, T, n_head, hs).transpose(0, 2, 1, 3)

    q, k, v = heads(qkv[..., :C]), heads(qkv[..., C:2 * C]), heads(qkv[..., 2 * C:])
    scale = 1.0 / math.sqrt(hs)
    scores = q @ k.transpose(0, 1, 3, 2)  # (B, nh, T, T); in place from here (one T x T buffer)
    scores *= scale
    scores += _causal_mask(xp, T, scores.dtype)  # -inf above the diagonal: t sees only s <= t
    scores -= scores.max(axis=-1, keepdims=True)  # stable softmax
    att = xp.exp(scores, out=scores)
    att /= att.sum(axis=-1, keepdims=True)  # (B, nh, T, T)
    y = att @ v  # (B, nh, T, hs)
    y = y.transpose(0, 2, 1, 3).reshape(B, T, C)  # re-assemble heads side by side
    return y, (q, k, v, att, scale)


def attention_backward(dout, cache):
    xp = array_module(dout)
    q, k, v, att, scale = cache
    B, nh, T, hs = q.shape
    dy = dout.reshape(B, T, nh, hs).transpose(0, 2, 1, 3)  # (B, nh, T, hs)
    datt = dy @ v.transpose(0, 1, 3, 2)  # (B, nh, T, T)
    dv = att.transpose(0, 1, 3, 2) @ dy  # (B, nh, T, hs)
    # softmax backward; masked entries have att == 0, so they get no gradient
    datt -= (datt * att).sum(axis=-1, keepdims=True)
    datt *= att
    datt *= scale
    dscores = datt
    dq = dscores @ k  # (B, nh, T, hs)
    dk = dscores.transpose(0, 1, 3, 2) @ q

    def merge(a):  # (B, nh, T, hs) -> (B, T, C)
        return a.transpose(0, 2, 1, 3).reshape(B, T, nh * hs)

    return xp.concatenate([merge(dq), merge(dk), merge(dv)], axis=-1), {}  # (B, T, 3C)


# --- Embedding lookup ---------------------------------------------------------------------------

def embedding_forward(idx, w):
    return w[idx], (idx, w.shape)  # (B, T) -> (B, T, C)


def embedding_backward(dout, cache):
    idx, shape = cache
    xp = array_module(dout)
    dw = xp.zeros(shape, dtype=dout.dtype)
    scatter_add(dw, idx.reshape(-1), dout.reshape(-1, shape[1]))  # repeated tokens add up
    return None, {"weight": dw}


def scatter_add(target, rows, values):
    """target[rows] += values, accumulating repeated rows (``add.at``: numpy, CuPy >= 13)."""
    array_module(target).add.at(target, rows, values)


# --- Softmax cross-entropy, mean over all B*T tokens --------------------------------------------

def cross_entropy_forward(logits, targets):
    xp = array_module(logits)
    V = logits.shape[-1]
    z = logits.reshape(-1, V)
    z = z - z.max(axis=-1, keepdims=True)  # (M, V)
    e = xp.exp(z)
    sumexp = e.sum(axis=-1)  # (M,)
    t = targets.reshape(-1)
    picked = z[xp.arange(z.shape[0]), t]  # (M,) logit of the right token
    loss = (xp.log(sumexp) - picked).mean(dtype=accum_dtype(z.dtype))
    return loss, (e / sumexp[:, None], t, logits.shape)


def cross_entropy_backward(dloss, cache):
    xp = array_module(cache[0])
    probs, t, shape = cache
    dlogits = probs.copy()
    dlogits[xp.arange(t.shape[0]), t] -= 1.0  # softmax minus one-hot
    dlogits *= dloss / t.shape[0]
    return dlogits.reshape(shape), {}
