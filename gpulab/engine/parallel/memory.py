"""Memory per rank: what one ``ParallelGPT`` holds, in bytes, by kind.

    report = memory_report(gpt)      # after a forward_backward
    # {"parameters": ..., "gradients": ..., "optimizer": ..., "activations": ...,
    #  "weight_cache": ..., "working_set": ..., "total": ...}

Parameters and gradients are this rank's pieces (a synced gradient lives in its
bucket's flat buffer, ``overlap_grads``: no second copy); the optimizer state is
AdamW's two moments, shaped like the parameters, plus float32 master weights
for float16 models, all in float32 then (``optim.AdamW``);
activations are the arrays the last forward kept for backward (the caches,
counted once each, parameters excluded; with pipeline stages, the most that the
micro-batches in flight held at once: up to ``pipe - stage`` of them in 1F1B,
all ``m`` in GPipe); weight_cache is the most gathered
weight blocks held at once by prefetching and caching (``overlap_weights``):
the memory that those two options trade for communication; working_set is
the most that a block's backward holds at once beside all of those
(``backward_working_set``: gradients of the block's activations and the
temporaries of its GELU, attention and LayerNorm backward; with recomputation,
what backward rebuilds), counted from the sizes of the micro-batch's own cached
arrays.
"""

from __future__ import annotations

import numpy as np

from gpulab.engine.gpt.config import accum_dtype
from gpulab.engine.gpt.model import WPE, WTE

ADAM_MOMENTS = 2  # m and v


def _is_array(x) -> bool:
    return hasattr(x, "nbytes") and hasattr(x, "shape")


def tree_nbytes(tree, skip=()) -> int:
    """Bytes of every distinct array inside nested tuples/lists/dicts, except those in ``skip``
    (views count as their base, once)."""
    seen = {id(_base(a)) for a in skip}
    total = 0
    stack = [tree]
    while stack:
        item = stack.pop()
        if _is_array(item):
            base = _base(item)
            if id(base) not in seen:
                seen.add(id(base))
                total += int(base.nbytes)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (tuple, list)):
            stack.extend(item)
    return total


def _base(a):
    while getattr(a, "base", None) is not None and _is_array(a.base):
        a = a.base
    return a


def optimizer_nbytes(params: dict) -> int:
    """AdamW's state for ``params``: two moments, and a master copy for float16 values, in float32."""
    total = 0
    for p in params.values():
        kept = ADAM_MOMENTS + (1 if p.dtype.itemsize < 4 else 0)
        total += kept * p.size * np.dtype(accum_dtype(p.dtype)).itemsize
    return int(total)


LATER_GRADS = ("mlp.c_fc", "ln_2", "attn.c_proj", "attn.c_attn", "ln_1")  # a block's, after mlp.c_proj's


def backward_working_set(size: dict, grads: dict, *, blocks: int, depth: int, first_stage: bool,
                         last_stage: bool, after_backward: bool = False, recompute: str | None = None) -> int:
    """The most of ``ParallelGPT.stage_backward``'s transient arrays alive at once beside everything
    ``memory_report`` counts, from the sizes (values or bytes, one unit throughout) of one
    micro-batch's arrays on this rank: ``stream`` the residual stream (b, T, C/col; with sequence
    parallelism (b, T/row, C/col)), ``hidden`` the MLP's (b, T, 4C/row), ``head`` one of q, k, v
    (b, T, C/row), ``scores`` the attention's (b, n_head/row, T, T), ``logits`` the LM head's
    (b, T, V/row), ``mlp_block`` an MLP weight block [4C/row, C/col] and ``mlp_shard`` its 1-D
    shard over depth, ``vocab_block`` the wte block [V/row, C/col] (0 where the stage holds no
    wte), ``rebuilt`` one block's caches (``recompute="full"``: backward rebuilds them; else 0),
    ``gathered`` the MLP input all-gathered along the sequence for c_fc's dW (sequence
    parallelism: its cache holds T/row positions; else 0); ``grads``: this rank's gradient of
    each part of a block (``LATER_GRADS``, weight and bias), of wpe and of wte (0 where not held).

    Counted in the last block to run backward in the backward that runs beside the most
    micro-batches' caches (``after_backward``: another backward ran before it, so every gradient
    but wte's, summed after the last, is held already), and only arrays that are certainly
    alive: names still bound, operands and results of the operation running, none that numpy's
    temporary elision may reuse. Gradients not produced yet at a moment are taken off it (they
    are counted as gradients, but may not be held yet): a lower bound of what the backward
    holds, not an estimate above it. ``recompute="full"``: through the whole backward, the
    rebuilt caches and the block's recomputed output (bound, unused); ``"selective"``: from the
    attention's backward to the block's end, the rebuilt probabilities and attention output."""
    X, H, Q, S = size["stream"], size["hidden"], size["head"], size["scores"]
    W, E, shard = size["mlp_block"], size["vocab_block"], size["mlp_shard"]
    # through every block: dx (the residual's gradient) and the stage's incoming gradient, dy from
    # the next stage, or on the last stage the loss's dlogits, ln_f's input gradient and dwte;
    # after a backward, the wte block's gradient summed over the micro-batches so far
    held = X + (size["logits"] + X + E if last_stage else X) + (E if after_backward else 0)
    held += size["rebuilt"] + X if recompute == "full" else 0
    rebuilt_attention = S + Q if recompute == "selective" else 0
    stale = blocks > 1  # the previous block's df, da, dqkv, dh are still bound when the next starts
    mlp = 2 * H  # dg and df (the MLP's input gradients), bound until the next block

    def later(part: str | None) -> int:  # gradients not yet produced when ``part``'s are next
        block = 0 if after_backward or part is None else sum(grads[p] for p in LATER_GRADS[LATER_GRADS.index(part):])
        wpe = grads["wpe"] if first_stage and not after_backward and part is not None else 0
        return block + wpe + grads["wte"]

    moments = (
        3 * H + stale * (H + 4 * Q + X) - later("mlp.c_fc"),  # GELU: dg, du and the result
        mlp + W + depth * shard + (shard if depth > 1 else 0) + size["gathered"] + stale * (4 * Q + X)
        - later("mlp.c_fc"),  # c_fc's dW: the block, padded to depth shards, the shard reduce-scattered
        mlp + 4 * X + stale * 4 * Q - later("ln_2"),  # ln_2: c_fc's dX, dxhat and the two terms of its dx
        mlp + X + 2 * Q + 2 * S + stale * 3 * Q + rebuilt_attention - later("attn.c_attn"),  # attention:
        # ln_2's dh, da, dv, datt and datt * att; at its end: da, datt, dq, dk, dv and their concatenation
        mlp + X + 7 * Q + S + stale * 3 * Q + rebuilt_attention - later("attn.c_attn"),
        mlp + 4 * Q + 4 * X + rebuilt_attention - later("ln_1"),  # ln_1: da, dqkv; c_attn's dX, dxhat, two terms
        mlp + 4 * Q + X + (E + E * last_stage if first_stage else 0) - later(None),  # embedding: its dW
    )
    return held + max(0, *moments)


