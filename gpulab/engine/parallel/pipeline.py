"""Pipeline parallelism: which blocks a stage owns, and the order it runs its micro-batches in.

    stage_layers(n_layer=5, pipe=2, stage=0)      # range(0, 3): blocks 0-2 on stage 0, 3-4 on stage 1
    schedule("1f1b", pipe=4, stage=1, micro=6)     # [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3), ...]
    bubble_fraction(pipe=4, micro=8)              # (p-1)/(m+p-1) = 3/11 of the step idle

Pure geometry and bookkeeping, no MPI (``ParallelGPT`` runs the schedules,
``p2p`` moves the activations). Stages own consecutive transformer blocks,
balanced: the first ``n_layer % pipe`` stages take one block more. The first
stage also computes the token and position embeddings (``wte`` lookup,
``wpe``), the last the final LayerNorm and the LM head, whose weight is the
same tied ``wte``: both stages hold a copy of it, each adds its use's
gradient, and the two are summed over the embedding group (first and last
stage, ``Mesh.embed_comm``) before the optimizer, so both copies take the same
step and stay equal, as Megatron-LM does with its embedding group. ``wpe``
is used on the first stage only: nothing to share.

Schedules (each stage a list of ("F", micro-batch) and ("B", micro-batch)):

- "gpipe" (GPipe): every forward, then every backward (in reverse order);
  a stage holds the activations of all ``m`` micro-batches.
- "1f1b" (PipeDream-Flush, Megatron-LM's default): ``pipe - stage - 1``
  warm-up forwards, then one forward and one backward in turn, then the
  remaining backwards; a stage holds at most ``pipe - stage`` micro-batches'
  activations.

Both leave the same idle time at the start and end of a step when forward
and backward times are fixed: the bubble, ``(p-1)/(m+p-1)`` of the step.
"""

from __future__ import annotations

from numbers import Integral

from gpulab.engine.gpt.model import WPE, WTE, param_shapes

SCHEDULES = ("1f1b", "gpipe")


def stage_layers(n_layer: int, pipe: int, stage: int) -> range:
    """The transformer blocks of ``stage``: consecutive, the first n_layer % pipe stages one more."""
    base, extra = divmod(n_layer, pipe)
    lo = stage * base + min(stage, extra)
    return range(lo, lo + base + (stage < extra))


def stage_params(config, pipe: int, stage: int) -> list[str]:
    """The parameter names a stage holds (in the serial model's order)."""
    layers = stage_layers(config.n_layer, pipe, stage)
    first, last = stage == 0, stage == pipe - 1

    def held(name: str) -> bool:
        if name == WTE:
            return first or last
        if name == WPE:
            return first
        if name.startswith("transformer.h."):
            return int(name.split(".")[2]) in layers
        return last  # ln_f

    return [n for n in param_shapes(config) if held(n)]


def stage_uses(fwd_uses: list, bwd_uses: list, layers: range, first: bool, last: bool):
    """One micro-batch's weight uses (``overlap_weights.forward_uses``/``backward_uses`` of the
    whole model) cut to one stage: its blocks, plus the embedding (first) and the LM head (last)."""

    def in_stage(use) -> bool:
        return use[0].startswith("transformer.h.") and int(use[0].split(".")[2]) in layers

    fwd = fwd_uses[:1] * first + [u for u in fwd_uses if in_stage(u)] + fwd_uses[-1:] * last
    bwd = bwd_uses[:1] * last + [u for u in bwd_uses if in_stage(u)]
    return fwd, bwd


def schedule(kind: str, pipe: int, stage: int, micro: int) -> list[tuple[str, int]]:
    """The order in which ``stage`` runs forward ("F") and backward ("B") of each micro-batch."""
    if kind == "gpipe":
        return [("F", i) for i in range(micro)] + [("B", i) for i in reversed(range(micro))]
    if kind != "1f1b":
        raise ValueError(f"unknown pipeline schedule {kind!r}; choose from {SCHEDULES}")
    warmup = min(pipe - stage - 1, micro)
    ops = [("F", i) for i in range(warmup)]
    for i in range(micro - warmup):  # steady state: one forward, one backward
        ops += [("F", warmup + i), ("B", i)]
    return ops + [("B", i) for i in range(micro - warmup, micro)]


def bubble_fraction(pipe: int, micro: int) -> float:
    """Idle share of a step when every micro-batch's forward and backward take fixed times."""
    return (pipe - 1) / (micro + pipe - 1)


def check_pipeline(n_layer: int, pipe: int, micro: int, schedule_kind: str = "1f1b",
                   local_batch: int | None = None) -> None:
    """Raise ValueError naming every reason ``pipe`` stages of ``micro`` micro-batches cannot run."""
    if isinstance(micro, bool) or not isinstance(micro, Integral) or micro < 1:
        raise ValueError(f"micro-batches must be a positive int, got {micro!r}")
    if schedule_kind not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {schedule_kind!r}; choose from {SCHEDULES}")
    problems = []
    if n_layer < pipe:
        problems.append(f"n_layer ({n_layer}) must be at least pipe ({pipe}): each "
                        "pipeline stage owns at least one transformer block")
    if local_batch is not None and local_batch % micro:
        problems.append(f"the batch of each depth x data slice ({local_batch} sequences) must be "
                        f"divisible by the micro-batches ({micro}): each micro-batch has the same "
                        "number of sequences")
    if problems:
        raise ValueError("; ".join(problems))
