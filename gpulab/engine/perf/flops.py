"""Work in one training iteration: model FLOPs (for MFU) and what each rank of a grid computes.

    model_flops(cfg, batch_size=16, seq_len=64)          # the whole model, forward + backward
    rank_work(cfg, (R, C, D, P), batch_size=16, seq_len=64)
    # {"matmul_flops": ..., "elementwise": ..., "kernels": ...}  on one rank

Counting (2 FLOPs per multiply-add, causal mask not exploited, as the engine
computes the full T x T scores): a Linear [n, k] costs 2Mnk forward and twice
that backward (dX and dW); attention costs 4 b T^2 C forward (QK^T, att V)
and twice that backward. Model FLOPs = 6 B T (12 L C^2 + V C) + 12 L B T^2 C:
the standard 6N per token plus attention, which is what MFU divides.

A rank computes its share of every matmul (the grid splits them exactly) but
repeats some work: attention, GELU and the loss run on every col rank of a
row (their inputs are whole after the col all-reduce), LayerNorms and the
residual stream on every row rank. ``elementwise`` counts the values those
memory-bound steps touch (forward and backward, a few passes each);
``kernels`` counts the array operations (each pays Python's and numpy's
fixed cost): what ``perfmodel`` turns into compute seconds.
"""

from __future__ import annotations

# passes over each activation in forward + backward (reads and writes of the elementwise steps);
# rough, and only the relative size between grids matters: the rate is measured per value
_LN_PASSES, _GELU_PASSES, _SOFTMAX_PASSES, _CE_PASSES = 10, 8, 8, 8
# array operations per layer block and outside the blocks (numpy calls in the engine's code)
KERNELS_PER_BLOCK, KERNELS_OTHER = 120, 60


def model_flops(config, batch_size: int, seq_len: int | None = None) -> float:
    T = seq_len or config.block_size
    B, L, C, V = batch_size, config.n_layer, config.n_embd, config.vocab_size
    return 6.0 * B * T * (12 * L * C * C + V * C) + 12.0 * L * B * T * T * C


def hardware_flops(config, batch_size: int, seq_len: int | None = None, recompute: bool = False) -> float:
    """FLOPs the GPUs execute: the model FLOPs plus, with full recomputation, every block's forward
    again (2 B T 12 L C^2 + 4 L B T^2 C); the utilisation of these is Korthikanti et al.'s HFU, of
    ``model_flops`` the MFU. (Flash attention's own rebuilding of the scores is not counted.)"""
    T = seq_len or config.block_size
    B, L, C = batch_size, config.n_layer, config.n_embd
    again = 2.0 * B * T * 12 * L * C * C + 4.0 * L * B * T * T * C if recompute else 0.0
    return model_flops(config, batch_size, T) + again


def params_count(config) -> int:
    """Parameters of the model (wte counted once: the LM head is tied)."""
    C, L, V, T = config.n_embd, config.n_layer, config.vocab_size, config.block_size
    per_block = 12 * C * C + 13 * C  # 4 weights, their biases (3C + C + 4C + C), 2 LayerNorms (4C)
    return L * per_block + V * C + T * C + 2 * C


def rank_work(config, shape, batch_size: int, seq_len: int | None = None) -> dict:
    """What one rank of grid (R, C, D, P) computes in one iteration."""
    R, Cc, D, P = shape
    T = seq_len or config.block_size
    L, C, V = config.n_layer, config.n_embd, config.vocab_size
    b = batch_size / (D * P)  # sequences on this rank
    M = b * T  # tokens on this rank
    linears = 6.0 * M * (12 * L * C * C + V * C) / (R * Cc)
    attention = 12.0 * L * b * T * T * C / R  # this row's heads, repeated on every col rank
    elementwise = (L * (2 * _LN_PASSES * M * C / Cc + _GELU_PASSES * M * 4 * C / R
                        + _SOFTMAX_PASSES * b * (config.n_head / R) * T * T)
                   + _LN_PASSES * M * C / Cc + _CE_PASSES * M * V / R)
    return {"matmul_flops": linears + attention, "elementwise": elementwise,
            "kernels": L * KERNELS_PER_BLOCK + KERNELS_OTHER}