def block_sizes(gpt, block) -> dict:
    """Bytes of one micro-batch's arrays on this rank, read from a block's ``BlockCache``: the
    residual stream, the MLP's hidden, one attention head group (q, k or v), the attention
    probabilities (rebuilt in backward with ``recompute="selective"``, whose cache keeps QKV), and
    the cache itself (what ``recompute="full"`` rebuilds in backward)."""
    a = block.attproj[0]  # attention's output (b, T, C/row), the size of q, k and v
    heads = gpt.config.n_head // gpt.mesh.shape.row
    scores = a.shape[0] * heads * a.shape[1] ** 2 * a.itemsize if gpt.recompute == "selective" else block.att[3].nbytes
    return {"stream": block.ln1[0].nbytes, "hidden": block.fch_gelu[0].nbytes, "head": a.nbytes, "scores": scores,
            "cache": tree_nbytes(block, skip=gpt.params.values())}


def working_set_of(gpt, cache, c_ce, after_backward: bool) -> int:
    """``backward_working_set`` in bytes for ``gpt``'s stage and one micro-batch's ``ModelCache``
    (and the last stage's cross-entropy cache ``c_ce``), read from the sizes of its arrays (with
    ``recompute="full"``, which keeps each block's input only, of the block caches that forward
    built and dropped: ``gpt.rebuilt_block``)."""
    if not cache.blocks:
        return 0
    full = gpt.recompute == "full"
    sizes = gpt.rebuilt_block if full else block_sizes(gpt, cache.blocks[0])
    item = np.dtype(gpt.config.dtype).itemsize
    prefix = f"transformer.h.{gpt.layers[0]}."
    fc, wte = gpt.linears[prefix + "mlp.c_fc.weight"], gpt.linears.get(WTE)
    size = {**sizes, "logits": 0 if c_ce is None else c_ce[0].nbytes,
            "mlp_block": fc.n_local * fc.k_local * item, "mlp_shard": fc.shard_numel * item,
            "vocab_block": 0 if wte is None else wte.n_local * wte.k_local * item,
            "rebuilt": sizes["cache"] if full else 0,
            "gathered": sizes["stream"] * gpt.mesh.shape.row if gpt.sequence_parallel else 0}
    grads = {part: gpt.params[prefix + part + ".weight"].nbytes + gpt.params[prefix + part + ".bias"].nbytes
             for part in LATER_GRADS}
    grads.update({n: gpt.params[name].nbytes if name in gpt.params else 0 for n, name in (("wpe", WPE), ("wte", WTE))})
    m = gpt.mesh
    return backward_working_set(size, grads, blocks=len(cache.blocks), depth=m.shape.depth,
                                first_stage=m.first_stage, last_stage=m.last_stage, after_backward=after_backward,
                                recompute=gpt.recompute)


def memory_report(gpt, opt=None) -> dict:
    """``opt``: an optimizer that says its own state's bytes (``state_nbytes``: the distributed
    optimizer keeps 1/data of it); default AdamW on every piece."""
    params = sum(int(p.nbytes) for p in gpt.params.values())
    grads = sum(int(g.nbytes) for g in gpt.grads.values()) if gpt.grads else params
    state = opt.state_nbytes() if hasattr(opt, "state_nbytes") else optimizer_nbytes(gpt.params)
    report = {"parameters": params, "gradients": grads, "optimizer": state,
              "activations": int(gpt.memory.get("activations", 0)),
              "weight_cache": int(gpt.memory.get("weight_cache", 0)),
              "working_set": int(gpt.memory.get("working_set", 0))}
    report["total"] = sum(report.values())
    return report
