"""DistributedAdamW: AdamW with its state split over the data group (ZeRO-1, Megatron-LM's distributed optimizer).

    gpt = ParallelGPT(cfg, mesh, distributed_optimizer=True)   # gradients reduce-scattered
    opt = DistributedAdamW(gpt, lr=1e-3)
    opt.step(gpt.grads, lr=lr, grad_scale=coef)     # same call as AdamW.step

As Megatron-LM's distributed optimizer does: backward's gradient buckets are
reduce-scattered over the ranks that hold the same parameter pieces (weight
shards over data, copied pieces over depth x data: ``shards.grad_group``), so
member k of a group of g ends backward with the summed gradients of the k-th
1/g of each bucket (``overlap_grads.BucketLayout``). A step updates that slice
with ``AdamW`` (elementwise, so the numbers are the serial optimizer's; the
moments and, for float16 models, the float32 master weights are kept for the
slice only: optimizer memory / g) and all-gathers each bucket's updated
parameters over its group. Reduce-scatter plus all-gather send the bytes of the
all-reduce they replace, half in each (``perf.volume``, ``perf.wire``).
Pieces in no bucket (a group of one rank) are updated whole.

``m``, ``v`` and ``master`` give the whole state of this rank's pieces, as
``AdamW``'s do, for checkpoints: each call all-gathers it (collective: every
rank must ask).
"""

from __future__ import annotations

from gpulab.backend import array_module
from gpulab.engine.gpt.config import accum_dtype
from gpulab.engine.parallel.memory import optimizer_nbytes
from gpulab.engine.training.optim import AdamW


class DistributedAdamW:
    def __init__(self, gpt, **adam):
        if not gpt.distributed_optimizer:
            raise ValueError("DistributedAdamW needs ParallelGPT(..., distributed_optimizer=True): "
                             "its gradients must be reduce-scattered, each rank summing the slice it updates")
        self.params, self.layout = gpt.params, gpt.grad_layout
        for name, p in self.params.items():
            if not p.flags.c_contiguous:
                raise ValueError(f"{name}: the optimizer writes the gathered values through a view, "
                                 "so each piece must be contiguous")
        self.owned = {n: self.layout.owned_part(n) for n in self.params}  # name -> (a, b) of its flat piece
        self.inner = AdamW({n: self.params[n].reshape(-1)[a:b].copy() for n, (a, b) in self.owned.items()
                            if a < b}, **adam)

    @property
    def t(self) -> int:
        return self.inner.t

    @property
    def lr(self) -> float:
        return self.inner.lr

    def _mine(self, values: dict) -> dict:
        """This rank's slice of each piece of ``values`` (flat views)."""
        return {n: values[n].reshape(-1)[a:b] for n, (a, b) in self.owned.items() if a < b}

    def _slices(self, chunk_values: dict, like: dict) -> dict:
        """``chunk_values`` for every piece, empty where this rank holds none of it."""
        empty = array_module(next(iter(like.values()))).zeros(0, dtype=next(iter(like.values())).dtype)
        return {n: chunk_values.get(n, empty) for n in like}

    def step(self, grads: dict, lr: float | None = None, grad_scale: float = 1.0) -> None:
        """AdamW on this rank's slice (whose gradient sums the reduce-scatter left here), then each
        bucket's parameters all-gathered over its group."""
        self.inner.step(self._mine(grads), lr, grad_scale)
        self._scatter_back(self.params, self.inner.params)

    def _scatter_back(self, target: dict, chunk_values: dict) -> None:
        """Every rank's updated slices into ``target``'s pieces (one all-gather per bucket)."""
        self.layout.gather(self._slices(chunk_values, target), target)

    def _gathered(self, chunk_values: dict, like: dict) -> dict:
        """Full pieces (shaped like ``like``, in the optimizer's dtype) from every rank's slices."""
        out = {n: array_module(p).zeros(p.shape, dtype=accum_dtype(p.dtype)) for n, p in like.items()}
        self._scatter_back(out, chunk_values)
        return out

    @property
    def m(self) -> dict:
        return self._gathered(self.inner.m, self.params)

    @property
    def v(self) -> dict:
        return self._gathered(self.inner.v, self.params)

    @property
    def master(self) -> dict:
        return self._gathered(self.inner.master, self.params) if self.inner.master else {}

    def load_state_dict(self, state: dict) -> None:
        """``AdamW.load_state_dict``'s state (whole pieces): keep this rank's slice of it."""
        self.inner.load_state_dict({"t": state["t"], "m": self._mine(state["m"]), "v": self._mine(state["v"]),
                                    "master": self._mine(state["master"]) if state.get("master") else {}})
        if state.get("master"):
            self._scatter_back(self.params, self.inner.params)

    def state_nbytes(self) -> int:
        """Bytes of optimizer state this rank keeps (its slices' moments and masters)."""
        return optimizer_nbytes(self.inner.params)
