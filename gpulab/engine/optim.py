"""AdamW and clipping by the global gradient norm, on any dict of arrays.

The same code updates the full parameters of the serial model and one rank's
shards of ``ParallelGPT`` (its ``params`` / ``grads`` dicts): AdamW is
elementwise, so sharding the moments exactly like the parameters gives the
same numbers. Only the norm is global: the parallel model computes it across
the grid (``ParallelGPT.grad_norm``) and hands it to ``clip_grads``.
Padding zeros in weight shards stay zero (zero gradient, zero decay).
"""

from __future__ import annotations

import math

from gpulab.backend import array_module


def is_decayed(name: str) -> bool:
    """nanoGPT decays the 2-D parameters (matmul weights, wte, wpe), not biases or LayerNorm."""
    return name.endswith(".weight") and ".ln_" not in name


class AdamW:
    """PyTorch's AdamW (decoupled weight decay), updating ``params`` in place."""

    def __init__(self, params: dict, lr: float = 1e-3, betas=(0.9, 0.95), eps: float = 1e-8,
                 weight_decay: float = 0.1):
        self.params, self.lr, self.betas, self.eps, self.weight_decay = params, lr, betas, eps, weight_decay
        self.m = {n: array_module(p).zeros_like(p) for n, p in params.items()}  # first moment
        self.v = {n: array_module(p).zeros_like(p) for n, p in params.items()}  # second moment
        self.t = 0

    def step(self, grads: dict, lr: float | None = None) -> None:
        lr = self.lr if lr is None else lr
        b1, b2 = self.betas
        self.t += 1
        bias1, bias2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        for name, p in self.params.items():
            xp, g, m, v = array_module(p), grads[name], self.m[name], self.v[name]
            if self.weight_decay and is_decayed(name):
                p *= 1 - lr * self.weight_decay
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            p -= (lr / bias1) * m / (xp.sqrt(v) / math.sqrt(bias2) + self.eps)

    def state_dict(self) -> dict:
        return {"t": self.t, "m": self.m, "v": self.v}

    def load_state_dict(self, state: dict) -> None:
        self.t = int(state["t"])
        for name in self.params:
            self.m[name][...] = state["m"][name]
            self.v[name][...] = state["v"][name]


def global_norm(grads: dict) -> float:
    """L2 norm of all gradients together (serial: every value is held once)."""
    return math.sqrt(sum(float((g * g).sum()) for g in grads.values()))


def clip_grads(grads: dict, max_norm: float, norm: float) -> float:
    """Scale ``grads`` in place so the global ``norm`` is at most ``max_norm`` (PyTorch's rule)."""
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        for g in grads.values():
            g *= coef
    return min(coef, 1.0)
