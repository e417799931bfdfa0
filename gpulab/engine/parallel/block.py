"""One transformer block of ``ParallelGPT`` on the grid: its forward (and what it keeps), its backward.

    out, cache = forward(gpt, i, x, fetch.get)        # block i on the residual stream x
    dx = backward(gpt, i, dout, cache, linear, put)   # the gradient of its input; weights' to ``put``

``ParallelGPT`` runs them per block (``_block_forward`` / ``_block_backward``);
with ``recompute="full"`` it calls ``forward`` again in backward from the
block's saved input, with ``"selective"`` the cache holds QKV in place of the
attention probabilities and ``backward`` rebuilds them.
"""

from __future__ import annotations

from gpulab.engine.gpt import layers as L
from gpulab.engine.gpt.model import BlockCache
from gpulab.engine.parallel import tp_layers as TP
from gpulab.engine.parallel.timeline import kernel


def forward(gpt, i: int, x, get):
    """Block ``i`` of ``gpt`` (a ``ParallelGPT``) on the residual stream ``x``: its output and its
    ``BlockCache`` (with
    ``recompute="selective"`` the attention field keeps only the QKV output; the T x T
    probabilities are rebuilt in backward). ``get``: the gathered weight of a name."""
    params, m, lin, C = gpt.params, gpt.mesh, gpt.linears, gpt.config.n_embd

    def linear(name, x):
        return lin[name + ".weight"].forward(x, params[name + ".weight"], params[name + ".bias"],
                                             W=get(name + ".weight"))

    p = f"transformer.h.{i}."
    h, ln1 = TP.layernorm_forward(x, params[p + "ln_1.weight"], params[p + "ln_1.bias"], m.col_comm, C)
    qkv, c_qkv = linear(p + "attn.c_attn", h)  # (b, T, 3C/R)
    with kernel(f"h.{i}.attn fwd"):
        a, att = L.attention_forward(qkv, gpt.config.n_head // m.shape.row)  # (b, T, C/R)
    if gpt.recompute == "selective":
        att = qkv  # Korthikanti et al.'s selective recomputation: drop softmax(QK^T), keep QKV
    y, attproj = linear(p + "attn.c_proj", a)  # (b, T, C/c)
    x = x + y  # residual2
    h, ln2 = TP.layernorm_forward(x, params[p + "ln_2.weight"], params[p + "ln_2.bias"], m.col_comm, C)
    f, fch = linear(p + "mlp.c_fc", h)  # (b, T, 4C/R)
    with kernel(f"h.{i}.gelu fwd"):
        g, fch_gelu = L.gelu_forward(f)
    y, fcproj = linear(p + "mlp.c_proj", g)  # (b, T, C/c)
    return x + y, BlockCache(ln1, c_qkv, att, attproj, ln2, fch, fch_gelu, fcproj)


def backward(gpt, i: int, dx, block: BlockCache, linear, put):
    """Block ``i``'s backward: the gradient of its input from that of its output ``dx``."""
    p = f"transformer.h.{i}."
    dg = linear(p + "mlp.c_proj", dx, block.fcproj)
    with kernel(f"h.{i}.gelu bwd"):
        df, _ = L.gelu_backward(dg, block.fch_gelu)
    dh = linear(p + "mlp.c_fc", df, block.fch)
    dh, d = TP.layernorm_backward(dh, block.ln2)
    put(p + "ln_2", d)
    dx = dx + dh
    da = linear(p + "attn.c_proj", dx, block.attproj)
    att = block.att
    if gpt.recompute == "selective":  # att holds the QKV output: rebuild the probabilities
        with kernel(f"h.{i}.attn recompute"):
            _, att = L.attention_forward(att, gpt.config.n_head // gpt.mesh.shape.row)
    with kernel(f"h.{i}.attn bwd"):
        dqkv, _ = L.attention_backward(da, att)
    dh = linear(p + "attn.c_attn", dqkv, block.qkv)
    dh, d = TP.layernorm_backward(dh, block.ln1)
    put(p + "ln_1", d)
    return dx + dh
