"""AxoNN against its baselines at scale: each strategy's best predicted configuration.

    rows = compare(gpt_config("gpt-80b"), world=1024, global_batch=1024, machine=machine("perlmutter"))
    rows[0]["strategy"], rows[0]["config"], rows[0]["iter_s"], rows[0]["memory"], rows[0]["mfu"]
    evaluate(cfg, (4, 1, 1, 128), pipe=2, micro_batches=8, recompute=True, global_batch=1024, machine=m)

For every strategy (``gpulab.engine.strategies.TABLE``, in its order) the search runs over its
grid shapes, pipeline stages (those with ``pipelined``: Megatron-LM), micro-batches per iteration
(gradient accumulation; the pipeline's m) and activation recomputation on or
off, and keeps the fastest configuration whose memory fits the GPU
(``machine.usable_memory`` of it). One configuration is predicted as:

- one micro-batch on the busiest pipeline stage (``pipeline.stage_config``):
  ``predict.predict`` with the micro-batch's sequences, minus the gradient
  synchronisation, which runs once per iteration;
- iteration = (m + p - 1) micro-batch slots (1F1B; the bubble is p - 1 of
  them) + the gradient synchronisation left exposed + the stage-to-stage
  sends (``pipeline.p2p_s``);
- memory per GPU = parameter state of the stage's shard (weights, gradients,
  AdamW states: ``machine.state_bytes_per_param``; ZeRO-3/HSDP/AxoNN shard it
  over depth, none shards it over data) + gathered weights + the activations
  of the micro-batches in flight (``terms.activation_bytes``, Korthikanti et
  al.'s count, with or without recomputation); ``distributed_optimizer``
  shards AdamW's fp32 states over data too (Megatron-LM's
  --use-distributed-optimizer, ZeRO-1), for every strategy alike;
- MFU = model FLOPs (6 N per token + attention, recomputation not counted) /
  (iteration x GPUs x the GPU's datasheet peak), as the AxoNN paper reports
  it; beside it the same against the matmul rate the model assumes
  (peak x ``matmul_efficiency``).
"""

from __future__ import annotations

import itertools
import math

from gpulab.engine.parallel.gpt import check_divisibility
from gpulab.engine.parallel.pipeline import bubble_fraction
from gpulab.engine.perf import pipeline
from gpulab.engine.perf.flops import hardware_flops, model_flops
from gpulab.engine.perf.predict import predict
from gpulab.engine.perf.terms import activation_bytes, state_bytes
from gpulab.engine.strategies import TABLE, describe, lookup, shapes_for

SYNC_GROUPS = ("data", "batch")  # the gradient synchronisation, once per iteration
# 1024 sequences of 2048 tokens (2.1 M tokens): the kit's default batch at 1024 GPUs; the paper's own
# global batch for the 80B run is not stated in the material this kit was built from (docs/axonn_vs_baselines.md)
DEFAULT_GLOBAL_BATCH = 1024


def powers_of_two(limit: int) -> list[int]:
    return [1 << k for k in range(int(math.log2(limit)) + 1)] if limit >= 1 else []


