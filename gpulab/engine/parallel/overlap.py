"""Overlap: which communication ``ParallelGPT`` hides behind computation, each switch on its own.

    gpt = ParallelGPT(cfg, mesh, overlap=Overlap(oar=True, ors=True, oag=True))
    Overlap.parse("oar,ors,buckets")                # what `gpulab train --overlap` takes
    Overlap.everything()                            # every switch on, test-polling progress

The switches, named as in the AxoNN paper's ablation (numbers do not change
with any of them; tests/engine check every combination):

- ``oar`` (AxoNN's OAR, overlap all-reduce): in a Linear3D backward the
  all-reduce of dX over the row group (col in a transposed layer) is
  non-blocking and waited for after the dW matmul, which it runs behind.
- ``ors`` (AxoNN's ORS, overlap reduce-scatter): the reduce-scatter of dW over
  depth is non-blocking; the dW shard is waited for only when the optimizer
  (or a data-parallel bucket) needs it, so it runs behind the backward of the
  layers before. Where dX needs no all-reduce (row of 1), dW is computed
  first so that its reduce-scatter also hides behind the dX matmul.
- ``oag`` (AxoNN's OAG, overlap all-gather): the depth all-gather of the next
  weight in the pass is issued when the current one is handed out: one layer
  ahead.
- ``cache`` (AxoNN): gathered weights are kept from forward for backward (and
  for the tied LM head): no all-gather in backward, at the price of holding
  every gathered block, reported as ``weight_cache_bytes``.
- ``buckets`` (gpulab, not AxoNN): the data-parallel gradient all-reduce is
  issued during backward in buckets of ``bucket_bytes`` as gradients appear,
  instead of once after backward.

Old names, still accepted by ``parse`` and ``from_dict`` (saved results and
command lines use them): ``async_grads`` = ``oar`` + ``ors`` (one switch before
they were split), ``prefetch`` = ``oag``.

``progress`` says who moves the non-blocking collectives forward while the
rank computes: "poll" (MPI_Test on every collective in flight after each
compute kernel: portable, but nothing moves during a long kernel), "thread"
(``collectives.ProgressThread``: a sleeping background thread enters MPI
every 1 ms, also during kernels), "mpich" (MPICH's own progress thread: the
job must be started with MPIR_CVAR_ASYNC_PROGRESS=1; it spins on a core), or
"none" (MPI moves them only inside other MPI calls and the final wait: the
control experiment that shows progress matters). docs/engine_overlap.md has
the measurements.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

SWITCHES = ("oar", "ors", "oag", "cache", "buckets")
ALIASES = {"async_grads": ("oar", "ors"), "prefetch": ("oag",)}  # the names before the split
PROGRESS = ("poll", "thread", "mpich", "none")


@dataclass(frozen=True)
class Overlap:
    oar: bool = False
    ors: bool = False
    oag: bool = False
    cache: bool = False
    buckets: bool = False
    bucket_bytes: int = 1 << 20
    progress: str = "poll"

    def __post_init__(self):
        for name in SWITCHES:
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"Overlap.{name} must be True or False, got {getattr(self, name)!r}")
        if isinstance(self.bucket_bytes, bool) or not isinstance(self.bucket_bytes, int) \
                or self.bucket_bytes < 1:
            raise ValueError(f"Overlap.bucket_bytes must be a positive int, got {self.bucket_bytes!r}")
        if self.progress not in PROGRESS:
            raise ValueError(f"Overlap.progress must be one of {PROGRESS}, got {self.progress!r}")

    @classmethod
    def everything(cls, **changes) -> Overlap:
        return cls(**{**{name: True for name in SWITCHES}, **changes})

    @classmethod
    def parse(cls, text: str, **changes) -> Overlap:
        """'none', 'all', or a comma-separated list of switch names."""
        text = text.strip()
        if text in ("", "none", "off"):
            return cls(**changes)
        if text in ("all", "on"):
            return cls.everything(**changes)
        names = [t.strip() for t in text.split(",") if t.strip()]
        unknown = [n for n in names if n not in SWITCHES and n not in ALIASES]
        if unknown:
            raise ValueError(f"unknown overlap switch(es) {unknown}; choose from {list(SWITCHES)}, "
                             f"'all' or 'none' (old names: {', '.join(ALIASES)})")
        return cls(**{s: True for n in names for s in ALIASES.get(n, (n,))}, **changes)

    @property
    def any(self) -> bool:
        return any(getattr(self, name) for name in SWITCHES)

    @property
    def polls(self) -> bool:
        """Does the engine call MPI_Test between kernels?"""
        return self.any and self.progress == "poll"

    @property
    def threaded(self) -> bool:
        """Does the engine run its own progress thread?"""
        return self.any and self.progress == "thread"

    def label(self) -> str:
        on = [name for name in SWITCHES if getattr(self, name)]
        return "+".join(on) if on else "none"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Overlap:
        names = {f.name for f in fields(cls)}
        old = {s: v for k, v in d.items() if k in ALIASES for s in ALIASES[k]}  # results saved before the split
        return cls(**{**old, **{k: v for k, v in d.items() if k in names}})
