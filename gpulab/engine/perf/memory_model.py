"""Memory per GPU, broken down by kind: the calculator behind ``gpulab model memory`` and notebook 08.

    b = memory_breakdown(gpt_config("gpt-80b"), (4, 8, 2, 16), global_batch=1024, pipe=2,
                         micro_batches=8, precision=machine_precision(machine("perlmutter")))
    b["weights"], b["gradients"], b["optimizer"], b["activations"], b["weight_cache"],
    b["working_set"], b["comm_buffers"], b["total"], b["stage"]
    fit(b, machine("perlmutter"))          # {"limit": bytes, "fits": bool, "advice": [...]}

Two ways to count the same terms (docs/memory.md has the formulas and sources):

- ``engine_precision(dtype)``: what ``ParallelGPT`` holds, byte for byte where
  it can be (``tests/engine/test_memory_engine.py`` checks it against
  ``memory_report`` and tracemalloc): weights and gradients in the model's
  dtype, AdamW's moments (and a float32 master copy for float16) in float32 or
  wider, activations as the engine's caches (``terms.activation_values``),
  backward's working set as ``memory.backward_working_set`` counts it.
- ``machine_precision(machine)``: mixed-precision training at scale, bf16
  weights and gradients, ``state_bytes_per_param`` bytes per parameter in all
  (16: 2 + 2 + 12 of fp32 master, momentum, variance; the ZeRO paper's
  K = 12), activations as Korthikanti et al. count them (``terms.activation_bytes``);
  the working set is still the engine's backward's, in ``value_bytes``.

Pipeline stages hold their own blocks (``pipeline.stage_layers``) and the
activations of the micro-batches in flight (1F1B: ``pipe - stage`` at most,
GPipe: all ``m``); the breakdown is that of the stage whose total is largest
(or ``stage=``). ``zero`` shards over the ``data`` replicas as ZeRO does:
1 the optimizer state, 2 also gradients, 3 also weights; the engine's
``depth`` axis already shards weights, gradients and optimizer state (AxoNN's
ZeRO-3-like dimension).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpulab.engine.gpt.config import GPTConfig, accum_dtype
from gpulab.engine.gpt.model import WPE, WTE
from gpulab.engine.parallel.memory import LATER_GRADS, backward_working_set
from gpulab.engine.parallel.overlap_weights import backward_uses, forward_uses
from gpulab.engine.parallel.pipeline import schedule, stage_layers, stage_uses
from gpulab.engine.parallel.shards import param_specs, piece_numel, shard_numel, split_counts
from gpulab.engine.perf.terms import activation_bytes, activation_values, full_recompute, local_params

KINDS = ("weights", "gradients", "optimizer", "activations", "weight_cache", "working_set", "comm_buffers")
ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True)
class Precision:
    """Bytes per value of each kind, and which activation count applies ("engine" or "megatron")."""
    weight_bytes: float
    grad_bytes: float
    optimizer_bytes: float  # per parameter: moments (+ master copy)
    value_bytes: float  # activations, gathered weights, communication buffers
    activation_count: str = "engine"


def engine_precision(dtype: str) -> Precision:
    """What ``ParallelGPT`` and ``optim.AdamW`` keep for a model of ``dtype``."""
    item = np.dtype(dtype).itemsize
    moments = (2 + (item < 4)) * np.dtype(accum_dtype(dtype)).itemsize  # m, v (+ float32 master)
    return Precision(item, item, moments, item, "engine")


def machine_precision(machine) -> Precision:
    """Mixed precision at scale: ``value_bytes`` weights and gradients, the rest of
    ``state_bytes_per_param`` for the optimizer, Korthikanti et al.'s activations."""
    v = machine.value_bytes
    return Precision(v, v, machine.state_bytes_per_param - 2 * v, v, "megatron")


def in_flight(kind: str, pipe: int, stage: int, micro_batches: int) -> int:
    """Micro-batches whose activations ``stage`` holds at once (``pipeline.schedule``)."""
    return micro_batches if kind == "gpipe" else min(pipe - stage, micro_batches)


