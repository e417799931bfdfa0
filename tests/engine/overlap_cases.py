"""Rank functions for the overlap tests (run by tests.mpi_harness.run_mpi)."""

from __future__ import annotations

import itertools

import numpy as np

from gpulab.backend import to_device, to_host
from gpulab.engine import Mesh, ParallelGPT
from gpulab.engine.parallel import collectives as coll
from gpulab.engine.parallel import timeline
from gpulab.engine.parallel.memory import memory_report
from gpulab.engine.parallel.overlap import SWITCHES, Overlap
from gpulab.engine.perf.volume import collective_calls
from gpulab.engine.training.optim import AdamW, clip_grads
from tests.engine.util import random_batch, random_params, tiny_config
from tests.mpi_steps import step

B = 8

VARIANTS = {  # label -> Overlap; small buckets so that every group gets several
    "oar": Overlap(oar=True),
    "ors": Overlap(ors=True),
    "oag": Overlap(oag=True),
    "cache": Overlap(cache=True),
    "buckets": Overlap(buckets=True, bucket_bytes=600),
    "all": Overlap.everything(bucket_bytes=600),
    "all, no progress": Overlap.everything(bucket_bytes=2000, progress="none"),
    "all, progress thread": Overlap.everything(bucket_bytes=2000, progress="thread"),
}


def every_combination(bucket_bytes=600) -> dict:
    """Every subset of the five switches (32), labelled like ``Overlap.label``."""
    out = {}
    for bits in itertools.product((False, True), repeat=len(SWITCHES)):
        ov = Overlap(**dict(zip(SWITCHES, bits)), bucket_bytes=bucket_bytes)
        out[ov.label()] = ov
    return out


def _key(calls):
    return sorted((c["op"], c["group"], c["nbytes"]) for c in calls)


def _train(gpt, steps, cfg, seed):
    opt = AdamW(gpt.params, lr=1e-2)
    losses = []
    for k in range(steps):
        x, y = random_batch(cfg, B, seed=seed + 10 + k)
        losses.append(gpt.forward_backward(x, y))
        clip_grads(gpt.grads, 0.5, gpt.grad_norm())
        opt.step(gpt.grads)
    return losses, gpt.full_params()


def _max_diff(a: dict, b: dict) -> float:
    return max(float(np.abs(a[n] - b[n]).max()) for n in a)


def identical_numbers(comm, shapes, variants=None, steps=2, seed=0, device="host"):
    """Loss, gradients and a few AdamW steps with each overlap variant against overlap off, and
    the collectives issued against ``collective_calls(..., overlap=)``; float64, arrays on ``device``.
    ``variants``: labels of ``VARIANTS`` (None: all of them), or "every": all 32 switch combinations."""
    out = []
    for shape in map(tuple, shapes):
        mesh = Mesh(*shape, comm=comm)
        cfg = tiny_config(shape)
        params = {n: to_device(v, device) for n, v in random_params(cfg, seed=seed).items()}
        pristine = {n: to_host(v) for n, v in params.items()}
        idx, targets = random_batch(cfg, B, seed=seed)
        step(f"{shape}: overlap off")
        ref = ParallelGPT(cfg, mesh)
        ref.load_params(params)
        ref_loss = ref.forward_backward(idx, targets)
        ref_grads = ref.full_grads()
        ref.load_params(params)
        ref_losses, ref_trained = _train(ref, steps, cfg, seed)
        chosen = VARIANTS if variants is None else every_combination() if variants == "every" \
            else {label: VARIANTS[label] for label in variants}
        for label, ov in chosen.items():
            step(f"{shape}: {label}")
            gpt = ParallelGPT(cfg, mesh, overlap=ov)
            gpt.load_params(params)
            with coll.trace() as calls, timeline.record() as tl:
                loss = gpt.forward_backward(idx, targets)
            assert coll.in_flight() == 0, "a collective was left in flight"
            predicted = collective_calls(cfg, shape, B, idx.shape[1], overlap=ov)
            assert _key(calls) == _key(predicted), (shape, label)
            grads = gpt.full_grads()
            gpt.load_params(params)
            losses, trained = _train(gpt, steps, cfg, seed)
            gpt.free()
            diffs = {"loss": abs(loss - ref_loss), "grads": _max_diff(grads, ref_grads),
                     "train_loss": max(abs(a - b) for a, b in zip(losses, ref_losses)),
                     "params": _max_diff(trained, ref_trained)}
            assert max(diffs.values()) <= 1e-12, (shape, label, diffs)
            comm_events = [e for e in tl.events if e["kind"] == "comm"]
            assert len(comm_events) == len(calls), (shape, label)  # one timed event per call
            summary = timeline.summarize(tl.events)
            out.append({"shape": list(shape), "variant": label, "bitwise": max(diffs.values()) == 0.0,
                        **diffs, "n_calls": len(calls),
                        "async_calls": sum(e["async"] for e in comm_events),
                        "hidden_s": summary["hidden_comm_s"], "exposed_s": summary["exposed_comm_s"],
                        "memory": memory_report(gpt)})
        assert _max_diff({n: to_host(v) for n, v in params.items()}, pristine) == 0.0, \
            "training wrote into the caller's parameters"
        mesh.free()
    return out


def timeline_gather(comm, shape):
    """A recorded iteration gathered on rank 0: every rank's events, one clock, sane summaries."""
    mesh = Mesh(*shape, comm=comm)
    cfg = tiny_config(shape)
    gpt = ParallelGPT(cfg, mesh, overlap=Overlap.everything(bucket_bytes=600))
    gpt.load_params(random_params(cfg))
    idx, targets = random_batch(cfg, B)
    with timeline.record() as tl:
        gpt.forward_backward(idx, targets)
    everyone = timeline.gather(tl, comm, root=0)
    mesh.free()
    if comm.rank != 0:
        assert everyone is None
        return None
    summaries = [timeline.summarize(events) for events in everyone]
    return {"n_ranks": len(everyone), "summaries": summaries,
            "kinds": sorted({e["kind"] for e in everyone[0]}),
            "phases": [e["name"] for e in everyone[0] if e["kind"] == "phase"],
            "kernels": sum(e["kind"] == "compute" for e in everyone[0]),
            "latest_start": max(e["start"] for events in everyone for e in events)}


def node_cores_under_affinity(world, cores: list[list[int]]) -> tuple[int, int]:
    """``probes.node_ranks_and_cores`` with each rank first bound to ``cores[rank]`` (its own affinity)."""
    import os

    from gpulab.engine.perf.probes import node_ranks_and_cores

    os.sched_setaffinity(0, cores[world.rank])
    return node_ranks_and_cores(world)
