"""AdamW and clipping by the global gradient norm, on any dict of arrays.

The same code updates the full parameters of the serial model and one rank's
shards of ``ParallelGPT`` (its ``params`` / ``grads`` dicts): AdamW is
elementwise, so sharding the moments exactly like the parameters gives the
same numbers. Only the norm is global: the parallel model computes it across
the grid (``ParallelGPT.grad_norm``) and hands it to ``clip_grads``.
Padding zeros in weight shards stay zero (zero gradient, zero decay).

float16 training (mixed precision, as Megatron-LM's fp16 mode): the model's
float16 parameters get float32 master copies here, the moments are float32,
and the update is computed in float32 and rounded into the float16 copy (an
update of lr * ~1 on a weight of ~1 is below float16's resolution and would
vanish). ``LossScaler`` scales the loss so small gradients do not flush to
zero in float16, and skips the steps whose gradients overflowed.
"""

from __future__ import annotations

import math

from gpulab.backend import array_module
from gpulab.engine.gpt.config import squared_sum
from gpulab.engine.parallel import timeline


def is_decayed(name: str) -> bool:
    """nanoGPT decays the 2-D parameters (matmul weights, wte, wpe), not biases or LayerNorm."""
    return name.endswith(".weight") and ".ln_" not in name


class AdamW:
    """PyTorch's AdamW (decoupled weight decay), updating ``params`` in place."""

    def __init__(self, params: dict, lr: float = 1e-3, betas=(0.9, 0.95), eps: float = 1e-8,
                 weight_decay: float = 0.1):
        self.params, self.lr, self.betas, self.eps, self.weight_decay = params, lr, betas, eps, weight_decay
        # float32 master copies of parameters stored in less (float16)
        self.master = {n: p.astype("float32") for n, p in params.items() if p.dtype.itemsize < 4}
        self.m = {n: array_module(p).zeros_like(self._weights(n)) for n, p in params.items()}  # first moment
        self.v = {n: array_module(p).zeros_like(self._weights(n)) for n, p in params.items()}  # second moment
        self.t = 0

    def _weights(self, name: str):
        """The array the update is applied to: the master copy if there is one."""
        return self.master.get(name, self.params[name])

    def step(self, grads: dict, lr: float | None = None, grad_scale: float = 1.0) -> None:
        """One update; ``grads`` are multiplied by ``grad_scale`` first (clipping, loss unscaling)."""
        lr = self.lr if lr is None else lr
        b1, b2 = self.betas
        self.t += 1
        bias1, bias2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        for name, p in self.params.items():
            w, g, m, v = self._weights(name), grads[name], self.m[name], self.v[name]
            xp = array_module(w)
            if g.dtype != w.dtype:
                g = g.astype(w.dtype)
            if grad_scale != 1.0:
                g = g * grad_scale
            if self.weight_decay and is_decayed(name):
                w *= 1 - lr * self.weight_decay
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            w -= (lr / bias1) * m / (xp.sqrt(v) / math.sqrt(bias2) + self.eps)
            if w is not p:
                p[...] = w.astype(p.dtype)

    def state_dict(self) -> dict:
        return {"t": self.t, "m": self.m, "v": self.v, "master": self.master}

    def load_state_dict(self, state: dict) -> None:
        self.t = int(state["t"])
        for name in self.params:
            self.m[name][...] = state["m"][name]
            self.v[name][...] = state["v"][name]
        for name, w in self.master.items():  # without saved masters, keep the ones made from params
            if state.get("master") and name in state["master"]:
                w[...] = state["master"][name]
                self.params[name][...] = w.astype(self.params[name].dtype)


def global_norm(grads: dict) -> float:
    """L2 norm of all gradients together (serial: every value is held once)."""
    return math.sqrt(sum(squared_sum(g) for g in grads.values()))


def clip_grads(grads: dict, max_norm: float, norm: float) -> float:
    """Scale ``grads`` in place so the global ``norm`` is at most ``max_norm`` (PyTorch's rule)."""
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        for g in grads.values():
            g *= coef
    return min(coef, 1.0)


class LossScaler:
    """Dynamic loss scaling for float16 (the rule of PyTorch's GradScaler).

    The loss (in practice the gradient of the loss) is multiplied by ``scale``
    so that small gradients stay above float16's smallest normal value, 6e-5.
    ``update(norm)`` takes the global norm of the *scaled* gradients: if it is
    not finite some gradient overflowed (float16 ends at 65504), the step must
    be skipped and the scale halves; after ``growth_interval`` good steps in a
    row it doubles. Disabled (scale 1, every step taken) for float32/float64.
    """

    def __init__(self, enabled: bool = True, init_scale: float = 2.0 ** 16, growth_interval: int = 2000):
        self.enabled, self.growth_interval = enabled, growth_interval
        self.scale = init_scale if enabled else 1.0
        self.good_steps = self.skipped = 0

    def update(self, norm: float) -> bool:
        """True if the step may be taken."""
        if not self.enabled:
            return True
        if not math.isfinite(norm):
            self.scale, self.good_steps, self.skipped = self.scale / 2, 0, self.skipped + 1
            return False
        self.good_steps += 1
        if self.good_steps % self.growth_interval == 0:
            self.scale *= 2
        return True


def train_step(gpt, opt: AdamW, batch, lr: float | None = None, max_norm: float = 1.0,
               scaler: LossScaler | None = None) -> dict:
    """One step of a ``ParallelGPT``: forward + backward (loss scaled), global norm, clipping, AdamW.

    Returns the loss, the (unscaled) gradient norm and whether the step was
    skipped (float16 gradients that overflowed).
    """
    scaler = scaler or LossScaler(enabled=False)
    scale = scaler.scale
    loss = gpt.forward_backward(*batch, loss_scale=scale)
    with timeline.phase("step"):
        norm = gpt.grad_norm()
        taken = scaler.update(norm)
        if taken:
            coef = min(1.0, max_norm / (norm / scale + 1e-6))  # PyTorch's clip_grad_norm_ rule
            opt.step(gpt.grads, lr=lr, grad_scale=coef / scale)
    return {"loss": loss, "grad_norm": norm / scale, "skipped": not taken}
