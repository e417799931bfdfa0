"""DistributedAdamW: AdamW with its state split over the data group (ZeRO-1, Megatron-LM's distributed optimizer).

    opt = DistributedAdamW(gpt.params, gpt.mesh.data_comm, lr=1e-3)
    opt.step(gpt.grads, lr=lr, grad_scale=coef)     # same call as AdamW.step

The P ranks of a data group hold the same parameter pieces and, after the
gradient synchronisation, the same summed gradients. Each keeps AdamW's
moments (and, for float16 models, the float32 master weights) for one
contiguous 1/P of their values only: the pieces are laid end to end in
``params`` order and cut into P equal chunks. A step updates the rank's
chunk with ``AdamW`` (elementwise, so the numbers are the serial
optimizer's) and all-gathers the chunks over the data group, so every rank
has every updated value again: optimizer memory / P, for one all-gather of
the parameters per step. The gradients here are all-reduced before the step
(``GradSync``) and each rank reads its chunk of them; Megatron-LM
reduce-scatters them instead, the same bytes as the all-reduce's first half,
and so does the performance model (``perf.compare``).

``m``, ``v`` and ``master`` give the whole state of this rank's pieces, as
``AdamW``'s do, for checkpoints: each call all-gathers it over the data
group (collective: every rank of the group must ask).
"""

from __future__ import annotations

import math

from gpulab.backend import array_module
from gpulab.engine.gpt.config import accum_dtype
from gpulab.engine.parallel import collectives as coll
from gpulab.engine.parallel.memory import optimizer_nbytes
from gpulab.engine.training.optim import AdamW


class DistributedAdamW:
    def __init__(self, params: dict, data_comm, **adam):
        self.params, self.comm = params, data_comm
        size, rank = data_comm.Get_size(), data_comm.Get_rank()
        self.offsets, total = {}, 0
        for name, p in params.items():
            if not p.flags.c_contiguous:
                raise ValueError(f"{name}: the optimizer writes the gathered values through a view, "
                                 "so each piece must be contiguous")
            self.offsets[name] = total
            total += p.size
        self.chunk = math.ceil(total / size)  # the last chunk is padded with nothing to update
        lo, hi = rank * self.chunk, min(total, (rank + 1) * self.chunk)
        self.owned = {}  # name -> (a, b): this rank's values of the flattened piece
        for name, p in params.items():
            o = self.offsets[name]
            a, b = max(lo, o) - o, min(hi, o + p.size) - o
            if a < b:
                self.owned[name] = (a, b)
        self.inner = AdamW({n: params[n].reshape(-1)[a:b].copy() for n, (a, b) in self.owned.items()}, **adam)

    @property
    def t(self) -> int:
        return self.inner.t

    @property
    def lr(self) -> float:
        return self.inner.lr

    def step(self, grads: dict, lr: float | None = None, grad_scale: float = 1.0) -> None:
        """AdamW on this rank's chunk, then every chunk to every rank of the data group."""
        self.inner.step({n: grads[n].reshape(-1)[a:b] for n, (a, b) in self.owned.items()}, lr, grad_scale)
        self._scatter_back(self.params, self.inner.params)

    def _gathered(self, chunk_values: dict, like: dict) -> dict:
        """Full pieces (shaped like ``like``, in the optimizer's dtype) from every rank's chunk values."""
        out = {n: array_module(p).zeros(p.shape, dtype=accum_dtype(p.dtype)) for n, p in like.items()}
        self._scatter_back(out, chunk_values)
        return out

    def _scatter_back(self, target: dict, chunk_values: dict) -> None:
        """All-gather the chunks over the data group and write them into ``target``'s pieces."""
        any_piece = next(iter(target.values()))
        xp = array_module(any_piece)
        mine = xp.zeros(self.chunk, dtype=any_piece.dtype)
        for name, (a, b) in self.owned.items():
            start = self.offsets[name] + a - self.comm.Get_rank() * self.chunk
            mine[start:start + b - a] = chunk_values[name]
        flat = coll.all_gather(mine, self.comm)
        for name, p in target.items():
            o = self.offsets[name]
            p.reshape(-1)[...] = flat[o:o + p.size]  # the pieces are contiguous: reshape is a view

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
        """``AdamW.load_state_dict``'s state (whole pieces): keep this rank's chunk of it."""
        def chunks(full: dict) -> dict:
            return {n: full[n].reshape(-1)[a:b] for n, (a, b) in self.owned.items()}

        self.inner.load_state_dict({"t": state["t"], "m": chunks(state["m"]), "v": chunks(state["v"]),
                                    "master": chunks(state["master"]) if state.get("master") else {}})
        if state.get("master"):
            self._scatter_back(self.params, self.inner.params)

    def state_nbytes(self) -> int:
        """Bytes of optimizer state this rank keeps (its chunk's moments and masters)."""
        return optimizer_nbytes(self.inner.params)
