"""Bytes on the wire per GPU and iteration, by group: what a plot of "traffic" shows.

    wire_by_group(cfg, (4, 8, 2, 16), global_batch=1024, value_bytes=2, micro_batches=8, pipe=2)
    # {"col": ..., "row": ..., "depth": ..., "data": ..., "batch": ..., "pipe": ...}
    tensor_parallel_volume(cfg, gpus=[8, 16, ...], global_batch=..., machine=m)   # 1D vs 3D

A collective's buffer is not what a rank sends: with the bandwidth-optimal
ring, all-reduce sends 2(p-1)/p of the buffer, all-gather and reduce-scatter
(p-1)/p (``machines.ring``, the same factors ``collectives.trace()`` records
from a live run and ``volume.collective_calls`` predicts; the tests check
those two equal). So ZeRO-3 over p replicas (two all-gathers and a
reduce-scatter of the parameters) sends 3(p-1)/p N, 1.5x DDP's one
all-reduce of 2(p-1)/p N, not 3x.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from gpulab.engine.parallel.gpt import check_divisibility
from gpulab.engine.parallel.mesh import grid_shapes
from gpulab.engine.perf.pipeline import p2p_bytes, stage_config
from gpulab.engine.perf.predict import predict
from gpulab.engine.perf.rings import ring
from gpulab.engine.perf.terms import comm_rows

SYNC = ("data", "batch")  # once per iteration; the rest once per micro-batch


def wire_by_group(config, shape, *, global_batch: int, value_bytes: float, micro_batches: int = 1, pipe: int = 1,
                  overlap=None, recompute: bool = False, zero: int = 0, seq_len: int | None = None) -> dict:
    """Bytes one GPU of the busiest stage sends per iteration, by group (``terms.comm_rows`` with
    the ring factor; forward's collectives twice with recomputation). ``zero`` >= 1 (the engine's
    ``distributed_optimizer``): each gradient bucket reduce-scattered, the parameters all-gathered
    after the step, the all-reduce's bytes; ZeRO-3 over data all-gathers the weight shards twice
    (forward and backward): 3 (p-1)/p N, not 2 (p-1)/p N."""
    T = seq_len or config.block_size
    stage = stage_config(config, pipe)
    micro = global_batch // micro_batches
    scale = value_bytes / np.dtype(config.dtype).itemsize
    out = defaultdict(float)
    for row in comm_rows(stage, shape, micro, T, overlap, grad_norm=False, distributed_optimizer=zero >= 1):
        factor = ring(row["op"], row["group_size"])[1]
        times = row["count"] * (2 if recompute and row["phase"] == "forward" else 1)
        per_iter = 1 if row["group"] in SYNC and row["phase"] in ("grad-sync", "optimizer") else micro_batches
        if zero >= 3 and row["group"] == "data" and row["layer"] == "params":
            factor *= 2
        out[row["group"]] += factor * row["nbytes"] * scale * times * per_iter
    if pipe > 1:  # activations forward and their gradient back, each micro-batch, on a middle stage
        out["pipe"] += 2 * micro_batches * p2p_bytes(config, shape, micro, value_bytes, T)
    return dict(out)


def tensor_parallel_volume(config, gpus, *, global_batch: int, machine, overlap=None,
                           seq_len: int | None = None) -> list[dict]:
    """Per-GPU bytes on the wire per iteration when ``g`` GPUs split one model replica (no data
    parallelism): Megatron-style 1D tensor parallelism (row = g) against AxoNN's 3D, at the
    (row, col, depth) the performance model predicts fastest. Sizes that cannot split the model
    (heads, width, vocabulary, batch) are left out of either."""
    rows = []
    for g in gpus:
        row = {"gpus": g, "1d": None, "3d": None, "3d_shape": None}
        one_d = (g, 1, 1, 1)
        if _splits(config, one_d, global_batch):
            row["1d"] = sum(wire_by_group(config, one_d, global_batch=global_batch, overlap=overlap,
                                          value_bytes=machine.value_bytes, seq_len=seq_len).values())
        shapes = [s for s in grid_shapes(g) if s[3] == 1 and _splits(config, s, global_batch)]
        if shapes:
            best = min(shapes, key=lambda s: predict(config, s, global_batch, machine, overlap, seq_len=seq_len,
                                                     flash_attention=True)["iter_s"])
            row["3d_shape"] = list(best)
            row["3d"] = sum(wire_by_group(config, best, global_batch=global_batch, overlap=overlap,
                                          value_bytes=machine.value_bytes, seq_len=seq_len).values())
        rows.append(row)
    return rows


def _splits(config, shape, batch) -> bool:
    try:
        check_divisibility(config, shape, batch)
    except ValueError:
        return False
    return True