def evaluate(config, shape, *, pipe: int, micro_batches: int, recompute: bool, global_batch: int, machine,
             overlap=None, flash_attention: bool = True, seq_len: int | None = None,
             distributed_optimizer: bool = False, virtual_stages: int = 1,
             sequence_parallel: bool = False) -> dict:
    """One configuration's predicted iteration, memory and MFU (see the module docstring)."""
    T = seq_len or config.block_size
    stage = pipeline.stage_config(config, pipe)
    micro = global_batch // micro_batches  # sequences per micro-batch, all replicas together
    # ZeRO-1 priced as the bucketed all-reduce it replaces (the same bytes): Megatron-LM's
    # --overlap-grad-reduce and --overlap-param-gather hide its reduce-scatter behind backward and its
    # all-gather behind the next forward; the kit's engine gathers in the optimizer step instead
    # (``predict(distributed_optimizer=True)`` prices that)
    p = predict(stage, shape, micro, machine, overlap, seq_len=T, recompute=recompute,
                flash_attention=flash_attention)
    sync = sum(g["exposed_s"] for name, g in p["groups"].items() if name in SYNC_GROUPS)
    slot = p["iter_s"] - sync
    V = virtual_stages
    p2p = pipeline.p2p_s(config, shape, pipe, micro_batches, micro, machine, T, virtual=V)
    slots = micro_batches + (pipe - 1) / V  # the bubble: (p - 1)/v slots
    iter_s = slots * slot + sync + p2p
    exposed = slots * (p["exposed_comm_s"] - sync) + sync + p2p
    acts = activation_bytes(stage, shape, micro, T, recompute=recompute, flash_attention=flash_attention,
                            sequence_parallel=sequence_parallel)
    state = p["memory"]["parameter_state"]
    if distributed_optimizer:  # fp32 master, momentum, variance (12 of the bytes) sharded over the P replicas
        state *= state_bytes(machine.state_bytes_per_param, shape[3]) / machine.state_bytes_per_param
    memory = {"parameter_state": state, "weight_cache": p["memory"]["weight_cache"],
              "activations": acts * pipeline.in_flight(pipe, micro_batches, V)}
    memory["total"] = sum(memory.values())
    world = math.prod(shape) * pipe
    flops = model_flops(config, global_batch, T)
    words = describe(shape, pipe) + (f" (v{V})" if V > 1 else "") + (" SP" if sequence_parallel else "") \
        + (" ZeRO-1" if distributed_optimizer and shape[3] > 1 else "")
    return {"shape": list(shape), "pipe": pipe, "micro_batches": micro_batches, "recompute": recompute,
            "virtual_stages": V, "sequence_parallel": sequence_parallel,
            "distributed_optimizer": distributed_optimizer,
            "config": words, "iter_s": iter_s, "exposed_comm_s": exposed,
            "comm_share": exposed / iter_s, "bubble": bubble_fraction(pipe, micro_batches, V),
            "bubble_s": (pipe - 1) / V * slot, "p2p_s": p2p, "grad_sync_s": sync, "memory": memory,
            "hfu": hardware_flops(config, global_batch, T, recompute) / (iter_s * world * machine.peak),
            "exposed_by_group": {**{g: v["exposed_s"] * (1 if g in SYNC_GROUPS else slots)
                                    for g, v in p["groups"].items() if v["exposed_s"] > 0},
                                 **({"pipe": p2p} if p2p else {})},
            "compute_s": slots * p["compute_s"],
            "fits": memory["total"] <= machine.usable_memory * machine.memory_bytes,
            "mfu": flops / (iter_s * world * machine.peak),
            "mfu_matmul": flops / (iter_s * world * machine.peak * machine.matmul_efficiency),
            "sequences_per_gpu": global_batch / (shape[2] * shape[3]) / micro_batches}


def time_split(row: dict) -> dict:
    """An evaluated iteration cut into parts that add up to it: compute of the m useful micro-batch slots,
    exposed communication outside the bubble (slots, gradient sync, stage-to-stage sends), and the
    bubble's p - 1 idle slots (``bubble_s``, their computation and communication both)."""
    m, p, v = row["micro_batches"], row["pipe"], row.get("virtual_stages", 1)
    compute = (row["iter_s"] - row["exposed_comm_s"]) * m / (m + (p - 1) / v)
    return {"compute": compute, "exposed communication": row["iter_s"] - compute - row["bubble_s"],
            "bubble": row["bubble_s"]}


