"""GradSync: sum each gradient over the ranks that saw other sequences, after or during backward.

    layout = BucketLayout(mesh, specs, cfg, bucket_bytes=ov.bucket_bytes if ov.buckets else None)
    sync = GradSync(specs, layout, bucketed=ov.buckets)
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

Each bucket's gradients live in one flat buffer, allocated when its first
gradient arrives: every gradient is copied into its slot as it is handed over
(a Handle's when it is waited for) and the all-reduce works on the buffer in
place, so a synced gradient is held once, never beside a concatenated copy
(PyTorch DDP's ``gradient_as_bucket_view``). ``storage(name, like)`` lends a
slot to a caller that sums into it (``pipeline_step.GradAccumulator``).

With ``BucketLayout(..., shard=True)`` (Megatron-LM's distributed optimizer,
``training.zero1.DistributedAdamW``) each bucket is reduce-scattered over its
group instead: member k of a group of g keeps the sums of the bucket's k-th
1/g (the buffer padded with zeros to a multiple of g), written back into its
place in the buffer; the rest of the buffer keeps this rank's own partial
sums, which nothing reads. The bytes on the wire are the all-reduce's first
half; the optimizer's all-gather of the updated parameters is the second.
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


class BucketLayout:
    """Where each gradient sits in its group's bucket buffers and, with ``shard``, which 1/g of each
    bucket this rank keeps the sums of (member k of the group: the k-th slice)."""

    def __init__(self, mesh, specs, config, bucket_bytes: int | None, shard: bool = False):
        self.shard = shard
        self.plans = group_plans(config, mesh.shape, bucket_bytes, specs)
        self.comms = {group: mesh.group(group) for group in self.plans}
        self.numel = {n: piece_numel(s, mesh.shape) for n, s in specs.items()}
        self.bucket_of = {n: (g, i) for g, plan in self.plans.items() for i, b in enumerate(plan) for n in b}
        self.slots: dict = {}  # name -> (offset, size) in its bucket's flat buffer
        self.size: dict = {}  # (group, i) -> values in the bucket's buffer (padded when sharded)
        for group, plan in self.plans.items():
            g = self.comms[group].Get_size()
            for i, names in enumerate(plan):
                offset = 0
                for n in names:
                    self.slots[n] = (offset, self.numel[n])
                    offset += self.numel[n]
                self.size[group, i] = -(-offset // g) * g if shard else offset

    def owned(self, key) -> tuple[int, int]:
        """The values of bucket ``key`` this rank holds summed after the sync: all, or its slice."""
        if not self.shard:
            return 0, self.size[key]
        comm = self.comms[key[0]]
        chunk = self.size[key] // comm.Get_size()
        return comm.Get_rank() * chunk, (comm.Get_rank() + 1) * chunk

    def owned_part(self, name: str) -> tuple[int, int]:
        """The values of ``name``'s flattened piece this rank holds summed (a, b); a == b: none."""
        if name not in self.bucket_of:
            return 0, self.numel[name]
        lo, hi = self.owned(self.bucket_of[name])
        offset, size = self.slots[name]
        a, b = min(max(lo - offset, 0), size), max(min(hi - offset, size), 0)
        return a, max(a, b)

    def gather(self, owned_values: dict, target: dict) -> None:
        """Write every rank's owned values (name -> 1-D array of its ``owned_part``) into ``target``'s
        pieces (contiguous, written through a flat view): one all-gather per sharded bucket."""
        for name in target:
            if name not in self.bucket_of or not self.shard:
                target[name].reshape(-1)[...] = owned_values[name]
        if not self.shard:
            return
        any_piece = next(iter(target.values()))
        xp = array_module(any_piece)
        for (group, i) in self.size:
            names = self.plans[group][i]
            lo, hi = self.owned((group, i))
            mine = xp.zeros(hi - lo, dtype=any_piece.dtype)
            for n in names:
                a, b = self.owned_part(n)
                start = self.slots[n][0] + a - lo
                mine[start:start + b - a] = owned_values[n]
            flat = coll.all_gather(mine, self.comms[group])
            for n in names:
                offset, size = self.slots[n]
                target[n].reshape(-1)[...] = flat[offset:offset + size]


