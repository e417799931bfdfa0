"""GradSync: sum each gradient over the ranks that saw other sequences, after or during backward.

    sync = GradSync(mesh, specs, order=grad_order(cfg), dtype=cfg.dtype, overlap=Overlap(buckets=True))
    sync.add(name, grad)        # in backward, as each gradient appears (an array or a Handle)
    grads = sync.finish()       # every gradient, summed; waits for what is still in flight

Weight shards are summed over the data group (they were reduce-scattered over
depth already), every copied parameter (biases, LayerNorm, wpe) over
depth x data (``shards.grad_group``). Without buckets this is one flat
all-reduce per group after backward. With buckets (``Overlap.buckets``,
gpulab's addition to AxoNN), the gradients of each group are cut, in the
order backward produces them, into buckets of about ``bucket_bytes``
(``plan_buckets``); a full bucket's all-reduce is issued during backward as
soon as its gradients are ready (a weight shard whose reduce-scatter is still
in flight counts as ready once a non-blocking test sees it done), so it
travels while earlier layers compute. Bucket contents depend only on the
plan, never on timing: the sums are the same numbers either way.
"""

from __future__ import annotations

import numpy as np

from gpulab.backend import array_module
from gpulab.engine.gpt.model import WPE, WTE
from gpulab.engine.parallel import collectives as coll
from gpulab.engine.parallel.shards import grad_group, piece_numel

GROUPS = ("data", "batch")


def grad_order(config) -> list[str]:
    """Parameter names in the order ParallelGPT's backward produces their gradients."""
    order = ["transformer.ln_f.weight", "transformer.ln_f.bias"]
    for i in reversed(range(config.n_layer)):
        for part in ("mlp.c_proj", "mlp.c_fc", "ln_2", "attn.c_proj", "attn.c_attn", "ln_1"):
            order += [f"transformer.h.{i}.{part}.weight", f"transformer.h.{i}.{part}.bias"]
    return order + [WPE, WTE]


def plan_buckets(sizes: list[tuple[str, int]], bucket_bytes: int) -> list[list[str]]:
    """Cut (name, nbytes) pairs, in order, into buckets closed once they hold >= bucket_bytes."""
    buckets, current, held = [], [], 0
    for name, nbytes in sizes:
        current.append(name)
        held += nbytes
        if held >= bucket_bytes:
            buckets.append(current)
            current, held = [], 0
    return buckets + ([current] if current else [])


def group_plans(config, shape, bucket_bytes: int | None, specs) -> dict[str, list[list[str]]]:
    """Buckets per group ("data", "batch") for grid ``shape``; None: one bucket per group."""
    R, C, D, P = shape
    item = np.dtype(config.dtype).itemsize
    sizes = {"data": P, "batch": D * P}
    plans = {}
    for group in GROUPS:
        if sizes[group] == 1:
            continue
        members = [(n, piece_numel(specs[n], shape) * item) for n in grad_order(config)
                   if n in specs and grad_group(specs[n]) == group]  # specs: one pipeline stage's
        plans[group] = plan_buckets(members, bucket_bytes if bucket_bytes else 1 << 62)
    return plans


class GradSync:
    def __init__(self, mesh, specs, config, overlap):
        self.mesh, self.specs = mesh, specs
        self.bucketed = overlap.buckets
        self.plans = group_plans(config, mesh.shape, overlap.bucket_bytes if self.bucketed else None,
                                 specs)
        self.bucket_of = {n: (g, i) for g, plan in self.plans.items() for i, b in enumerate(plan)
                          for n in b}
        self.grads: dict = {}
        self.queued: list[tuple[str, list[str]]] = []  # complete buckets not yet issued
        self.flights: list[tuple[list[str], coll.Handle]] = []

    def add(self, name: str, grad) -> None:
        """Hand over a gradient (an array, or a Handle whose wait() gives it)."""
        self.grads[name] = grad
        if not self.bucketed or name not in self.bucket_of:
            return
        group, i = self.bucket_of[name]
        bucket = self.plans[group][i]
        if all(n in self.grads for n in bucket):
            self.queued.append((group, bucket))
        self._issue(block=False)

    def _ready(self, name: str, block: bool) -> bool:
        g = self.grads[name]
        return not isinstance(g, coll.Handle) or block or g.test()

    def _issue(self, block: bool) -> None:
        """Start the all-reduce of every queued bucket whose gradients are ready (in plan order)."""
        while self.queued and all(self._ready(n, block) for n in self.queued[0][1]):
            group, names = self.queued.pop(0)
            flat = self._concat(names)
            self.flights.append((names, coll.iall_reduce(flat, self.mesh.group(group))))

    def _concat(self, names):
        arrays = [self._value(n).reshape(-1) for n in names]
        return array_module(arrays[0]).concatenate(arrays)

    def _value(self, name):
        g = self.grads[name]
        if isinstance(g, coll.Handle):
            g = self.grads[name] = g.wait()
        return g

    def _unpack(self, names, flat) -> None:
        offset = 0
        for n in names:
            g = self.grads[n]
            self.grads[n] = flat[offset:offset + g.size].reshape(g.shape)
            offset += g.size

    def finish(self) -> dict:
        """Every gradient, summed over its group, in ``specs`` order."""
        for name in self.specs:
            if not self.bucketed or name not in self.bucket_of:
                self._value(name)
        if self.bucketed:
            self._issue(block=True)
            for names, handle in self.flights:
                self._unpack(names, handle.wait())
        else:
            for group, plan in self.plans.items():  # "data", then "batch": one flat buffer each
                names = plan[0]
                self._unpack(names, coll.all_reduce(self._concat(names), self.mesh.group(group)))
        return {n: self.grads[n] for n in self.specs}