def configurations(strategy: str, config, world: int, global_batch: int, ranks_per_node: int):
    """(shape, pipe, micro_batches) the strategy may run: shapes that split the model and the
    micro-batch; with ``tp_in_node`` (Megatron-LM) TP inside a node, with ``pipelined`` pipeline stages
    p <= layers (p divides world/TP)."""
    record = lookup(strategy)
    for pipe in ([p for p in powers_of_two(world) if p <= config.n_layer] if record.pipelined else [1]):
        for shape in shapes_for(strategy, world // pipe, max_tp=ranks_per_node):
            replicas = shape[2] * shape[3]
            for m in powers_of_two(global_batch // replicas):
                if global_batch % (m * replicas):
                    continue
                try:
                    check_divisibility(config, shape, global_batch // m)
                except ValueError:
                    continue
                yield shape, pipe, m


def virtual_choices(features, config, pipe: int, micro_batches: int) -> list[int]:
    """Virtual stages to search: 1, and with "interleaved" among the tuned ``features`` every v that cuts
    the model into p v chunks of equal blocks (Megatron-LM's rule, and the model's: its chunk slots are
    equal) with m a multiple of p (the schedule's groups)."""
    if "interleaved" not in features or pipe == 1 or micro_batches % pipe or config.n_layer % pipe:
        return [1]
    per_stage = config.n_layer // pipe
    return [v for v in range(1, per_stage + 1) if per_stage % v == 0]


def best(strategy: str, config, world: int, global_batch: int, machine, overlap=None,
         flash_attention: bool = True, seq_len: int | None = None, distributed_optimizer: bool = False,
         tuned: bool = True) -> dict:
    """The fastest configuration of ``strategy`` that fits, or the reason none does (``why``);
    for one that searches every shape (axonn) also the fastest with tensor parallelism (row x col > 1);
    for one with features a tuned run uses (megatron) also its fastest without them (``untuned``)."""
    record = lookup(strategy)
    features = record.tuned if tuned else ()
    fastest, smallest, with_tp, n = None, None, None, 0
    zero1 = distributed_optimizer or "distributed_optimizer" in features
    for shape, pipe, m in configurations(strategy, config, world, global_batch, machine.ranks_per_node):
        sp = "sequence_parallel" in features and shape[0] > 1  # never slower in the model: same bytes
        for recompute, v in itertools.product((False, True), virtual_choices(features, config, pipe, m)):
            n += 1
            row = evaluate(config, shape, pipe=pipe, micro_batches=m, recompute=recompute,
                           global_batch=global_batch, machine=machine, overlap=overlap,
                           flash_attention=flash_attention, seq_len=seq_len,
                           distributed_optimizer=zero1, virtual_stages=v, sequence_parallel=sp)
            if row["fits"] and (fastest is None or row["iter_s"] < fastest["iter_s"]):
                fastest = row
            if row["fits"] and shape[0] * shape[1] > 1 and (with_tp is None or row["iter_s"] < with_tp["iter_s"]):
                with_tp = row
            if smallest is None or row["memory"]["total"] < smallest["memory"]["total"]:
                smallest = row
    out = {"strategy": strategy, "description": record.description, "searched": n}
    if record.every_shape and with_tp is not None:  # is tensor parallelism part of the winner?
        out["best_with_tensor_parallelism"] = with_tp
    if features:  # what the tuned features are worth: the same search without them
        plain = best(strategy, config, world, global_batch, machine, overlap, flash_attention, seq_len,
                     distributed_optimizer, tuned=False)
        if plain["fits"]:
            out["untuned"] = plain
    if fastest is not None:
        return {**out, **fastest}
    if smallest is None:
        why = (f"no grid of {world} GPUs splits the model and a global batch of {global_batch} sequences "
               "(sharding and data parallelism need at least one sequence per replica)")
    else:
        why = (f"does not fit: the smallest configuration, {smallest['config']}, needs "
               f"{smallest['memory']['total'] / 1e9:.0f} GB per GPU")
    return {**out, "fits": False, "why": why}


def compare(config, world: int, global_batch: int, machine, overlap=None, flash_attention: bool = True,
            seq_len: int | None = None, strategies=None, distributed_optimizer: bool = False) -> list[dict]:
    """``best`` for each strategy, in ``strategies`` order (default: every strategy of ``TABLE``)."""
    return [best(s, config, world, global_batch, machine, overlap, flash_attention, seq_len, distributed_optimizer)
            for s in (TABLE if strategies is None else strategies)]


# Singh et al., "A 4D Hybrid Algorithm to Scale Parallel Training to Thousands of GPUs", arXiv 2305.13525,
# abstract: an 80B GPT on 1024 Perlmutter GPUs, AxoNN 26% faster than Megatron-LM, 57% of the theoretical
# peak (182 PFLOP/s: 0.57 x 1024 x 312 TFLOP/s)
PAPER = {"source": "Singh et al., arXiv 2305.13525, abstract (80B GPT, 1024 Perlmutter GPUs)",
         "axonn_faster_than_megatron": 0.26, "axonn_peak_share": 0.57}


def against_paper(rows: list[dict]) -> dict | None:
    """The kit's predicted gap (Megatron-LM's time over AxoNN's, minus one: > 0 when AxoNN is faster)
    and AxoNN's utilisation, beside the paper's; None without a fitting row for both."""
    fit = {r["strategy"]: r for r in rows if r.get("fits")}
    if "axonn" not in fit or "megatron" not in fit:
        return None
    axonn, megatron = fit["axonn"], fit["megatron"]
    untuned = megatron.get("untuned")
    return {**PAPER, "axonn_config": axonn["config"], "megatron_config": megatron["config"],
            "predicted_axonn_faster_than_megatron": megatron["iter_s"] / axonn["iter_s"] - 1,
            "untuned_megatron_config": untuned and untuned["config"] + (", recomputing" * untuned["recompute"]),
            "predicted_axonn_faster_than_untuned_megatron": untuned and untuned["iter_s"] / axonn["iter_s"] - 1,
            "predicted_mfu": axonn["mfu"], "predicted_hfu": axonn["hfu"]}


def paper_lines(gap: dict) -> list[str]:
    """``against_paper`` in words, with the FLOP definition of each utilisation."""
    def faster(pred: float) -> str:
        return f"{pred:.0%} faster" if pred >= 0 else f"{-pred / (1 + pred):.0%} slower"

    untuned = gap.get("predicted_axonn_faster_than_untuned_megatron")
    return [f"against the paper ({gap['source']}):",
            f"  AxoNN vs Megatron-LM: paper {gap['axonn_faster_than_megatron']:.0%} faster; kit predicts "
            f"{faster(gap['predicted_axonn_faster_than_megatron'])} ({gap['axonn_config']} against "
            f"{gap['megatron_config']})"
            + ("" if untuned is None else f", {faster(untuned)} against Megatron-LM without the features of a "
               f"tuned run ({gap['untuned_megatron_config']})"),
            f"  AxoNN's utilisation: paper {gap['axonn_peak_share']:.0%} of peak; kit MFU {gap['predicted_mfu']:.1%}"
            f" (model FLOPs: 6N per token + attention), HFU {gap['predicted_hfu']:.1%} (hardware FLOPs: the"
            " forward that recomputation runs again counted too); the abstract does not say which FLOPs its 57%"
            " counts",
            "  not from the paper (its evaluation section could not be read here; docs/axonn_vs_baselines.md):"
            " the global batch, the Megatron-LM and ZeRO-3 configurations it ran; the kit searches each"
            " strategy's best instead"]


def assumptions(machine, global_batch: int, seq_len: int, overlap, distributed_optimizer: bool = False) -> list[str]:
    tuned = {name: r.tuned for name, r in TABLE.items() if r.tuned}
    return [
        f"global batch {global_batch} sequences x {seq_len} tokens = {global_batch * seq_len / 1e6:.2f} M tokens",
        f"overlap {overlap.label() if overlap is not None else 'none'}; flash attention (no T x T scores kept)",
        "searched per strategy: grid shapes, micro-batches per iteration (powers of two), full recomputation"
        " on/off (selective recomputation keeps what flash attention keeps: nothing more to save);"
        " the fastest that fits is shown",
        *(f"{name} as a tuned run uses it: " + ", ".join(options) + (
            " (virtual stages v: p v chunks of equal blocks, m a multiple of p; bubble (p-1)/v slots, 2(v m + p - 1)"
            " stage-to-stage sends, p + (p-1)/v micro-batches' activations in flight)"
            if "interleaved" in options else "") + (
            "; sequence parallelism: LayerNorm/residual activations split over TP too (Korthikanti et al.,"
            " eq. 5), reduce-scatter + all-gather priced as the all-reduce they replace (the same bytes)"
            if "sequence_parallel" in options else "") + (
            "; distributed optimizer: AdamW's fp32 states split over data, gradients reduce-scattered and"
            " parameters all-gathered (the bytes of the all-reduce it replaces)"
            if "distributed_optimizer" in options else "")
          for name, options in tuned.items()),
        "ZeRO-3 with its prefetching: each layer's weights all-gathered one layer ahead (oag), gradients"
        " reduce-scattered during backward (ors)" + ("" if overlap is not None and overlap.oag and overlap.ors
                                                    else " - switched off by this --overlap"),
        f"Megatron-LM: TP over row inside a node (<= {machine.ranks_per_node} GPUs), pipeline p (power of two,"
        " <= layers; the busiest stage holds ceil(L/p) blocks and the LM head), 1F1B: (m+p-1) slots, bubble"
        " (p-1)/(m+p-1), 2(m+p-1) stage-to-stage sends of b T C / TP values over the network",
        "memory per GPU: weights+gradients+AdamW at "
        f"{machine.state_bytes_per_param} bytes/parameter of the rank's shard (sharded over depth; "
        + ("the 12 bytes of AdamW's fp32 states also over data: distributed optimizer, every strategy"
           if distributed_optimizer else "over data only where a strategy's tuned run shards its optimizer")
        + "), gathered weights in flight, activations of min(p, m) micro-batches"
        " (Korthikanti et al.: s b h (10/col + 24/row) bytes per layer; with recomputation 2 s b h/col per"
        f" layer + one layer); fits if <= {machine.usable_memory:.0%} of {machine.memory_bytes / 1e9:g} GB",
        "MFU: model FLOPs, 6N per token + attention (recomputation not counted), over the datasheet peak;"
        " HFU: hardware FLOPs, recomputation's extra forward counted, over the same peak"
        f" ({machine.peak / 1e12:g} TFLOP/s); 'MFU/matmul' over the assumed matmul rate"
        f" ({machine.matmul_efficiency:.0%} of peak)",
        "not modelled: small-GEMM inefficiency (one rate for every matmul size), contention between groups"
        " sharing links, pipeline stage imbalance beyond ceil(L/p) (interleaved chunks of unequal blocks"
        " included), load imbalance",
    ]
