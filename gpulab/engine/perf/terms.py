"""What one iteration sends and holds on one rank, for any model size, fast: the performance model's inputs.

    rows = comm_rows(cfg, (R, C, D, P), batch_size=B, seq_len=T, overlap=ov)
    # [{"layer": "block.attn.c_attn", "phase": "backward", "op": "all_reduce", "group": "row",
    #   "group_size": 2, "nbytes": ..., "count": n_layer, "kind": "dX"}, ...]
    memory_terms(cfg, shape, B, T, value_bytes=2, state_bytes_per_param=16, overlap=ov)

``comm_rows`` is ``volume.collective_calls`` with the transformer blocks
folded: every block sends the same, so one block's rows carry
``count = n_layer`` (the 640B model's 5000 calls become 40 rows); the
gradient all-reduces after backward are summed from the parameter pieces
directly. ``kind`` says what may hide a call when overlap is on: "dX" (the
dW matmul of the same layer), "RS" (the next layer's backward), "AG" (the
previous layer's compute, when prefetched), "DP" (the rest of backward, in
buckets); None: nothing, the result is needed at once. The overlap switches
that make them so: ``oar`` (dX), ``ors`` (RS), ``oag`` (AG), ``buckets`` (DP).

Per rank, for the tokens M = B T / (D P) it computes, these volumes are
AxoNN's (Singh et al.; docs/engine_model.md states them) derived for this engine: a plain layer
[n, k] all-reduces M n/R values over col forward and M k/C over row backward;
a transposed layer [n, k] sums M n/C over row forward and M k/R over col
backward, so for FC2 ([C, 4C]) the factor 4 belongs to the backward col
term. AxoNN's comm_model.py puts K on the forward (row) term of transposed
layers, which is the bug ``axonn_layer_volumes(..., axonn_bug=True)``
reproduces; ``tests/engine/test_perfmodel.py`` checks the derivation
against the bytes a real run sends.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from gpulab.engine.gpt.config import GPTConfig
from gpulab.engine.gpt.model import WPE, WTE
from gpulab.engine.parallel.pipeline import stage_layers
from gpulab.engine.parallel.shards import param_specs, piece_numel
from gpulab.engine.perf.volume import collective_calls, padded

_GROUP_STRIDE = {"col": lambda R, C, D: 1, "row": lambda R, C, D: C, "depth": lambda R, C, D: R * C,
                 "data": lambda R, C, D: R * C * D, "batch": lambda R, C, D: R * C,
                 "tensor": lambda R, C, D: 1}


OPTIMIZER_BYTES = 12  # of the 16 per parameter: fp32 master weight, momentum, variance


def state_bytes(per_param: int, optimizer_shards: int = 1) -> float:
    """Bytes of state per parameter when the optimizer's part is split over ``optimizer_shards`` (ZeRO-1)."""
    return per_param - OPTIMIZER_BYTES * (1 - 1 / optimizer_shards)


def stride(group: str, shape) -> int:
    """How many ranks apart the members of a group sit (AxoNN's layout: col innermost)."""
    R, C, D, _ = shape
    return _GROUP_STRIDE[group](R, C, D)


def _kind(row: dict, overlap) -> str | None:
    if overlap is None:
        return None
    if row["op"] == "all_gather" and row["phase"] == "optimizer":
        return None  # ZeRO-1's parameters, gathered in the optimizer step: backward is over, nothing runs beside
    if row["op"] == "all_gather" and overlap.oag:
        return "AG"
    if row["phase"] == "backward" and not row["layer"].split(".")[-1].startswith("ln_"):
        if row["op"] == "reduce_scatter" and overlap.ors:
            return "RS"
        if row["op"] == "all_reduce" and overlap.oar:
            return "dX"
    if row["phase"] == "grad-sync" and row["layer"] == "grads" and overlap.buckets:
        return "DP"
    return None


def comm_rows(config, shape, batch_size: int, seq_len: int | None = None, overlap=None,
              grad_norm: bool = True, distributed_optimizer: bool = False) -> list[dict]:
    """One iteration's collectives on one rank, blocks folded (``count``), with overlap ``kind``;
    ``distributed_optimizer``: the gradients reduce-scattered and the parameters all-gathered."""
    rows = _comm_rows(config, tuple(shape), batch_size, seq_len or config.block_size, overlap, grad_norm,
                      distributed_optimizer)
    return [dict(r) for r in rows]


