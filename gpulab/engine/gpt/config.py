"""GPTConfig: the size of a GPT model, validated when it is made.

    cfg = GPTConfig(vocab_size=32, block_size=8, n_layer=2, n_head=2, n_embd=16)

Names follow nanoGPT. ``dtype`` is the floating type of parameters and
activations ("float64" for gradient checks, "float32" for training,
"float16" for mixed precision: float32 master weights in the optimizer, loss
scaling, float32 sums for the loss and the gradient norm; see
``gpulab.engine.training.optim``). bfloat16 is not offered: neither numpy nor CuPy has
the dtype.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

_DTYPES = ("float16", "float32", "float64")


def accum_dtype(dtype) -> str:
    """The type long sums are taken in: float32 for float16 values (their sum overflows at 65504)."""
    return np.promote_types(dtype, np.float32).name


def squared_sum(g) -> float:
    """Sum of squares of ``g``, in float32 at least (float16 squares overflow above 256)."""
    g = g if g.dtype == accum_dtype(g.dtype) else g.astype(accum_dtype(g.dtype))
    return float((g * g).sum())


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int  # V: number of token ids
    block_size: int  # T_max: longest sequence (rows of wpe)
    n_layer: int
    n_head: int  # nh
    n_embd: int  # C = nh * hs
    dtype: str = "float64"

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"GPTConfig.{name} must be an int, got {value!r}")
            if value < 1:
                raise ValueError(f"GPTConfig.{name} must be >= 1, got {value}")
            object.__setattr__(self, name, int(value))
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head}): "
                             "each head gets n_embd // n_head features")
        try:
            dtype = np.dtype(self.dtype).name
        except TypeError:
            dtype = None
        if dtype not in _DTYPES:
            raise ValueError(f"GPTConfig.dtype must be one of {_DTYPES}, got {self.dtype!r}")
        object.__setattr__(self, "dtype", dtype)

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head  # hs

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        return cls(**d)
