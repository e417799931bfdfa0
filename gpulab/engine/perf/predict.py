"""The performance model: one iteration's time for a model, batch, grid shape, overlap and machine.

    from gpulab.engine.perf.predict import predict, rank
    from gpulab.engine.perf.machines import machine
    p = predict(gpt_config("gpt-20b"), (4, 8, 2, 16), batch_size=512, machine=machine("perlmutter"))
    p["iter_s"], p["compute_s"], p["exposed_comm_s"], p["groups"], p["memory"], p["fits"]
    rank(cfg, world=1024, batch_size=512, machine=m)[:5]     # fastest grid shapes that fit

How (each term printed by ``gpulab model``):

1. Compute: what one rank computes (``flops.rank_work``: its share of every
   matmul plus the work repeated along row or col) at the machine's rates
   (``compute_s``: FLOPs / matmul rate + values touched / memory rate +
   kernels x fixed cost). With ``recompute`` (activation checkpointing, as
   AxoNN trains large models) the forward runs twice.
2. Communication: every collective of the iteration (``terms.comm_rows``),
   each costed by the machine as a ring with a latency per step and the
   bandwidth of the link its group spans (same node or not), or on this
   computer its timings, interpolated between the sizes timed. With
   ``recompute`` forward's collectives run twice too.
3. Overlap: a collective that ``overlap`` makes non-blocking hides behind the
   computation it runs alongside, up to ``overlap_efficiency`` of that
   computation: dX all-reduce behind the layer's dW matmul (``oar``, AxoNN's
   OAR), the dW reduce-scatter behind the next layer's backward (``ors``,
   ORS), a prefetched all-gather behind the previous layer (``oag``, OAG),
   bucketed data-parallel all-reduces behind the rest of backward
   (``buckets``; in flight together, they pay one call's latency over all
   their bytes; the last bucket stays exposed). Each is priced as the
   non-blocking call it is (a fitted machine times MPI_Iallreduce and its
   twins apart from the blocking calls: MPICH selects their algorithms apart). Switching them on one by one
   predicts the paper's ablation (``gpulab model predict --overlap oar`` ...). Hidden time never
   exceeds the compute it hides behind, in total.
4. Memory: parameter state, activations and gathered-weight caches per rank
   (``terms.memory_terms``); ``fits`` compares with the device.
   ``flash_attention`` drops the T x T attention probabilities from memory
   (the engine keeps them; AxoNN's runs use flash attention).
5. Waiting: a fitted machine charges each col all-reduce the wait its ranks
   showed in one measured grid, each row all-reduce the wait in another, and
   the gradient all-reduce over the data group, once an iteration, the wait
   in a third (``perf.calibration``).

iteration = compute + exposed communication. Not modelled: load imbalance,
contention between concurrent groups on shared links, pipeline parallelism.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from gpulab.engine.gpt.config import GPTConfig
from gpulab.engine.parallel.gpt import check_divisibility
from gpulab.engine.parallel.mesh import grid_shapes
from gpulab.engine.perf.flops import model_flops, rank_work
from gpulab.engine.perf.rings import NONBLOCKING
from gpulab.engine.perf.terms import comm_rows, memory_terms
from gpulab.engine.perf.trust import caveat

# What the model prices by default at scale, AxoNN's way of training: every overlap but the weight cache,
# gradients in buckets of 64 MiB (``gpulab model`` takes both as its defaults)
DEFAULT_OVERLAP = "oar,ors,oag,buckets"
DEFAULT_BUCKET_MB = 64.0

# GPT sizes of the AxoNN experiments (Megatron-AxoNN examples/launch_per_comm_model.py,
# model_configs); vocabulary 51200 as Megatron-LM's scaling runs pad GPT-2's 50257
GPT_SIZES = {"gpt-5b": (24, 4096, 32), "gpt-10b": (32, 5120, 40), "gpt-20b": (32, 7168, 56),
             "gpt-40b": (38, 9216, 72), "gpt-60b": (56, 9216, 72), "gpt-80b": (42, 12288, 96),
             "gpt-160b": (84, 12288, 96), "gpt-320b": (96, 16384, 128), "gpt-640b": (192, 16384, 128)}


def gpt_config(name: str, seq_len: int = 2048, vocab_size: int = 51200) -> GPTConfig:
    """A named GPT size (n_layer, n_embd, n_head) from ``GPT_SIZES``."""
    if name not in GPT_SIZES:
        raise KeyError(f"unknown model {name!r}; known: {list(GPT_SIZES)}")
    L, C, nh = GPT_SIZES[name]
    return GPTConfig(vocab_size=vocab_size, block_size=seq_len, n_layer=L, n_head=nh, n_embd=C,
                     dtype="float32")


def model_config(name: str) -> GPTConfig:
    """A named size (``gpt_config``) or a GPTConfig JSON file (what ``gpulab model --model`` takes)."""
    if name.endswith(".json"):
        return GPTConfig.from_dict(json.loads(Path(name).read_text()))
    return gpt_config(name)


def _compute_parts(config, shape, batch_size, T, machine, recompute):
    work = rank_work(config, shape, batch_size, T)
    total = machine.compute_s(work)
    R, C, D, P = shape
    M = batch_size / (D * P) * T
    linear_fwd = 2.0 * M * 3 * config.n_embd ** 2 / (R * C)  # FLOPs of one average block linear, forward
    mm = machine.compute_s({"matmul_flops": linear_fwd, "elementwise": 0, "kernels": 1})
    block = total / max(config.n_layer, 1)
    windows = {"dX": mm, "RS": block * 2 / 3 / 4, "AG": block / 3 / 4, "DP": total * 2 / 3}
    if recompute:
        total += machine.compute_s({k: v / 3 if k == "matmul_flops" else v / 2 for k, v in work.items()})
    return total, windows


def group_wait_share(group_size: int, ranks: int) -> float:
    """The share of a wait calibrated on a group of all ``ranks`` that a group of ``group_size`` pays:
    (g - 1) / (p - 1), linear in the other ranks it waits for. Its square, its 1.5th power, log g / log p
    and nothing below p meet the targets in fewer of the recorded runs
    (`python benchmarks/engine_accuracy.py group-wait`)."""
    return (group_size - 1) / (ranks - 1)


def wait_s(machine, row: dict) -> float:
    """What the model charges one call of ``row`` (``terms.comm_rows``) for the ranks' wait: a col
    all-reduce's share of the machine's ``call_wait``, a row all-reduce's of its ``row_wait``, each
    gradient bucket over the data group its share of ``data_wait`` (the buckets together pay it once);
    0 for any other call, and on a machine that calibrated none (a profile)."""
    if getattr(machine, "ranks", 1) < 2:
        return 0.0
    if row["group"] == "data":
        charged = row["phase"] == "grad-sync" and row["group_size"] > 1
        return getattr(machine, "data_wait", 0.0) / row["count"] if charged else 0.0
    if row["op"] != "all_reduce" or row["group"] not in ("row", "col"):
        return 0.0
    wait = getattr(machine, "row_wait" if row["group"] == "row" else "call_wait", 0.0)
    return wait * group_wait_share(row["group_size"], machine.ranks)


def predict(config, shape, batch_size: int, machine, overlap=None, *, seq_len: int | None = None,
            recompute: bool = False, flash_attention: bool = False, distributed_optimizer: bool = False) -> dict:
    """Predicted iteration of ``config`` on grid ``shape`` (R, C, D, P); see the module docstring.
    ``distributed_optimizer``: the engine's ZeRO-1 (``training.zero1``): gradients reduce-scattered
    (bucketed behind backward like the all-reduces they replace), the updated parameters all-gathered
    in the optimizer step, exposed, and the optimizer state split over the data replicas."""
    shape = tuple(int(s) for s in shape)
    T = seq_len or config.block_size
    compute, windows = _compute_parts(config, shape, batch_size, T, machine, recompute)
    scale = machine.value_bytes / _itemsize(config)  # the config's dtype -> the machine's values
    eff = machine.overlap_efficiency_for(overlap.progress if overlap is not None else "poll")
    groups, comm, hidden = {}, 0.0, 0.0
    budget = eff * compute
    last_dp = 0.0
    for row in comm_rows(config, shape, batch_size, T, overlap, distributed_optimizer=distributed_optimizer):
        count = row["count"] * (2 if recompute and row["phase"] == "forward" else 1)
        # the data-parallel buckets are in flight together (each started as backward fills it): one
        # call's latency over all their bytes, each bucket its share; priced one by one, each bucket
        # would pay a latency of its own that the engine's timeline does not show
        whole = row["count"] if row["kind"] == "DP" else 1
        # what overlaps is issued non-blocking (MPI_Iallreduce...), whose algorithms MPICH selects apart
        op = row["op"] if row["kind"] is None else NONBLOCKING[row["op"]]
        t = machine.collective_s(op, row["group_size"], row["stride"], whole * row["nbytes"] * scale) / whole
        h = 0.0
        if row["kind"] == "DP":
            last_dp = t
            h = min(t, eff * windows["DP"] / max(row["count"], 1))
        elif row["kind"] is not None:
            h = min(t, eff * windows[row["kind"]])
        wait = count * wait_s(machine, row)  # the ranks reaching it out of step: exposed, never hidden
        g = groups.setdefault(row["group"], {"calls": 0, "bytes": 0.0, "time_s": 0.0, "exposed_s": 0.0})
        g["calls"] += count
        g["bytes"] += count * row["nbytes"] * scale
        g["time_s"] += count * t + wait
        g["exposed_s"] += count * (t - h) + wait
        comm += count * t + wait
        hidden += count * h
    if last_dp:  # the last bucket starts when backward ends: nothing left to hide behind
        hidden -= min(last_dp, eff * windows["DP"] / max(1, groups.get("data", {}).get("calls", 1)))
    hidden = max(0.0, min(hidden, budget))
    exposed = comm - hidden
    iter_s = compute + exposed
    mem = memory_terms(config, shape, batch_size, T, value_bytes=machine.value_bytes,
                       state_bytes_per_param=machine.state_bytes_per_param, overlap=overlap,
                       recompute=recompute, flash_attention=flash_attention,
                       optimizer_shards=shape[3] if distributed_optimizer else 1)
    flops = model_flops(config, batch_size, T)
    world = math.prod(shape)
    return {"shape": list(shape), "machine": machine.name, "iter_s": iter_s, "compute_s": compute,
            "caveat": caveat(machine, compute, iter_s, overlap),
            "comm_s": comm, "exposed_comm_s": exposed, "hidden_comm_s": hidden, "groups": groups,
            "memory": mem, "fits": mem["total"] <= machine.usable_memory * machine.memory_bytes,
            "tokens_per_s": batch_size * T / iter_s, "model_flops": flops,
            "mfu": flops / iter_s / (world * machine.peak)}


def _itemsize(config) -> int:
    return 8 if config.dtype == "float64" else 4


def candidate_shapes(config, world: int, batch_size: int) -> list[tuple[int, int, int, int]]:
    """Grid shapes of ``world`` ranks that split this model and batch (powers of two if world is one)."""
    out = []
    for shape in grid_shapes(world):
        try:
            check_divisibility(config, shape, batch_size)
        except ValueError:
            continue
        out.append(shape)
    return out


def rank(config, world: int, batch_size: int, machine, overlap=None, *, seq_len: int | None = None,
         recompute: bool = False, flash_attention: bool = False, keep_unfit: bool = False) -> list[dict]:
    """Predictions for every valid grid shape of ``world`` ranks, fastest first; shapes whose memory
    does not fit are dropped (``keep_unfit``: kept, after the fitting ones)."""
    preds = [predict(config, s, batch_size, machine, overlap, seq_len=seq_len, recompute=recompute,
                     flash_attention=flash_attention)
             for s in candidate_shapes(config, world, batch_size)]
    fit = sorted((p for p in preds if p["fits"]), key=lambda p: p["iter_s"])
    unfit = sorted((p for p in preds if not p["fits"]), key=lambda p: p["iter_s"])
    return fit + (unfit if keep_unfit else [])
