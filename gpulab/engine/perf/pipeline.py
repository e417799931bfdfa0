"""Pipeline parallelism in the performance model: the busiest stage, point-to-point volume, memory in flight.

    stage_config(cfg, stages=4)                      # the GPT one stage holds (ceil(L/p) blocks)
    p2p_bytes(cfg, (4, 1, 1, 8), micro_batch=2, value_bytes=2)

The model of Megatron-LM's 1F1B schedule (Narayanan et al., SC'21), with
``p`` stages and ``m`` micro-batches per iteration: every stage runs m
forward and m backward micro-batch passes, and the last micro-batch's
backward reaches the first stage after p - 1 more slots, so one iteration
takes (m + p - 1) micro-batch slots, of which p - 1 are idle: the bubble,
(p - 1) / (m + p - 1) of the time; interleaved over v virtual stages, (m + (p - 1)/v)
slots and v times the sends (``gpulab.engine.parallel.pipeline.bubble_fraction``,
the engine's own schedules' bubble). Between neighbouring stages each
micro-batch sends its activations [b, T, C] forward and their gradient
backward; with tensor parallelism over R ranks each sends 1/R of it
(Megatron's scatter/gather of the p2p tensor). The first stage holds the
activations of min(p, m) micro-batches at once (1F1B starts p forwards
before the first backward). The engine's pipeline runs in
``gpulab.engine.parallel``; this module predicts one's time and memory.
"""

from __future__ import annotations

import math

from gpulab.engine.gpt.config import GPTConfig
from gpulab.engine.parallel.pipeline import schedule


def stage_config(config, stages: int) -> GPTConfig:
    """The busiest stage: ceil(L/p) blocks (embedding and LM head kept: the first and last stage hold them)."""
    return GPTConfig(**{**config.to_dict(), "n_layer": math.ceil(config.n_layer / stages)})


def in_flight(stages: int, micro_batches: int, virtual: int = 1) -> float:
    """Micro-batches' worth of activations the first stage holds at once: min(p, m) under 1F1B;
    interleaved, the most chunks in flight in its schedule (each 1/virtual of the stage), p + (p-1)/v."""
    if virtual == 1:
        return min(stages, micro_batches)
    ops = schedule("interleaved", stages, 0, micro_batches, virtual)
    live = held = 0
    for op in ops:
        live += 1 if op[0] == "F" else -1
        held = max(held, live)
    return held / virtual


def p2p_bytes(config, shape, micro_batch: int, value_bytes: int, seq_len: int | None = None) -> float:
    """Bytes one GPU sends to the next stage per micro-batch, each way (activations, then their gradient)."""
    R, _, D, P = shape
    T = seq_len or config.block_size
    return micro_batch / (D * P) * T * config.n_embd * value_bytes / R


def p2p_s(config, shape, stages: int, micro_batches: int, micro_batch: int, machine,
          seq_len: int | None = None, virtual: int = 1) -> float:
    """Time of the stage-to-stage sends on the critical path: 2 (m + p - 1) sends (forward and
    backward per slot), each alpha + bytes / bandwidth over the network (stages sit on other nodes);
    interleaved, every micro-batch crosses the stages ``virtual`` times: 2 (v m + p - 1) sends."""
    if stages == 1:
        return 0.0
    link = machine.inter
    one = link.alpha + p2p_bytes(config, shape, micro_batch, machine.value_bytes, seq_len) / link.bandwidth
    return 2 * (virtual * micro_batches + stages - 1) * one
