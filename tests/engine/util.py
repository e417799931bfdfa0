"""Shared helpers for the engine tests: tiny configs, perturbed parameters, errors."""

from __future__ import annotations

import numpy as np

from gpulab.engine import GPTConfig, init_params


def tiny_config(shape=(1, 1, 1, 1), dtype="float64", n_layer=2) -> GPTConfig:
    """A model every grid ``shape`` can split: C=18 where 2 and 3 suffice (so depth shards
    need padding), else 24; n_head a multiple of row; V = 13 * row (odd blocks again)."""
    R, C = shape[0], shape[1]
    n_embd = 18 if R in (1, 2, 3, 6) and C in (1, 2, 3, 6) else 24
    n_head = max(R, 2)
    return GPTConfig(vocab_size=13 * R, block_size=8, n_layer=n_layer, n_head=n_head,
                     n_embd=n_embd, dtype=dtype)


def random_params(config: GPTConfig, seed: int = 0) -> dict:
    """nanoGPT's init plus noise on everything, so biases and LayerNorm are not trivial."""
    rng = np.random.default_rng(seed + 1000)
    params = init_params(config, seed=seed)
    return {n: (p + rng.normal(0.0, 0.1, p.shape)).astype(config.dtype) for n, p in params.items()}


def random_batch(config: GPTConfig, batch_size: int, seq_len: int | None = None, seed: int = 0):
    rng = np.random.default_rng(seed + 2000)
    T = seq_len or config.block_size
    return (rng.integers(0, config.vocab_size, (batch_size, T)),
            rng.integers(0, config.vocab_size, (batch_size, T)))


def rel_err(a, b) -> float:
    """max |a - b| relative to max |b| (the scale of the reference)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = float(np.abs(b).max()) if b.size else 0.0
    return float(np.abs(a - b).max() / scale) if scale > 0 else float(np.abs(a - b).max())
