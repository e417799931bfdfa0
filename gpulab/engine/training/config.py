"""TrainConfig: everything one training run needs, checked whole when it is made.

    cfg = TrainConfig(shape=(1, 1, 2, 1), steps=20, batch_size=8, out="results/gpt.npz")
    train(cfg)                                   # on every rank of a job (``gpulab.engine.training.loop``)
    TrainConfig(shape=(1, 2, 1, 1), pipe=3)      # ValueError: TrainConfig pipe=3, micro_batches=3: n_layer ...

``gpulab train`` fills one from its flags (``gpulab.cli.train``); a script or a notebook builds
it directly. The model fields (``block_size``, ``n_layer``, ``n_head``, ``n_embd``, ``dtype``)
describe a new model; a run that resumes must name the model its checkpoint holds. A bad value,
or values that cannot train together (stages the model or the batch cannot feed, a grid that
cannot split the model), raise ``TrainConfigError``, a ValueError naming the fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Integral, Real
from pathlib import Path

from gpulab.backend import DEVICES
from gpulab.engine.gpt.config import GPTConfig
from gpulab.engine.parallel.gpt import RECOMPUTE, check_divisibility
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.parallel.pipeline import SCHEDULES, check_pipeline

NEW_MODEL = {"block_size": 64, "n_layer": 2, "n_head": 4, "n_embd": 64, "dtype": "float32"}
DTYPES = ("float16", "float32", "float64")


class TrainConfigError(ValueError):
    """Values of a TrainConfig that cannot train: ``values`` maps each field at fault to its value."""

    def __init__(self, values: dict, reason: str):
        self.values, self.reason = values, reason
        super().__init__(f"TrainConfig {', '.join(f'{k}={v!r}' for k, v in values.items())}: {reason}")


@dataclass(frozen=True)
class TrainConfig:
    # the grid and its pipeline
    shape: tuple[int, int, int, int] = (1, 1, 1, 1)  # row, col, depth, data
    pipe: int = 1  # pipeline stages around the grid: the job has prod(shape) * pipe ranks
    micro_batches: int | None = None  # per step with pipe > 1; None: one per stage
    schedule: str = "1f1b"
    virtual_stages: int = 1  # model chunks per stage with the interleaved schedule
    # Megatron-LM's options and overlap (``gpulab.engine.parallel.gpt``, ``overlap``)
    recompute: str | None = None
    sequence_parallel: bool = False
    distributed_optimizer: bool = False
    overlap: Overlap = field(default_factory=Overlap)
    # the model of a new run
    block_size: int = NEW_MODEL["block_size"]
    n_layer: int = NEW_MODEL["n_layer"]
    n_head: int = NEW_MODEL["n_head"]
    n_embd: int = NEW_MODEL["n_embd"]
    dtype: str = NEW_MODEL["dtype"]
    device: str = "host"
    # optimisation
    steps: int = 500
    batch_size: int = 32  # global batch, sequences
    lr: float = 5e-3  # peak learning rate, after a linear warm-up, then cosine decay to lr/10
    warmup: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0  # max global gradient norm
    seed: int = 0
    # files: the corpus (None: the shipped one), the checkpoint, the loss log (None: <out>.loss.jsonl)
    corpus: str | None = None
    out: Path = Path("results/gpt.npz")
    log: Path | None = None
    resume: Path | None = None
    checkpoint_every: int = 0  # also write the checkpoint every N steps (0: at the end and on Ctrl-C)
    # what rank 0 reports
    eval_batches: int = 4  # validation batches at the end
    sample: int = 200  # characters sampled at the end
    log_every: int = 50  # print the loss every N steps
    progress_bar: bool = True

    def __post_init__(self):
        self._check_values()
        if self.micro_batches is None:
            object.__setattr__(self, "micro_batches", self.pipe)
        for name in ("out", "log", "resume"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, Path(getattr(self, name)))
        object.__setattr__(self, "shape", tuple(int(v) for v in self.shape))
        self._check_together()

    def _fail(self, reason: str, *names: str):
        raise TrainConfigError({n: getattr(self, n) for n in names}, reason)

    def _check_values(self) -> None:
        """Each field alone: its type and range."""
        def integer(v):
            return isinstance(v, Integral) and not isinstance(v, bool)

        for name, low in _INT_FLOORS.items():
            if not integer(getattr(self, name)) or getattr(self, name) < low:
                self._fail(f"must be an int >= {low}", name)
        for name, positive in _FLOATS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) \
                    or value < 0 or positive and value == 0:
                self._fail(f"must be a finite number {'>' if positive else '>='} 0", name)
        if not (isinstance(self.shape, (tuple, list)) and len(self.shape) == 4
                and all(integer(v) and v >= 1 for v in self.shape)):
            self._fail("must be four positive ints (row, col, depth, data)", "shape")
        if not (self.micro_batches is None or integer(self.micro_batches) and self.micro_batches >= 1):
            self._fail("must be None (one per stage) or an int >= 1", "micro_batches")
        for name, allowed in (("schedule", SCHEDULES), ("recompute", RECOMPUTE), ("dtype", DTYPES),
                              ("device", tuple(DEVICES))):
            if getattr(self, name) not in allowed:
                self._fail(f"must be one of {allowed}", name)
        for name in ("sequence_parallel", "distributed_optimizer", "progress_bar"):
            if not isinstance(getattr(self, name), bool):
                self._fail("must be True or False", name)
        if not isinstance(self.overlap, Overlap):
            self._fail("must be an Overlap (gpulab.engine.parallel.overlap; Overlap.parse('all'))", "overlap")
        if not isinstance(self.out, (str, Path)):
            self._fail("must be a path", "out")
        for name in ("corpus", "log", "resume"):
            if not (getattr(self, name) is None or isinstance(getattr(self, name), (str, Path))):
                self._fail("must be a path or None", name)

    def _check_together(self) -> None:
        """Values that must fit each other: the stages, sequence parallelism, the grid."""
        _, _, depth, data = self.shape
        slice_batch = self.batch_size // (depth * data) if self.batch_size % (depth * data) == 0 else None
        try:
            check_pipeline(self.n_layer, self.pipe, self.micro_batches, self.schedule, local_batch=slice_batch,
                           virtual=self.virtual_stages)
        except ValueError as err:
            self._fail(str(err), "pipe", "micro_batches")
        if self.sequence_parallel and self.block_size % self.shape[0]:
            self._fail(f"the sequence length must be divisible by row ({self.shape[0]}): each row rank holds "
                       "block-size/row positions", "sequence_parallel", "block_size")
        model = self.model(math.lcm(8, self.shape[0]))  # the vocabulary is padded so when the corpus is read
        try:
            check_divisibility(model, self.shape, self.batch_size)
        except ValueError as err:
            self._fail(str(err), "shape")

    def model(self, vocab_size: int) -> GPTConfig:
        """The GPT these fields describe, with ``vocab_size`` token ids."""
        try:
            return GPTConfig(vocab_size=vocab_size, block_size=self.block_size, n_layer=self.n_layer,
                             n_head=self.n_head, n_embd=self.n_embd, dtype=self.dtype)
        except ValueError as err:
            self._fail(str(err), "n_embd", "n_head")

    @property
    def ranks(self) -> int:
        """The job size it runs on: every grid point times every pipeline stage."""
        return math.prod(self.shape) * self.pipe


_INT_FLOORS = {"pipe": 1, "virtual_stages": 1, "block_size": 1, "n_layer": 1, "n_head": 1, "n_embd": 1,
               "steps": 1, "batch_size": 1, "warmup": 0, "seed": 0, "checkpoint_every": 0, "eval_batches": 0,
               "sample": 0, "log_every": 1}
_FLOATS = {"lr": True, "grad_clip": True, "weight_decay": False}  # name -> must be > 0 (else >= 0)
