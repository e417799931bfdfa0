"""Sample text from a trained GPT (serial forward pass on the full parameters)."""

from __future__ import annotations

import numpy as np

from gpulab.backend import to_host
from gpulab.engine.gpt.model import logits


def generate(params, config, prompt_ids, max_new_tokens: int, *, temperature: float = 1.0,
             top_k: int | None = None, n_valid: int | None = None, rng=None) -> list[int]:
    """Extend ``prompt_ids`` by ``max_new_tokens`` sampled ids.

    ``n_valid``: ids >= n_valid (vocabulary padding, never seen in training)
    are never sampled.
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    ids = list(prompt_ids)
    for _ in range(max_new_tokens):
        window = np.array([ids[-config.block_size:]])  # (1, T) at most block_size
        z = to_host(logits(params, window, config))[0, -1].astype(np.float64)  # (V,)
        if n_valid is not None:
            z[n_valid:] = -np.inf
        z = z / max(temperature, 1e-8)
        if top_k is not None and top_k < z.size:
            z[z < np.sort(z)[-top_k]] = -np.inf
        prob = np.exp(z - z.max())
        ids.append(int(rng.choice(z.size, p=prob / prob.sum())))
    return ids
