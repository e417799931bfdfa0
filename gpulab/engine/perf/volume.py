"""Bytes each collective moves, per layer: one ``ParallelGPT.forward_backward`` predicted.

    rows = collective_calls(cfg, (R, C, D, P), batch_size=B, seq_len=T)
    totals(rows, by="layer")        # {"h.0.attn.c_attn": bytes, ...}

Every row is one collective call on one rank, in the order the engine issues
it (the tests check this list against ``collectives.trace()`` of a real run),
with ``nbytes`` (the full buffer: the summed array, the gathered block, the
array to reduce-scatter) and ``wire_bytes``, what each rank sends with a ring
algorithm: 2(p-1)/p * n for all-reduce, (p-1)/p * n for all-gather and
reduce-scatter. Groups of one member cost nothing and are left out.
``grad_norm=True`` adds the optimizer's norm all-reduce (``ParallelGPT.grad_norm``).
``distributed_optimizer=True`` (``ParallelGPT(..., distributed_optimizer=True)``, ZeRO-1): each
gradient bucket's all-reduce becomes a reduce-scatter, and the optimizer's step all-gathers the
same (zero-padded to a multiple of the group) buffer of parameters: the all-reduce's bytes, half
in each.

``overlap`` (``gpulab.engine.parallel.overlap.Overlap``) changes what is sent, not only
when: ``cache`` drops every backward all-gather and the LM head's forward one,
``buckets`` turns each gradient group's one all-reduce into one per bucket.
Rows stay in the order of the computation they belong to; with overlap the
engine issues some of them earlier (prefetch, buckets), so compare as multisets.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from gpulab.engine.gpt.config import accum_dtype
from gpulab.engine.parallel.overlap_grads import group_plans
from gpulab.engine.parallel.shards import param_specs, piece_numel, shard_numel


def _wire(op: str, p: int, nbytes: int) -> float:
    return (2 if op == "all_reduce" else 1) * (p - 1) / p * nbytes


def collective_calls(config, shape, batch_size: int, seq_len: int | None = None,
                     grad_norm: bool = False, overlap=None, distributed_optimizer: bool = False) -> list[dict]:
    cache = overlap is not None and overlap.cache
    buckets = overlap.bucket_bytes if overlap is not None and overlap.buckets else None
    R, Cc, D, P = shape
    T = seq_len or config.block_size
    C, V, L = config.n_embd, config.vocab_size, config.n_layer
    item = np.dtype(config.dtype).itemsize
    m = batch_size // (D * P) * T  # tokens on one rank
    sizes = {"row": R, "col": Cc, "depth": D, "data": P, "batch": D * P, "tensor": R * Cc * D}
    rows = []

    def add(layer, phase, op, group, n_values, itemsize=item):
        p = sizes[group]
        if p > 1:
            nbytes = int(n_values) * itemsize
            rows.append({"layer": layer, "phase": phase, "op": op, "group": group, "group_size": p,
                         "nbytes": nbytes, "wire_bytes": _wire(op, p, nbytes)})

    def gathered(n, k, transposed=False):  # values in the all-gathered (padded) weight
        return D * shard_numel(n, k, shape, transposed)

    def linear_fwd(layer, n, k, transposed):
        if not (cache and layer == "lm_head"):  # the cache still holds wte from the embedding
            add(layer, "forward", "all_gather", "depth", gathered(n, k, transposed))
        n_local = n // (Cc if transposed else R)
        add(layer, "forward", "all_reduce", "row" if transposed else "col", m * n_local)

    def linear_bwd(layer, n, k, transposed, scatter=True):
        if not cache:
            add(layer, "backward", "all_gather", "depth", gathered(n, k, transposed))
        k_local = k // (R if transposed else Cc)
        add(layer, "backward", "all_reduce", "col" if transposed else "row", m * k_local)
        if scatter:
            add(layer, "backward", "reduce_scatter", "depth", gathered(n, k, transposed))

    def ln(layer, phase):
        for _ in range(2 if phase == "forward" else 1):  # fwd: mean, variance; bwd: 2 sums at once
            add(layer, phase, "all_reduce", "col", m * (1 if phase == "forward" else 2))

    add("wte", "forward", "all_gather", "depth", gathered(V, C))
    add("wte", "forward", "all_reduce", "row", m * C // Cc)
    for i in range(L):
        h = f"h.{i}."
        ln(h + "ln_1", "forward")
        linear_fwd(h + "attn.c_attn", 3 * C, C, False)
        linear_fwd(h + "attn.c_proj", C, C, True)
        ln(h + "ln_2", "forward")
        linear_fwd(h + "mlp.c_fc", 4 * C, C, False)
        linear_fwd(h + "mlp.c_proj", C, 4 * C, True)
    ln("ln_f", "forward")
    linear_fwd("lm_head", V, C, False)
    add("loss", "forward", "all_reduce", "row", m)  # max logit per token
    add("loss", "forward", "all_reduce", "row", 2 * m)  # sum of exp, target logit
    linear_bwd("lm_head", V, C, False, scatter=False)
    ln("ln_f", "backward")
    for i in reversed(range(L)):
        h = f"h.{i}."
        linear_bwd(h + "mlp.c_proj", C, 4 * C, True)
        linear_bwd(h + "mlp.c_fc", 4 * C, C, False)
        ln(h + "ln_2", "backward")
        linear_bwd(h + "attn.c_proj", C, C, True)
        linear_bwd(h + "attn.c_attn", 3 * C, C, False)
        ln(h + "ln_1", "backward")
    add("wte", "backward", "reduce_scatter", "depth", gathered(V, C))  # LM head + embedding

    specs = param_specs(config)
    buffers = []  # (group, values) of each bucket
    for group, plan in group_plans(config, shape, buckets, specs).items():  # data, then batch
        for bucket in plan:
            values = sum(piece_numel(specs[n], shape) for n in bucket)
            buffers.append((group, padded(values, sizes[group]) if distributed_optimizer else values))
    for group, values in buffers:
        add("grads", "grad-sync", "reduce_scatter" if distributed_optimizer else "all_reduce", group, values)
    # the reported mean loss, summed in float32 at least (accum_dtype)
    add("loss", "grad-sync", "all_reduce", "batch", 1, itemsize=np.dtype(accum_dtype(config.dtype)).itemsize)
    if grad_norm:
        add("grad_norm", "optimizer", "all_reduce", "tensor", 1, itemsize=8)
        if distributed_optimizer:  # the data replicas hold other slices of the gradients
            add("grad_norm", "optimizer", "all_reduce", "data", 1, itemsize=8)
    if distributed_optimizer:
        for group, values in buffers:
            add("params", "optimizer", "all_gather", group, values)
    return rows


def padded(values: int, group_size: int) -> int:
    """A bucket's values rounded up to a multiple of its group: what its reduce-scatter splits evenly."""
    return -(-values // group_size) * group_size


def totals(rows: list[dict], by: str = "layer", value: str = "wire_bytes") -> dict:
    """Sum ``value`` over rows grouped by a key ("layer", "group", "op", "phase")."""
    out = defaultdict(float)
    for row in rows:
        out[row[by]] += row[value]
    return dict(out)
