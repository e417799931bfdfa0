"""Rank functions for the calculator's checks (run by tests.mpi_harness; see test_memory_engine.py).

Each case trains a model a few steps on a grid (with pipeline stages and overlap as given) and
returns, for this rank: what ``memory_report`` accounts, what the memory model predicts for the
rank's stage, the peak of numpy's arrays that tracemalloc saw during one training step, and
the wire bytes of the collectives traced in another step beside the model's.
"""

from __future__ import annotations

import tracemalloc
from collections import defaultdict

import numpy as np

from gpulab.engine import GPTConfig, Mesh, ParallelGPT
from gpulab.engine.parallel import collectives as coll
from gpulab.engine.parallel.memory import memory_report
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.perf.memory_model import KINDS, engine_precision, stage_memory
from gpulab.engine.perf.volume import collective_calls
from gpulab.engine.training.optim import AdamW
from tests.engine.util import random_batch, random_params
from tests.mpi_steps import step

B = 8
OVERLAPS = {"none": None, "cache": Overlap(cache=True), "oag": Overlap(oag=True),
            "all": Overlap.everything(bucket_bytes=4096)}
# Megatron-LM's activation options of ``ParallelGPT`` (sequence parallelism needs row > 1)
MODES = {"plain": {}, "full": {"recompute": "full"}, "selective": {"recompute": "selective"},
         "sp": {"sequence_parallel": True}, "sp+selective": {"sequence_parallel": True, "recompute": "selective"},
         "sp+full": {"sequence_parallel": True, "recompute": "full"}}


def memory_config(n_layer: int = 4) -> GPTConfig:
    """Big enough that numpy's arrays, not Python's objects, fill the traced memory; every grid of
    up to 8 ranks splits it (C = 96, 8 heads, V = 96)."""
    return GPTConfig(vocab_size=96, block_size=32, n_layer=n_layer, n_head=8, n_embd=96, dtype="float64")


def _array_bytes() -> int:
    snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
    return sum(s.size for s in snap.statistics("filename"))


def _step(gpt, opt, batch) -> None:
    gpt.forward_backward(*batch)
    opt.step(gpt.grads)
    gpt.grads = {}  # dropped after the update (PyTorch's zero_grad(set_to_none=True)): one copy at a time


def _wire(rows, key_group="group") -> dict:
    out = defaultdict(float)
    for r in rows:
        out[f"{r[key_group]} {r['op']}"] += r["sent_bytes" if "sent_bytes" in r else "wire_bytes"]
    return dict(out)


def memory_and_wire(comm, cases):
    """For each [shape, pipe, micro, schedule, overlap label(, mode label)]: this rank's accounted,
    predicted and traced bytes, and wire bytes by group and op (traced, and predicted where the model
    has them)."""
    out = []
    if not tracemalloc.is_tracing():
        tracemalloc.start()
    for shape, pipe, micro, kind, label, *mode in cases:
        shape, ov = tuple(shape), OVERLAPS[label]
        mode = mode[0] if mode else "plain"
        options = MODES[mode]
        where = f"{shape} pipe={pipe} m={micro} {kind} overlap={label}" + (f" {mode}" if options else "")
        step(f"{where}: build")
        mesh = Mesh(*shape, comm=comm, pipe=pipe)
        cfg = memory_config()
        gpt = ParallelGPT(cfg, mesh, overlap=ov, micro_batches=micro, schedule=kind, **options)
        gpt.load_params(random_params(cfg))
        opt = AdamW(gpt.params, lr=1e-3)
        batch = random_batch(cfg, B)
        step(f"{where}: warm-up step")
        _step(gpt, opt, batch)
        other = _array_bytes()
        other = tracemalloc.get_traced_memory()[0] - other  # Python's objects, not arrays
        tracemalloc.reset_peak()
        step(f"{where}: traced step")
        gpt.forward_backward(*batch)
        accounted = memory_report(gpt)
        opt.step(gpt.grads)
        traced_peak = tracemalloc.get_traced_memory()[1] - other
        gpt.grads = {}
        step(f"{where}: wire step")
        with coll.trace() as calls:
            gpt.forward_backward(*batch)
        predicted = stage_memory(cfg, shape, mesh.stage, global_batch=B, precision=engine_precision(cfg.dtype),
                                 pipe=pipe, micro_batches=micro, schedule_kind=kind, overlap=ov, **options)
        wire_model = _wire(collective_calls(cfg, shape, B, overlap=ov)) if pipe == 1 and not options else None
        gpt.free()
        mesh.free()
        out.append({"case": where, "rank": comm.rank, "stage": mesh.stage, "accounted": accounted,
                    "predicted": {k: predicted[k] for k in (*KINDS, "total")}, "traced_peak": traced_peak,
                    "wire": _wire(calls), "wire_model": wire_model,
                    "pipe_sent": sum(c["sent_bytes"] for c in calls if c["group"] == "pipe")})
    return out
