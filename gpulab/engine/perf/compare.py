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

import math

from gpulab.engine.parallel.gpt import check_divisibility
from gpulab.engine.parallel.pipeline import bubble_fraction
from gpulab.engine.perf import pipeline
from gpulab.engine.perf.flops import model_flops
from gpulab.engine.perf.predict import predict
from gpulab.engine.perf.terms import activation_bytes
from gpulab.engine.strategies import TABLE, describe, lookup, shapes_for

SYNC_GROUPS = ("data", "batch")  # the gradient synchronisation, once per iteration
OPTIMIZER_BYTES = 12  # of the 16 per parameter: fp32 master weight, momentum, variance


def powers_of_two(limit: int) -> list[int]:
    return [1 << k for k in range(int(math.log2(limit)) + 1)] if limit >= 1 else []


def evaluate(config, shape, *, pipe: int, micro_batches: int, recompute: bool, global_batch: int, machine,
             overlap=None, flash_attention: bool = True, seq_len: int | None = None,
             distributed_optimizer: bool = False) -> dict:
    """One configuration's predicted iteration, memory and MFU (see the module docstring)."""
    T = seq_len or config.block_size
    stage = pipeline.stage_config(config, pipe)
    micro = global_batch // micro_batches  # sequences per micro-batch, all replicas together
    p = predict(stage, shape, micro, machine, overlap, seq_len=T, recompute=recompute,
                flash_attention=flash_attention)
    sync = sum(g["exposed_s"] for name, g in p["groups"].items() if name in SYNC_GROUPS)
    slot = p["iter_s"] - sync
    p2p = pipeline.p2p_s(config, shape, pipe, micro_batches, micro, machine, T)
    iter_s = (micro_batches + pipe - 1) * slot + sync + p2p
    exposed = (micro_batches + pipe - 1) * (p["exposed_comm_s"] - sync) + sync + p2p
    acts = activation_bytes(stage, shape, micro, T, recompute=recompute, flash_attention=flash_attention)
    state = p["memory"]["parameter_state"]
    if distributed_optimizer:  # fp32 master, momentum, variance (12 of the bytes) sharded over the P replicas
        state *= (machine.state_bytes_per_param - OPTIMIZER_BYTES * (1 - 1 / shape[3])) / machine.state_bytes_per_param
    memory = {"parameter_state": state, "weight_cache": p["memory"]["weight_cache"],
              "activations": acts * pipeline.in_flight(pipe, micro_batches)}
    memory["total"] = sum(memory.values())
    world = math.prod(shape) * pipe
    flops = model_flops(config, global_batch, T)
    return {"shape": list(shape), "pipe": pipe, "micro_batches": micro_batches, "recompute": recompute,
            "config": describe(shape, pipe), "iter_s": iter_s, "exposed_comm_s": exposed,
            "comm_share": exposed / iter_s, "bubble": bubble_fraction(pipe, micro_batches),
            "bubble_s": (pipe - 1) * slot, "p2p_s": p2p, "grad_sync_s": sync, "memory": memory,
            "fits": memory["total"] <= machine.usable_memory * machine.memory_bytes,
            "mfu": flops / (iter_s * world * machine.peak),
            "mfu_matmul": flops / (iter_s * world * machine.peak * machine.matmul_efficiency),
            "sequences_per_gpu": global_batch / (shape[2] * shape[3]) / micro_batches}


def time_split(row: dict) -> dict:
    """An evaluated iteration cut into parts that add up to it: compute of the m useful micro-batch slots,
    exposed communication outside the bubble (slots, gradient sync, stage-to-stage sends), and the
    bubble's p - 1 idle slots (``bubble_s``, their computation and communication both)."""
    m, p = row["micro_batches"], row["pipe"]
    compute = (row["iter_s"] - row["exposed_comm_s"]) * m / (m + p - 1)
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


def best(strategy: str, config, world: int, global_batch: int, machine, overlap=None,
         flash_attention: bool = True, seq_len: int | None = None, distributed_optimizer: bool = False) -> dict:
    """The fastest configuration of ``strategy`` that fits, or the reason none does (``why``);
    for one that searches every shape (axonn) also the fastest with tensor parallelism (row x col > 1)."""
    record = lookup(strategy)
    fastest, smallest, with_tp, n = None, None, None, 0
    for shape, pipe, m in configurations(strategy, config, world, global_batch, machine.ranks_per_node):
        for recompute in (False, True):
            n += 1
            row = evaluate(config, shape, pipe=pipe, micro_batches=m, recompute=recompute,
                           global_batch=global_batch, machine=machine, overlap=overlap,
                           flash_attention=flash_attention, seq_len=seq_len,
                           distributed_optimizer=distributed_optimizer)
            if row["fits"] and (fastest is None or row["iter_s"] < fastest["iter_s"]):
                fastest = row
            if row["fits"] and shape[0] * shape[1] > 1 and (with_tp is None or row["iter_s"] < with_tp["iter_s"]):
                with_tp = row
            if smallest is None or row["memory"]["total"] < smallest["memory"]["total"]:
                smallest = row
    out = {"strategy": strategy, "description": record.description, "searched": n}
    if record.every_shape and with_tp is not None:  # is tensor parallelism part of the winner?
        out["best_with_tensor_parallelism"] = with_tp
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


def assumptions(machine, global_batch: int, seq_len: int, overlap, distributed_optimizer: bool = False) -> list[str]:
    return [
        f"global batch {global_batch} sequences x {seq_len} tokens = {global_batch * seq_len / 1e6:.2f} M tokens",
        f"overlap {overlap.label() if overlap is not None else 'none'}; flash attention (no T x T scores kept)",
        "searched per strategy: grid shapes, micro-batches per iteration (powers of two), recomputation on/off;"
        " the fastest that fits is shown",
        f"Megatron-LM: TP over row inside a node (<= {machine.ranks_per_node} GPUs), pipeline p (power of two,"
        " <= layers; the busiest stage holds ceil(L/p) blocks and the LM head), 1F1B: (m+p-1) slots, bubble"
        " (p-1)/(m+p-1), 2(m+p-1) stage-to-stage sends of b T C / TP values over the network",
        "memory per GPU: weights+gradients+AdamW at "
        f"{machine.state_bytes_per_param} bytes/parameter of the rank's shard (sharded over depth; "
        + ("the 12 bytes of AdamW's fp32 states also over data: distributed optimizer"
           if distributed_optimizer else "not over data: no distributed optimizer")
        + "), gathered weights in flight, activations of min(p, m) micro-batches"
        " (Korthikanti et al.: s b h (10/col + 24/row) bytes per layer; with recomputation 2 s b h/col per"
        f" layer + one layer); fits if <= {machine.usable_memory:.0%} of {machine.memory_bytes / 1e9:g} GB",
        "MFU: 6N per token + attention (recomputation not counted) over the datasheet peak"
        f" ({machine.peak / 1e12:g} TFLOP/s); 'MFU/matmul' over the assumed matmul rate"
        f" ({machine.matmul_efficiency:.0%} of peak)",
        "not modelled: small-GEMM inefficiency (one rate for every matmul size), contention between groups"
        " sharing links, pipeline stage imbalance beyond ceil(L/p), load imbalance",
    ]
