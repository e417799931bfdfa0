"""The non-Linear layers on sharded activations: LayerNorm, embedding, cross-entropy.

Forward/backward pairs like ``gpulab.engine.gpt.layers``, with the collective
each one needs:

- ``layernorm_*``: the residual stream is split over columns (x: (..., C/col)),
  so the per-token mean, variance and the two backward sums are all-reduced
  over the col group (2 small all-reduces forward, 1 backward).
- ``embedding_*``: the tied ``wte`` block [V/row, C/col] holds a vocabulary
  slice; a rank looks up only the tokens in its slice (zeros otherwise) and
  one all-reduce over row completes every token (Megatron's vocab-parallel
  embedding).
- ``cross_entropy_*``: logits (..., V/row) hold a vocabulary slice; the max,
  the sum of exponentials and the target's logit are all-reduced over row, so
  no rank ever builds the full (M, V) logits.
"""

from __future__ import annotations

from gpulab.backend import array_module
from gpulab.engine.gpt.config import accum_dtype
from gpulab.engine.gpt.layers import LN_EPS, scatter_add
from gpulab.engine.parallel import collectives as coll
from gpulab.engine.parallel.sequence import reduce_scatter_seq


def layernorm_forward(x, w, b, col_comm, n_features: int, eps=LN_EPS):
    xp = array_module(x)
    mean = coll.all_reduce(x.sum(axis=-1), col_comm)[..., None] / n_features  # (..., 1)
    xc = x - mean  # (..., C/col)
    var = coll.all_reduce((xc * xc).sum(axis=-1), col_comm)[..., None] / n_features
    rstd = 1.0 / xp.sqrt(var + eps)
    xhat = xc * rstd
    return xhat * w + b, (xhat, w, rstd, col_comm, n_features)


def layernorm_backward(dout, cache):
    xp = array_module(dout)
    xhat, w, rstd, col_comm, n_features = cache
    c = xhat.shape[-1]
    dxhat = dout * w
    sums = xp.stack([dxhat.sum(axis=-1), (dxhat * xhat).sum(axis=-1)])  # (2, ...) one message
    sums = coll.all_reduce(sums, col_comm) / n_features
    dx = rstd * (dxhat - sums[0][..., None] - xhat * sums[1][..., None])
    dparams = {"weight": (dout * xhat).reshape(-1, c).sum(axis=0),  # partial over depth x data
               "bias": dout.reshape(-1, c).sum(axis=0)}
    return dx, dparams


def embedding_forward(idx, W, vocab_lo: int, row_comm, sequence_parallel: bool = False):
    """idx (b, T) global token ids, W the gathered block [V/row, C/col] -> (b, T, C/col);
    ``sequence_parallel``: reduce-scattered along T instead, (b, T/row, C/col)."""
    xp = array_module(W)
    local = idx - vocab_lo
    mine = (local >= 0) & (local < W.shape[0])  # (b, T): tokens in this rank's vocabulary slice
    out = xp.where(mine[..., None], W[xp.where(mine, local, 0)], 0)  # (b, T, C/col)
    if sequence_parallel:
        out = reduce_scatter_seq(out, row_comm)
    else:
        out = coll.all_reduce(xp.ascontiguousarray(out), row_comm)  # exactly one row rank had each
    return out, (local, mine, W.shape)


def embedding_backward(dout, cache):
    """The block's gradient [V/row, C/col] (no dx: token ids have none)."""
    xp = array_module(dout)
    local, mine, shape = cache
    dW = xp.zeros(shape, dtype=dout.dtype)
    scatter_add(dW, local[mine], dout[mine])  # (n_mine,) rows <- (n_mine, C/col)
    return None, {"weight": dW}


def cross_entropy_forward(logits, targets, vocab_lo: int, row_comm):
    """Summed (not mean) loss over this rank's tokens; logits (b, T, V/row), targets (b, T)."""
    xp = array_module(logits)
    Vl = logits.shape[-1]
    z = logits.reshape(-1, Vl)  # (M, V/row)
    zmax = coll.all_reduce(z.max(axis=-1), row_comm, op="max")  # (M,) max over the full vocab
    e = xp.exp(z - zmax[:, None])
    t = targets.reshape(-1) - vocab_lo
    mine = (t >= 0) & (t < Vl)
    rows = xp.arange(z.shape[0])
    picked = xp.where(mine, z[rows, xp.where(mine, t, 0)] - zmax, 0)  # target logit, if ours
    sums = coll.all_reduce(xp.stack([e.sum(axis=-1), picked]), row_comm)  # (2, M)
    loss_sum = (xp.log(sums[0]) - sums[1]).sum(dtype=accum_dtype(z.dtype))
    return loss_sum, (e / sums[0][:, None], t, mine, logits.shape)


def cross_entropy_backward(scale, cache):
    """d(scale * loss_sum)/dlogits on the local vocabulary slice."""
    xp = array_module(cache[0])
    probs, t, mine, shape = cache
    dlogits = probs.copy()
    rows = xp.arange(t.shape[0])
    dlogits[rows[mine], t[mine]] -= 1.0  # minus one-hot, on the rank that holds the target
    dlogits *= scale
    return dlogits.reshape(shape), {}
