"""Rank functions for Megatron-LM's features in the engine (see test_megatron.py): what they save, what they
cost, and planted bugs that the exactness check must catch."""

from __future__ import annotations

from contextlib import contextmanager

from gpulab.engine import Mesh, ParallelGPT
from gpulab.engine.gpt import layers as L
from gpulab.engine.parallel import collectives as coll
from gpulab.engine.parallel import timeline
from gpulab.engine.parallel.memory import memory_report
from gpulab.engine.training.optim import AdamW
from gpulab.engine.training.zero1 import DistributedAdamW
from tests.engine.pipe_cases import equivalence
from tests.engine.util import random_batch, random_params, tiny_config

B = 8


def _model(comm, shape, n_layer=3):
    cfg = tiny_config(tuple(shape), "float64", n_layer=n_layer)
    return cfg, Mesh(*shape, comm=comm), random_params(cfg), random_batch(cfg, B)


def recompute_costs(comm, shape):
    """Activation bytes kept and the recomputation seen in the timeline, for each ``recompute``."""
    cfg, mesh, params, batch = _model(comm, shape)
    out = {}
    for mode in (None, "selective", "full"):
        gpt = ParallelGPT(cfg, mesh, recompute=mode)
        gpt.load_params(params)
        with timeline.record() as tl:
            gpt.forward_backward(*batch)
        kernels = [e["name"] for e in tl.events if e["kind"] == "compute"]
        out[str(mode)] = {"activations": memory_report(gpt)["activations"],
                          "attn_recompute_kernels": sum(k.endswith("attn recompute") for k in kernels),
                          "recompute_phases": sum(e["kind"] == "phase" and e["name"] == "recompute"
                                                  for e in tl.events),
                          "forward_kernels": sum(k.endswith(" fwd") for k in kernels)}
    R = mesh.shape.row
    b = B // (mesh.shape.depth * mesh.shape.data)
    # the attention probabilities: (b, n_head/R, T, T) float64 per block
    out["probabilities_bytes"] = cfg.n_layer * b * (cfg.n_head // R) * cfg.block_size ** 2 * 8
    mesh.free()
    return out


def sequence_parallel_costs(comm, shape):
    """Activation bytes and the row group's collectives, with and without sequence parallelism."""
    cfg, mesh, params, batch = _model(comm, shape)
    out = {}
    for sp in (False, True):
        gpt = ParallelGPT(cfg, mesh, sequence_parallel=sp)
        gpt.load_params(params)
        with coll.trace() as calls:
            gpt.forward_backward(*batch)
        _, cache = gpt.stage_forward(gpt._local_batch(*batch)[0])
        row = [c for c in calls if c["group"] == "row"]
        out[str(sp)] = {"activations": memory_report(gpt)["activations"],
                        "ln1_shape": list(cache.blocks[0].ln1[0].shape),
                        "row_ops": {op: sum(c["op"] == op for c in row)
                                    for op in ("all_reduce", "reduce_scatter", "all_gather")}}
    mesh.free()
    return out


def optimizer_memory(comm, shape):
    """AdamW's state bytes per rank against the distributed optimizer's."""
    cfg, mesh, params, _ = _model(comm, shape)
    gpt = ParallelGPT(cfg, mesh, distributed_optimizer=True)
    gpt.load_params(params)
    plain = memory_report(gpt, AdamW(gpt.params))["optimizer"]
    split = memory_report(gpt, DistributedAdamW(gpt))["optimizer"]
    values = sum(p.size for p in gpt.params.values())
    mesh.free()
    return {"adamw": plain, "distributed": split, "values": values}


def optimizer_wire(comm, shape, bucket_bytes=None):
    """One step's collectives (forward_backward and the optimizer's step, no norm) with AdamW and with the
    distributed optimizer, as traced, beside ``volume.collective_calls`` and ``wire.wire_by_group``."""
    from gpulab.engine.parallel.overlap import Overlap
    from gpulab.engine.perf.volume import collective_calls
    from gpulab.engine.perf.wire import wire_by_group

    cfg, mesh, params, batch = _model(comm, shape)
    ov = Overlap(buckets=True, bucket_bytes=bucket_bytes) if bucket_bytes else Overlap()
    out = {}
    for zero1 in (False, True):
        gpt = ParallelGPT(cfg, mesh, overlap=ov, distributed_optimizer=zero1)
        gpt.load_params(params)
        opt = DistributedAdamW(gpt, lr=1e-3) if zero1 else AdamW(gpt.params, lr=1e-3)
        with coll.trace() as calls:
            gpt.forward_backward(*batch)
            opt.step(gpt.grads)
        sent = {}
        for c in calls:
            sent[c["group"]] = sent.get(c["group"], 0.0) + c["sent_bytes"]
        model = collective_calls(cfg, tuple(shape), B, overlap=ov, distributed_optimizer=zero1)
        out[str(zero1)] = {
            "engine": sorted([c["group"], c["op"], c["nbytes"]] for c in calls),
            "model": sorted([r["group"], r["op"], r["nbytes"]] for r in model),
            "sent": sent,
            "wire": wire_by_group(cfg, tuple(shape), global_batch=B, value_bytes=8, overlap=ov, zero=int(zero1))}
        gpt.free()
    mesh.free()
    return out


# --- planted bugs: each breaks one feature the way a real implementation could go wrong ------------

@contextmanager
def _patched(owner, name, value):
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def _stale_parameters():
    """Full recomputation reads the parameters again in backward: change one between forward and backward
    (what an optimizer step or a weight update in between would do)."""
    real = ParallelGPT.stage_backward

    def stage_backward(self, *args, **kwargs):
        name = f"transformer.h.{self.layers[0]}.ln_1.weight"
        kept = self.params[name]
        self.params[name] = kept + 1e-3  # a new array: the forward's caches still hold the old one
        try:
            return real(self, *args, **kwargs)
        finally:
            self.params[name] = kept
    return _patched(ParallelGPT, "stage_backward", stage_backward)


def _wrong_heads():
    """Selective recomputation rebuilds the probabilities with half the heads per rank."""
    real_attention, real_backward = L.attention_forward, ParallelGPT._block_backward

    def block_backward(self, *args, **kwargs):
        with _patched(L, "attention_forward", lambda qkv, n_head: real_attention(qkv, max(1, n_head // 2))):
            return real_backward(self, *args, **kwargs)
    return _patched(ParallelGPT, "_block_backward", block_backward)


def _no_sequence_sum():
    """Sequence parallelism without the sum over row of LayerNorm's and wpe's gradients."""
    return _patched(ParallelGPT, "_sum_over_sequence", lambda self: None)


def _no_gather():
    """The distributed optimizer updates its chunk but never all-gathers: other chunks stay stale."""
    def scatter_back(self, target, chunk_values):
        for name, values in chunk_values.items():
            a, b = self.owned[name]
            target[name].reshape(-1)[a:b] = values
    return _patched(DistributedAdamW, "_scatter_back", scatter_back)


def _wrong_shard():
    """The reduce-scattered sums kept in the next member's slice of the bucket: this rank's own slice
    keeps its partial sums, which the optimizer then updates with."""
    from gpulab.engine.parallel.overlap_grads import GradSync

    def keep(self, key, summed):
        lo, hi = self.layout.owned(key)
        nxt = hi % self.layout.size[key]
        self.flats[key][nxt:nxt + hi - lo] = summed
    return _patched(GradSync, "_keep", keep)


BUGS = {"stale parameters in full recomputation": _stale_parameters,
        "wrong heads in selective recomputation": _wrong_heads,
        "no sum over the sequence": _no_sequence_sum,
        "no all-gather after the distributed step": _no_gather,
        "reduce-scattered sums kept in another rank's slice": _wrong_shard}


def planted(comm, bug, case):
    """Run the exactness check of ``case`` with ``bug`` planted: it must fail (returns its message)."""
    with BUGS[bug]():
        try:
            equivalence(comm, [case], steps=2)
        except AssertionError as err:
            return str(err)[:300]
    raise AssertionError(f"the exactness check passed with the bug {bug!r} planted")


def _stage_major():
    """Interleaving whose blocks sit stage-major (stage s holds chunks s V .. s V + V - 1) while the
    micro-batches still go round the stages: the blocks run out of order."""
    from gpulab.engine.parallel import gpt as gpt_module
    from gpulab.engine.parallel import pipeline

    def chunk_layers(n_layer, pipe, stage, virtual=1):
        return [pipeline.stage_layers(n_layer, pipe * virtual, stage * virtual + v) for v in range(virtual)]

    @contextmanager
    def both():
        with _patched(pipeline, "chunk_layers", chunk_layers), _patched(gpt_module, "chunk_layers", chunk_layers):
            yield
    return both()


BUGS["blocks placed stage-major under interleaving"] = _stage_major


def interleaved_timeline(comm, pipe, micro, virtual):
    """The recorded phases of an interleaved step: each stage's (op, micro-batch, chunk) in the schedule's
    order; the step's wall time and busy (phase) time on every rank."""
    from gpulab.engine.parallel.pipeline import schedule

    shape = (1, comm.size // pipe, 1, 1)
    mesh = Mesh(*shape, comm=comm, pipe=pipe)
    cfg = tiny_config(shape, n_layer=pipe * virtual)
    gpt = ParallelGPT(cfg, mesh, micro_batches=micro, schedule="interleaved", virtual_stages=virtual)
    gpt.load_params(random_params(cfg))
    with timeline.record() as tl:
        gpt.forward_backward(*random_batch(cfg, 4 * micro))
    got = [("F" if e["name"] == "forward" else "B", e["micro"], e["chunk"]) for e in tl.events
           if e["kind"] == "phase" and "micro" in e]
    assert got == schedule("interleaved", pipe, mesh.stage, micro, virtual), (mesh.stage, got)
    everyone = timeline.gather(tl, comm)
    mesh.free()
    return {"stage": mesh.stage, "phases": len(got), "events": everyone if comm.rank == 0 else None}
