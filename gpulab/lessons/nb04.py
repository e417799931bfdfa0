"""Answers to notebook 04's questions (3D tensor parallelism, one layer at a time)."""

from gpulab.engine.parallel.shards import shard_numel
from gpulab.engine.perf.volume import collective_calls, totals
from gpulab.lessons.answers import Answer

FLOAT64 = 8  # bytes: the live layer of notebook 04 computes in float64 (its errors are round-off, ~1e-15)


def _stored_bytes(ctx: dict) -> float:
    return shard_numel(ctx["n_out"], ctx["k_in"], (1, 1, 4, 1)) * FLOAT64


def _traffic_growth(ctx: dict) -> float:
    """Wire bytes of one step at twice the batch over those at the batch, from the volume model."""
    config, grid, batch = ctx["gpt_config"], tuple(ctx["grid"]), ctx["batch_size"]
    once = sum(totals(collective_calls(config, grid, batch_size=batch), by="group").values())
    twice = sum(totals(collective_calls(config, grid, batch_size=2 * batch), by="group").values())
    return twice / once


ANSWERS = {
    1: Answer(
        text="""With `(1, 1, 4, 1)` row and col have one member each, so the forward all-reduce of Y (over col)
and the backward all-reduce of dX (over row) disappear: every rank has all input and all output features
of its tokens. What remains is the **depth** group's work, exactly FSDP / ZeRO-3's: an **all-gather** of
the weight before the forward matmul, the same all-gather again before backward (the full weight was not
kept), and a **reduce-scatter** of dW, so each rank ends with the summed gradient of its own shard.

Each rank stores a 1-D shard of `n_out · k_in / 4` values of the weight (the last shard zero-padded when
4 does not divide the block; `gpulab.engine.parallel.shards.shard_numel`), at 8 bytes a value in float64.
The full weight exists on a rank only for the moment between the all-gather and the matmul.""",
        value=_stored_bytes, unit="bytes", needs=("n_out", "k_in"), rel_tol=0.0, close_tol=0.0,
        hint="Count the weight's values each rank keeps between steps (n_out · k_in / 4), times 8 bytes "
             "(float64), not the gathered weight it holds during the matmul.",
        exercise="exercises/source/04_tensor_parallel_3d"),
    2: Answer(
        text="""With `(4, 1, 1, 1)` row splits the **output** features 4 ways and col = 1 leaves the input features
whole: rank r holds rows `r·n/4 … (r+1)·n/4` of W complete, every one of their `k` inputs. So **every rank
holds whole output features** (whole rows of W, whole columns of Y).

* **Forward**, `Y = X Wᵀ`: output feature j needs row j of W and all of X's input features, and the rank
  has both. Its columns of Y are finished: nothing to sum, so no all-reduce (the col group, which would
  sum partial Y, has one member).
* **Backward**, `dX = dY W`: each input feature's gradient sums over **all** output features,
  `dX[:, i] = Σ_j dY[:, j] W[j, i]`, and each rank has only n/4 of the j. Its dX is a partial sum: the
  four row ranks **all-reduce dX**.

This is Megatron-LM's column-parallel layer (Shoeybi et al. 2019, arXiv 1909.08053, section 3): identity
in forward, all-reduce in backward. Its partner, the row-parallel (here: transposed) layer, sums in
forward instead.""",
        exercise="exercises/source/04_tensor_parallel_3d"),
    3: Answer(
        text="""Read the "wire KiB per step" table: for this small GPT on (2, 2, 2, 1) **col** carries the most.
Col sums partial outputs Y of every plain layer in forward (and LayerNorm statistics), and its volume
is *activations*: `tokens per rank × features`, so it grows with the batch. Row's all-reduces of dX are
activations too. Depth's all-gathers and reduce-scatters move *weights*: the same bytes whatever the
batch.

Doubling the batch therefore doubles row and col traffic and leaves depth's unchanged, so the whole step's
traffic grows by less than 2x: the kit's number below is `sum(wire bytes at 2B) / sum(wire bytes at B)`
from the volume model (`gpulab.engine.perf.volume.collective_calls`, rings: `2(p-1)/p · n` for an
all-reduce, `(p-1)/p · n` for all-gather and reduce-scatter). For a model whose weights dominate (big
layers, few tokens per rank) the factor is near 1; for one whose activations dominate, near 2. That is
why large batches favour sharding (depth, data) over tensor parallelism (row, col).""",
        value=_traffic_growth, unit="x", needs=("gpt_config", "grid", "batch_size"), rel_tol=0.02,
        close_tol=0.1,
        hint="Weights do not depend on the batch: only the row and col (activation) bytes double; depth's "
             "(weight) bytes stay the same.",
        exercise="exercises/source/04_tensor_parallel_3d"),
}
