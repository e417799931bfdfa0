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
- "interleaved" (Megatron-LM's interleaved 1F1B): the model is cut into
  ``pipe x virtual`` chunks, stage s holding chunks s, s + pipe, ...; the
  ops are ("F" | "B", micro-batch, chunk). The last stage's chunk v sends to
  the first stage's chunk v + 1, so a micro-batch goes round the stages
  ``virtual`` times, each chunk 1/virtual of a stage's work.

Both leave the same idle time at the start and end of a step when forward
and backward times are fixed: the bubble, ``(p-1)/(m+p-1)`` of the step;
interleaving shrinks it to ``(p-1)/v`` chunk-slots' worth, (p-1)/(v m) of the
ideal time (``bubble_fraction``), for v times the stage-to-stage sends.
"""

from __future__ import annotations

from numbers import Integral

from gpulab.engine.gpt.model import WPE, WTE, param_shapes

SCHEDULES = ("1f1b", "gpipe", "interleaved")


def chunk_layers(n_layer: int, pipe: int, stage: int, virtual: int = 1) -> list[range]:
    """The blocks of each of a stage's ``virtual`` model chunks: the model cut into pipe x virtual
    chunks (``stage_layers``), chunk v of stage s being chunk v * pipe + s (Megatron-LM's order)."""
    return [stage_layers(n_layer, pipe * virtual, v * pipe + stage) for v in range(virtual)]


def stage_layers(n_layer: int, pipe: int, stage: int) -> range:
    """The transformer blocks of ``stage``: consecutive, the first n_layer % pipe stages one more."""
    base, extra = divmod(n_layer, pipe)
    lo = stage * base + min(stage, extra)
    return range(lo, lo + base + (stage < extra))


def stage_params(config, pipe: int, stage: int, virtual: int = 1) -> list[str]:
    """The parameter names a stage holds, all its chunks' (in the serial model's order)."""
    layers = {i for chunk in chunk_layers(config.n_layer, pipe, stage, virtual) for i in chunk}
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


def schedule(kind: str, pipe: int, stage: int, micro: int, virtual: int = 1) -> list[tuple]:
    """The order in which ``stage`` runs forward ("F") and backward ("B") of each micro-batch;
    "interleaved": ("F" | "B", micro-batch, chunk) over its ``virtual`` chunks."""
    if kind == "interleaved":
        return interleaved(pipe, stage, micro, virtual)
    if kind == "gpipe":
        return [("F", i) for i in range(micro)] + [("B", i) for i in reversed(range(micro))]
    if kind != "1f1b":
        raise ValueError(f"unknown pipeline schedule {kind!r}; choose from {SCHEDULES}")
    warmup = min(pipe - stage - 1, micro)
    ops = [("F", i) for i in range(warmup)]
    for i in range(micro - warmup):  # steady state: one forward, one backward
        ops += [("F", warmup + i), ("B", i)]
    return ops + [("B", i) for i in range(micro - warmup, micro)]


def interleaved(pipe: int, stage: int, micro: int, virtual: int) -> list[tuple[str, int, int]]:
    """Megatron-LM's interleaved 1F1B (Narayanan et al., SC'21, section 2.2): ``virtual`` chunks per
    stage, micro-batches taken in groups of ``pipe``; each group runs through chunk 0, then chunk 1, ...
    forward, and through the chunks in reverse backward. Warm-up: 2 (pipe - stage - 1) + (virtual - 1)
    pipe forwards (all of them when micro == pipe), then one forward and one backward in turn."""
    total = micro * virtual

    def op(k: int, kind: str):
        chunk = (k % (pipe * virtual)) // pipe
        return (kind, (k // (pipe * virtual)) * pipe + k % pipe, chunk if kind == "F" else virtual - 1 - chunk)

    warmup = total if micro == pipe else min(total, 2 * (pipe - stage - 1) + (virtual - 1) * pipe)
    ops = [op(k, "F") for k in range(warmup)]
    for k in range(total - warmup):
        ops += [op(warmup + k, "F"), op(k, "B")]
    return ops + [op(k, "B") for k in range(total - warmup, total)]


def bubble_fraction(pipe: int, micro: int, virtual: int = 1) -> float:
    """Idle share of a step when every micro-batch's forward and backward take fixed times: the bubble
    is (p - 1) / virtual micro-batch slots beside the m useful ones. Megatron-LM's paper gives it as
    bubble time over ideal time, (p - 1) / (virtual m); as a share of the step it is this."""
    bubble = (pipe - 1) / virtual
    return bubble / (micro + bubble)


def check_pipeline(n_layer: int, pipe: int, micro: int, schedule_kind: str = "1f1b",
                   local_batch: int | None = None, virtual: int = 1) -> None:
    """Raise ValueError naming every reason ``pipe`` stages of ``micro`` micro-batches cannot run."""
    for name, value in (("micro-batches", micro), ("virtual stages", virtual)):
        if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if schedule_kind not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {schedule_kind!r}; choose from {SCHEDULES}")
    problems = []
    if n_layer < pipe * virtual:
        chunks = f"pipe ({pipe})" if virtual == 1 else f"pipe x virtual stages ({pipe} x {virtual})"
        problems.append(f"n_layer ({n_layer}) must be at least {chunks}: each "
                        f"{'pipeline stage' if virtual == 1 else 'model chunk'} owns at least one transformer block")
    if virtual > 1 and schedule_kind != "interleaved":
        problems.append(f"virtual stages ({virtual}) need the interleaved schedule, not {schedule_kind!r}")
    if schedule_kind == "interleaved" and (pipe < 2 or micro % pipe):
        problems.append(f"the interleaved schedule needs at least 2 stages and micro-batches ({micro}) "
                        f"divisible by the stages ({pipe}): they run in groups of one per stage")
    if local_batch is not None and local_batch % micro:
        problems.append(f"the batch of each depth x data slice ({local_batch} sequences) must be "
                        f"divisible by the micro-batches ({micro}): each micro-batch has the same "
                        "number of sequences")
    if problems:
        raise ValueError("; ".join(problems))


def simulate(kind: str, pipe: int, micro: int, virtual: int = 1, forward: float = 1.0,
             backward: float = 2.0) -> float:
    """The step time of a schedule when a stage's forward of one micro-batch takes ``forward`` and its
    backward ``backward`` (a chunk's: 1/virtual of them), sends are free and each op waits for its
    input: the finish time of the last op. Raises RuntimeError if the schedule deadlocks."""
    ops = {s: schedule(kind, pipe, s, micro, virtual) for s in range(pipe)}
    done: dict = {}  # (op, micro, chunk, stage) -> finish time
    free = dict.fromkeys(range(pipe), 0.0)
    pos = dict.fromkeys(range(pipe), 0)

    def needs(op, i, v, s):
        if op == "F":
            return None if s == 0 and v == 0 else (("F", i, v, s - 1) if s > 0 else ("F", i, v - 1, pipe - 1))
        if s == pipe - 1 and v == virtual - 1:
            return ("F", i, v, s)
        return ("B", i, v, s + 1) if s < pipe - 1 else ("B", i, v + 1, 0)

    while any(pos[s] < len(ops[s]) for s in range(pipe)):
        moved = False
        for s in range(pipe):
            while pos[s] < len(ops[s]):
                op, i, *rest = ops[s][pos[s]]
                v = rest[0] if rest else 0
                dep = needs(op, i, v, s)
                if dep is not None and dep not in done:
                    break
                start = max(free[s], done[dep] if dep is not None else 0.0)
                free[s] = done[(op, i, v, s)] = start + (forward if op == "F" else backward) / virtual
                pos[s] += 1
                moved = True
        if not moved:
            raise RuntimeError(f"{kind} deadlocks: every stage waits ({pos})")
    return max(free.values())