# a search (gpulab model, compare) predicts the same (model, grid, batch) many times over
@functools.lru_cache(maxsize=4096)
def _comm_rows(config, shape, batch_size: int, T: int, overlap, grad_norm: bool,
               distributed_optimizer: bool) -> tuple[dict, ...]:
    one = GPTConfig(**{**config.to_dict(), "n_layer": 1})
    rows = []
    for row in collective_calls(one, shape, batch_size, T, grad_norm=grad_norm,
                                distributed_optimizer=distributed_optimizer):
        if row["layer"] in ("grads", "params"):
            continue  # summed below for the real number of layers
        block = row["layer"].startswith("h.0.")
        rows.append({**row, "layer": row["layer"].replace("h.0.", "block."),
                     "count": config.n_layer if block else 1})
    rows = [r for r in rows if not (overlap is not None and overlap.cache and r["op"] == "all_gather"
                                    and (r["phase"] == "backward" or r["layer"] == "lm_head"))]
    rows += _grad_sync_rows(config, shape, overlap, distributed_optimizer)
    for r in rows:
        r["kind"] = _kind(r, overlap)
        r["stride"] = stride(r["group"], shape)
    return tuple(rows)


def local_params(config, shape, pipe: int = 1, stage: int = 0) -> dict[str, int]:
    """Values one rank stores: weight shards (summed over data) and copied pieces (over depth x data);
    with ``pipe`` stages, those of ``stage`` (its blocks; wte on the first and last, wpe on the
    first, ln_f on the last: ``pipeline.stage_params``)."""
    return dict(_local_params(config, tuple(shape), pipe, stage))


@functools.lru_cache(maxsize=4096)
def _local_params(config, shape, pipe: int, stage: int) -> dict[str, int]:
    one = GPTConfig(**{**config.to_dict(), "n_layer": 1})
    first, last = stage == 0, stage == pipe - 1
    held = {WTE: first or last, WPE: first}
    blocks = len(stage_layers(config.n_layer, pipe, stage))
    out = {"weight": 0, "copied": 0}
    for name, spec in param_specs(one).items():
        times = blocks if ".h.0." in name else int(held.get(name, last))  # else: ln_f
        out["weight" if spec.kind == "weight" else "copied"] += piece_numel(spec, shape) * times
    return out


def _grad_sync_rows(config, shape, overlap, distributed_optimizer: bool = False) -> list[dict]:
    R, C, D, P = shape
    item = np.dtype(config.dtype).itemsize
    sizes = {"data": P, "batch": D * P}
    rows = []
    for group, n_values in zip(("data", "batch"), local_params(config, shape).values()):
        p = sizes[group]
        if p == 1:
            continue
        n_buckets = max(1, math.ceil(n_values * item / overlap.bucket_bytes)) if overlap and overlap.buckets else 1
        bucket = dict(group=group, group_size=p, count=n_buckets)
        if not distributed_optimizer:
            rows.append({"layer": "grads", "phase": "grad-sync", "op": "all_reduce",
                         "nbytes": n_values * item / n_buckets, **bucket})
            continue
        nbytes = padded(math.ceil(n_values / n_buckets), p) * item  # each bucket padded to split evenly
        rows += [{"layer": "grads", "phase": "grad-sync", "op": "reduce_scatter", "nbytes": nbytes, **bucket},
                 {"layer": "params", "phase": "optimizer", "op": "all_gather", "nbytes": nbytes, **bucket}]
    return rows


def full_recompute(recompute) -> bool:
    """Does ``recompute`` (False/None, True or "full", "selective") keep only each block's input?"""
    return recompute is True or recompute == "full"


def activation_values(config, shape, batch_size: int, seq_len: int | None = None,
                      recompute: bool | str | None = False, flash_attention: bool = False, *,
                      layers: int | None = None, last: bool = True, sequence_parallel: bool = False,
                      rebuilt: bool = True) -> float:
    """Values a rank keeps from forward for backward (the engine's caches; see memory.py).
    ``flash_attention``, or ``recompute="selective"`` (the engine keeps the QKV output, which the
    caches hold anyway): the T x T attention probabilities are not kept (rebuilt in backward).
    ``recompute`` True or "full": each block's input only, and (``rebuilt``) one block's caches
    rebuilt in backward; the engine counts that block in backward's working set (``rebuilt=False``).
    ``sequence_parallel`` (row > 1): the residual stream, LayerNorms and the layers' inputs taken
    from it hold T/row positions. A pipeline stage: ``layers`` blocks (default all), the final
    LayerNorm and LM head if ``last``."""
    R, Cc, D, P = shape
    T = seq_len or config.block_size
    C, V, nh = config.n_embd, config.vocab_size, config.n_head
    b = batch_size / (D * P)
    M = b * T
    seq = R if sequence_parallel else 1  # what the residual stream's positions are split over
    scores = 0 if flash_attention or recompute == "selective" else b * (nh / R) * T * T
    # LayerNorms' xhat and outputs (the next layer's input), their rstd; QKV, attention out, MLP hidden
    block = (4 * M * C / Cc + 2 * M) / seq + 16 * M * C / R + scores
    outside = ((2 * M * C / Cc + M) / seq + M * V / R) * last  # final LayerNorm, LM head input, probabilities
    n = config.n_layer if layers is None else layers
    if full_recompute(recompute):  # keep each block's input only, rebuild one block at a time in backward
        return n * M * C / (Cc * seq) + block * (n > 0) * rebuilt + outside
    return n * block + outside