class GradSync:
    def __init__(self, specs, layout: BucketLayout, bucketed: bool):
        self.specs, self.layout = specs, layout
        self.bucketed = bucketed
        self.plans, self.bucket_of, self.slots = layout.plans, layout.bucket_of, layout.slots
        self.flats: dict = {}  # (group, i) -> the bucket's buffer, once its first gradient arrived
        self.lent: dict = {}  # name -> the slot view handed out by ``storage``
        self.grads: dict = {}
        self.queued: list[tuple[str, list[str]]] = []  # complete buckets not yet issued
        self.flights: list = []  # (bucket key, Handle) of the buckets in flight

    def storage(self, name: str, like):
        """The array ``name``'s gradient is synced from, shaped like ``like`` (its slot in the bucket's
        buffer; None where it is synced alone): a caller may sum into it, then ``add`` it."""
        if name not in self.bucket_of:
            return None
        key = self.bucket_of[name]
        if key not in self.flats:
            flat = self.flats[key] = array_module(like).empty(self.layout.size[key], dtype=like.dtype)
            flat[sum(self.layout.numel[n] for n in self.plans[key[0]][key[1]]):] = 0  # the padding
        offset, size = self.slots[name]
        if like.size != size:
            raise ValueError(f"{name}: gradient of {like.size} values, its slot holds {size}")
        self.lent[name] = self.flats[key][offset:offset + size].reshape(like.shape)
        return self.lent[name]

    def _store(self, name: str, grad):
        """``grad`` in its slot (copied there unless it is the slot lent by ``storage``)."""
        if name not in self.bucket_of or self.lent.get(name) is grad:
            return grad
        slot = self.storage(name, grad)
        slot[...] = grad
        return slot

    def add(self, name: str, grad) -> None:
        """Hand over a gradient (an array, or a Handle whose wait() gives it)."""
        self.grads[name] = grad if isinstance(grad, coll.Handle) else self._store(name, grad)
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
        """Start the sync (all-reduce, or reduce-scatter when sharded) of every queued bucket whose
        gradients are ready (in plan order)."""
        while self.queued and all(self._ready(n, block) for n in self.queued[0][1]):
            group, names = self.queued.pop(0)
            key = (group, self.bucket_of[names[0]][1])
            flat, comm = self._flat(group, names), self.layout.comms[group]
            sync = coll.ireduce_scatter if self.layout.shard else coll.iall_reduce
            self.flights.append((key, sync(flat, comm)))

    def _keep(self, key, summed) -> None:
        """A reduce-scatter's result (this rank's slice of the sums) into its place in the bucket."""
        lo, hi = self.layout.owned(key)
        self.flats[key][lo:hi] = summed

    def _flat(self, group: str, names):
        """The bucket's buffer, every gradient in its slot."""
        for n in names:
            self._value(n)
        return self.flats[group, self.bucket_of[names[0]][1]]

    def _value(self, name):
        g = self.grads[name]
        if isinstance(g, coll.Handle):
            g = self.grads[name] = self._store(name, g.wait())
        return g

    def finish(self) -> dict:
        """Every gradient, summed over its group (sharded: this rank's ``layout.owned_part`` of it),
        in ``specs`` order."""
        for name in self.specs:
            if not self.bucketed or name not in self.bucket_of:
                self._value(name)
        # the syncs work in the buffers: the gradients, views of them, hold the sums once they end
        if self.bucketed:
            self._issue(block=True)
            for key, handle in self.flights:
                summed = handle.wait()
                if self.layout.shard:
                    self._keep(key, summed)
        else:
            for group, plan in self.plans.items():  # "data", then "batch": one flat buffer each
                flat, comm = self._flat(group, plan[0]), self.layout.comms[group]
                if self.layout.shard:
                    self._keep((group, 0), coll.reduce_scatter(flat, comm))
                else:
                    coll.all_reduce(flat, comm)
        return {n: self.grads[n] for n in self.specs}