def _linears(config) -> dict[str, tuple[int, int, bool]]:
    """Weight name -> (n_out, k_in, transposed), as ``ParallelGPT`` builds its ``Linear3D``s."""
    C, V = config.n_embd, config.vocab_size
    out = {WTE: (V, C, False)}
    for i in range(config.n_layer):
        for part, n, k, t in (("attn.c_attn", 3 * C, C, False), ("attn.c_proj", C, C, True),
                              ("mlp.c_fc", 4 * C, C, False), ("mlp.c_proj", C, 4 * C, True)):
            out[f"transformer.h.{i}.{part}.weight"] = (n, k, t)
    return out


def _block_numel(n, k, t, shape) -> int:
    n_parts, k_parts = split_counts(t, shape)
    return (n // n_parts) * (k // k_parts)


def weight_cache_values(config, shape, overlap, pipe: int = 1, stage: int = 0, micro_batches: int = 1,
                        kind: str = "1f1b") -> int:
    """Most gathered-weight values a rank holds at once beyond the block in use, as
    ``overlap_weights.WeightFetcher`` keeps them (cached blocks, the prefetched next buffer):
    its accounting replayed over the stage's weight uses, without arrays."""
    D = shape[2]
    if D == 1 or overlap is None or not (overlap.cache or overlap.oag):
        return 0
    lin = _linears(config)
    fwd, bwd = stage_uses(forward_uses(config), backward_uses(config),
                          stage_layers(config.n_layer, pipe, stage), stage == 0, stage == pipe - 1)
    uses = [u for op, _ in schedule(kind, pipe, stage, micro_batches) for u in (fwd if op == "F" else bwd)]
    cached, pending, peak = {}, {}, 0

    def issue(i):
        if overlap.oag and i < len(uses) and uses[i][0] not in cached and uses[i][0] not in pending:
            n, k, t = lin[uses[i][0]]
            pending[uses[i][0]] = D * shard_numel(n, k, shape, t)  # the padded gathered buffer

    issue(0)
    for pos, (name, pass_) in enumerate(uses):
        pending.pop(name, None)
        if overlap.cache and pass_ == "forward":
            cached[name] = _block_numel(*lin[name], shape)
        issue(pos + 1)
        peak = max(peak, sum(cached.values()) + sum(pending.values()))
    return peak


def working_set_bytes(config, shape, micro_batch: int, seq_len: int, precision: Precision, pipe: int = 1,
                      stage: int = 0, micro_batches: int = 1, kind: str = "1f1b", flash_attention: bool = False,
                      recompute: bool | str | None = False, sequence_parallel: bool = False) -> float:
    """Bytes of backward's working set on one rank of ``stage`` (``memory.backward_working_set``: the
    transient arrays of a block's backward beside the caches and gradients), from the shapes the
    engine gives one micro-batch of ``micro_batch`` sequences (over every replica). With full
    recomputation the block rebuilt in backward is in it, as the engine counts it; Korthikanti et
    al.'s activations (``machine_precision``) count that block already."""
    R, Cc, D, P = shape
    C, V, T = config.n_embd, config.vocab_size, seq_len
    M = micro_batch // (D * P) * T  # tokens of one micro-batch on this rank
    seq = R if sequence_parallel else 1  # the residual stream holds T/row positions
    mode = "full" if full_recompute(recompute) else (recompute or None)
    first, last = stage == 0, stage == pipe - 1
    v = precision.value_bytes
    specs = param_specs(GPTConfig(**{**config.to_dict(), "n_layer": 1}))
    size = {"stream": M // seq * C // Cc * v, "hidden": M * 4 * C // R * v, "head": M * C // R * v,
            "scores": 0 if flash_attention else M // T * config.n_head // R * T * T * v,
            "logits": M * V // R * v if last else 0, "mlp_block": _block_numel(4 * C, C, False, shape) * v,
            "mlp_shard": shard_numel(4 * C, C, shape) * v,
            "vocab_block": _block_numel(V, C, False, shape) * v if first or last else 0,
            "gathered": M * C // Cc * v if sequence_parallel else 0}
    rebuilt = mode == "full" and precision.activation_count == "engine"
    size["rebuilt"] = activation_values(config, shape, micro_batch, T, False, flash_attention, layers=1,
                                        last=False, sequence_parallel=sequence_parallel) * v if rebuilt else 0
    grads = {part: sum(piece_numel(specs[f"transformer.h.0.{part}.{k}"], shape) for k in ("weight", "bias"))
             * precision.grad_bytes for part in LATER_GRADS}
    grads.update({k: piece_numel(specs[name], shape) * precision.grad_bytes if held else 0
                  for k, name, held in (("wpe", WPE, first), ("wte", WTE, first or last))})
    return backward_working_set(size, grads, blocks=len(stage_layers(config.n_layer, pipe, stage)), depth=D,
                                first_stage=first, last_stage=last, recompute=mode,
                                after_backward=_busiest_backward_follows_another(kind, pipe, stage, micro_batches))


def _busiest_backward_follows_another(kind: str, pipe: int, stage: int, micro_batches: int) -> bool:
    """Does a backward that runs beside the most micro-batches' caches come after another backward
    (``pipeline_step.run_micro_batches``' choice, replayed over ``pipeline.schedule``)?"""
    held, done, busiest = 0, 0, (0, False)
    for op, _ in schedule(kind, pipe, stage, micro_batches):
        if op == "F":
            held += 1
        else:
            busiest = max(busiest, (held, done > 0))
            held, done = held - 1, done + 1
    return busiest[1]


def _activations(config, shape, batch, T, precision, recompute, flash_attention, layers, last, sp) -> float:
    if precision.activation_count == "engine":  # the block full recompute rebuilds: in the working set
        return activation_values(config, shape, batch, T, recompute, flash_attention, layers=layers, last=last,
                                 sequence_parallel=sp, rebuilt=False) * precision.value_bytes
    return activation_bytes(config, shape, batch, T, recompute=recompute, flash_attention=flash_attention,
                            layers=layers, last=last, sequence_parallel=sp)


def stage_memory(config, shape, stage: int, *, global_batch: int, precision: Precision, pipe: int = 1,
                 micro_batches: int = 1, schedule_kind: str = "1f1b", recompute: bool | str | None = False,
                 sequence_parallel: bool = False, zero: int = 0, overlap=None, seq_len: int | None = None,
                 flash_attention: bool = False) -> dict:
    """Bytes one rank of ``stage`` holds, by kind (``KINDS``), and how the activations add up.
    ``recompute``: False (or None), "selective" or "full" (True) as ``ParallelGPT`` takes it;
    ``sequence_parallel`` applies where row > 1, as in the engine."""
    P = shape[3]
    T = seq_len or config.block_size
    sp = sequence_parallel and shape[0] > 1
    values = local_params(config, shape, pipe, stage)
    n = values["weight"] + values["copied"]
    shard = {k: (P if zero >= z else 1) for k, z in (("optimizer", 1), ("gradients", 2), ("weights", 3))}
    layers = len(stage_layers(config.n_layer, pipe, stage))
    last = stage == pipe - 1
    micro = global_batch // micro_batches  # sequences per micro-batch, over every replica
    per_layer = _activations(config, shape, micro, T, precision, False, flash_attention, 1, False, sp)
    acts = _activations(config, shape, micro, T, precision, recompute, flash_attention, layers, last, sp)
    held = in_flight(schedule_kind, pipe, stage, micro_batches)
    out = {"stage": stage, "layers": layers, "in_flight": held, "recompute": recompute,
           "activations_per_layer": per_layer,
           "weights": n * precision.weight_bytes / shard["weights"],
           "gradients": n * precision.grad_bytes / shard["gradients"],
           "optimizer": n * precision.optimizer_bytes / shard["optimizer"],
           "activations": acts * held,
           "weight_cache": weight_cache_values(config, shape, overlap, pipe, stage, micro_batches,
                                               schedule_kind) * precision.value_bytes,
           "working_set": working_set_bytes(config, shape, micro, T, precision, pipe, stage, micro_batches,
                                            schedule_kind, flash_attention, recompute, sp),
           "comm_buffers": comm_buffer_bytes(config, shape, micro, T, pipe, zero, overlap, precision.value_bytes)}
    out["total"] = sum(out[k] for k in KINDS)
    return out


def comm_buffer_bytes(config, shape, micro_batch: int, seq_len: int, pipe: int, zero: int, overlap,
                      value_bytes: float) -> float:
    """Bytes of the buffers communication needs beside the arrays above (a model estimate; the
    engine does not account them): with depth > 1 (or ZeRO-3 over data) the gathered block in use
    (the largest layer's; its full gradient before the reduce-scatter is in the working set), a
    gradient bucket in flight (``overlap.buckets``), and the stage-to-stage send and receive of
    one micro-batch."""
    _, C, D, P = shape
    one_block = GPTConfig(**{**config.to_dict(), "n_layer": 1})
    big = max(_block_numel(n, k, t, shape) for n, k, t in _linears(one_block).values())
    gathered = big if D > 1 or (zero >= 3 and P > 1) else 0
    p2p = 2 * micro_batch / (D * P) * seq_len * config.n_embd / C if pipe > 1 else 0
    bucket = overlap.bucket_bytes if overlap is not None and overlap.buckets and P * D > 1 else 0
    return (gathered + p2p) * value_bytes + bucket


def memory_breakdown(config, shape, *, global_batch: int, precision: Precision, stage: int | None = None,
                     **options) -> dict:
    """``stage_memory`` of ``stage``, or of the stage whose total is largest (options: see there)."""
    pipe = options.get("pipe", 1)
    stages = [stage] if stage is not None else range(pipe)
    rows = [stage_memory(config, shape, s, global_batch=global_batch, precision=precision, **options)
            for s in stages]
    return max(rows, key=lambda r: r["total"])


def fit(breakdown: dict, machine) -> dict:
    """The breakdown against the device: the limit (usable share of its memory), whether it fits,
    and what to change when it does not, largest saving first."""
    limit = machine.usable_memory * machine.memory_bytes
    return {"limit": limit, "device_bytes": machine.memory_bytes, "fits": breakdown["total"] <= limit,
            "advice": [] if breakdown["total"] <= limit else advice(breakdown, limit)}


def advice(b: dict, limit: float) -> list[str]:
    """Changes that shrink the largest terms, each with the bytes it would save (approximate)."""
    over = b["total"] - limit
    tips = []
    state = b["weights"] + b["gradients"] + b["optimizer"]
    tips.append((state / 2, ("double depth (or ZeRO over data): weights, gradients and optimizer state "
                             "are sharded over it")))
    if b["optimizer"] > 0:
        tips.append((b["optimizer"] / 2, "--zero 1 (or more): shard the optimizer state over the data replicas"))
    if b["activations"] > 0:
        tips.append((b["activations"] / 2, ("halve the sequences per micro-batch: more micro-batches, or "
                                            "double row/col (activations split over them)")))
        tips.append((b["activations"] * 0.8, "--recompute full: keep only each layer's input"))
        if b["in_flight"] > 1:
            tips.append((b["activations"] * (1 - 1 / b["in_flight"]),
                         "the 1F1B schedule or fewer micro-batches in flight"))
    if b["weight_cache"] > 0:
        tips.append((b["weight_cache"], "switch the overlap's weight cache off (gather again in backward)"))
    tips.sort(key=lambda t: -t[0])
    return [f"{text} (saves ~{saved / 1e9:.3g} GB; {over / 1e9:.3g} GB over)" for saved, text in tips[:4]]