def activation_bytes(config, shape, batch_size: int, seq_len: int | None = None, *, recompute: bool | str | None,
                     flash_attention: bool, layers: int | None = None, last: bool = True,
                     sequence_parallel: bool = False) -> float:
    """Bytes of activations a rank keeps for backward in a Megatron-style bf16 transformer, from
    Korthikanti et al. ("Reducing activation recomputation", 2022), carried onto the 4D grid.

    Per layer, per sequence of s tokens and width h: s h (34 + 5 a s / h) bytes, of which
    s h (10 + 24/t + 5 a s / (h t)) with tensor parallelism t (their eq. 2): the 24 s h that
    tensor parallelism splits are the QKV, attention and MLP-hidden activations (split over
    row here), the 10 s h it does not are the LayerNorm inputs, residual and dropout masks
    (split over col here: AxoNN splits features over col); the 5 a s^2 attention scores and
    masks vanish with flash attention or ``recompute="selective"`` (their section 4.2: the
    attention core is recomputed in backward). Full recomputation (``recompute`` True or
    "full") keeps only each layer's input (2 s h bytes, split over col) plus one layer's
    working set rebuilt in backward. The
    LM head's logits are kept in fp32 for the loss (4 s V / row bytes). A pipeline stage:
    ``layers`` blocks (default all), the logits if ``last``. ``sequence_parallel``
    (their eq. 5): the 10 s h are split over row too, and so is each layer's kept input.
    """
    R, Cc, D, P = shape
    s = seq_len or config.block_size
    h, a, V = config.n_embd, config.n_head, config.vocab_size
    L = config.n_layer if layers is None else layers
    b = batch_size / (D * P)  # sequences on this rank
    split = Cc * R if sequence_parallel else Cc  # what the LayerNorm/residual region is split over
    scores = 0 if flash_attention or recompute == "selective" else 5 * a * s * s * b / R
    layer = s * b * h * (10 / split + 24 / R) + scores
    logits = 4 * s * b * V / R * last
    if full_recompute(recompute):
        return L * 2 * s * b * h / split + layer * (L > 0) + logits
    return L * layer + logits


def memory_terms(config, shape, batch_size: int, seq_len: int | None = None, *, value_bytes: int,
                 state_bytes_per_param: int, overlap=None, recompute: bool = False,
                 flash_attention: bool = False, optimizer_shards: int = 1) -> dict:
    """Bytes per rank: parameter state (weights, gradients, optimizer), activations, gathered weights;
    ``optimizer_shards``: the optimizer's part of the state (``OPTIMIZER_BYTES`` of each parameter's)
    split over that many data replicas (ZeRO-1)."""
    R, Cc, D, _ = shape
    C, L, V = config.n_embd, config.n_layer, config.vocab_size
    params = sum(local_params(config, shape).values())
    gathered = 0.0
    if D > 1 and overlap is not None and overlap.cache:
        gathered = (12 * L * C * C + V * C) / (R * Cc)  # every block, gathered, kept
    elif D > 1 and overlap is not None and overlap.oag:
        gathered = 4 * C * C / (R * Cc)  # the next block in flight
    out = {"parameter_state": params * state_bytes(state_bytes_per_param, optimizer_shards),
           "activations": activation_values(config, shape, batch_size, seq_len, recompute,
                                            flash_attention) * value_bytes,
           "weight_cache": gathered * value_bytes}
    out["total"] = sum(out.values())
    return out


def axonn_layer_volumes(K: int, H: int, B: int, S: int, shape, transposed: bool,
                        axonn_bug: bool = False) -> dict[str, float]:
    """Values each rank moves for one layer [K H, H] (or [H, K H] transposed), per AxoNN's model
    (comm_model.model_v2, activation recomputation included: forward terms twice), by group.

    ``axonn_bug=True`` keeps AxoNN's transposed-layer terms: K on the forward (row) term.
    """
    R, C, D, P = shape
    T = B * S / (P * D)
    w = K * H * H
    out = {"data": 2 * 2 * (P - 1) / P * w / (C * R * D), "depth": 3 * (D - 1) / D * w / (C * R)}
    if not transposed:  # forward: Y [T, KH/R] summed over col; backward: dX [T, H/C] over row
        out["col"], out["row"] = 2 * 2 * (C - 1) / C * T * K * H / R, 2 * (R - 1) / R * T * H / C
    elif axonn_bug:
        out["row"], out["col"] = 2 * 2 * (R - 1) / R * T * K * H / C, 2 * (C - 1) / C * T * H / R
    else:  # forward: Y [T, H/C] summed over row; backward: dX [T, KH/R] over col
        out["row"], out["col"] = 2 * 2 * (R - 1) / R * T * H / C, 2 * (C - 1) / C * T * K * H / R
    return out
