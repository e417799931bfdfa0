"""The training loop of a ``TrainConfig`` (``gpulab train`` builds one from its flags), on every rank.

    from gpulab.engine.training.config import TrainConfig
    from gpulab.engine.training.loop import train
    train(TrainConfig(shape=(1, 1, 2, 1), steps=20, batch_size=8))    # inside an MPI job of 2 ranks

Every rank draws the same global batch (seeded by step) and ``ParallelGPT``
computes its own slice. Rank 0 shows a tqdm bar, writes the loss log (JSON
lines, one per step), saves a full checkpoint (loadable on any grid) and
prints a text sample at the end. Every step is recorded as a timeline
(``timeline``); the end of the run reports compute, exposed and hidden
communication, tokens/s, MFU and memory per rank (``report``). On GPUs each
rank uses the GPU of its node-local rank; collectives go to a CUDA-aware MPI
or are staged through host memory (``exchange``). float16 trains with
float32 master weights and dynamic loss scaling (``optim``).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from gpulab.engine.gpt.config import GPTConfig, accum_dtype
from gpulab.engine.gpt.corpus import CharTokenizer, get_batch, load_text
from gpulab.engine.gpt.model import init_params
from gpulab.engine.gpt.sample import generate
from gpulab.engine.parallel import timeline
from gpulab.engine.parallel.gpt import ParallelGPT
from gpulab.engine.parallel.memory import memory_report
from gpulab.engine.parallel.mesh import Mesh
from gpulab.engine.perf.timing import alone, peak_matmul
from gpulab.engine.training import checkpoint, report
from gpulab.engine.training.config import NEW_MODEL, TrainConfig
from gpulab.engine.training.optim import AdamW, LossScaler, train_step
from gpulab.engine.training.zero1 import DistributedAdamW
from gpulab.jobsite import record_topology
from gpulab.launch import pin_gpu
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())

INTERRUPTED = 130  # the exit status of a run that Ctrl-C stopped (after saving its checkpoint)


def train(config: TrainConfig) -> int:
    """Train as ``config`` says, on every rank of the job; 0 when done, ``INTERRUPTED`` after Ctrl-C."""
    comm = MPI.COMM_WORLD  # the mesh checks that it has shape x pipe ranks
    _share_the_node(config, comm)
    run = set_up(config, comm)
    t0 = time.perf_counter()
    interrupt = _Interrupt()  # Ctrl-C: mpiexec hands SIGINT to every rank; all stop after the same step
    try:
        for step in run.steps():
            one_step(run, step, t0)
            if comm.allreduce(interrupt.requested, op=MPI.LOR):
                return stop_early(run, step + 1)
            every = config.checkpoint_every
            if every and (step + 1 - run.start) % every == 0 and step + 1 < run.end:
                run.save(step + 1)
    finally:
        interrupt.restore()
    finish(run, time.perf_counter() - t0)
    return 0


def _share_the_node(config: TrainConfig, comm) -> None:
    """One GPU per node-local rank, or the node's cores shared among its ranks."""
    from threadpoolctl import threadpool_limits  # deferred: only the ranks use it, every command imports this

    if config.device == "cupy":
        pin_gpu(comm)  # before CuPy starts CUDA
    local = record_topology(comm)["ranks_per_node"]
    threadpool_limits(max(1, (os.cpu_count() or 1) // local))


@dataclass
class Run:
    """One training run on this rank: the data, the model on the grid and its optimizer, what it recorded."""

    config: TrainConfig
    comm: object
    tok: CharTokenizer
    train_ids: np.ndarray
    val_ids: np.ndarray
    model: GPTConfig
    gpt: ParallelGPT
    opt: object  # AdamW, or DistributedAdamW with config.distributed_optimizer
    scaler: LossScaler
    start: int  # the global step it starts at: 0, or the resumed checkpoint's
    log: object = None  # rank 0's loss log (JSON lines)
    bar: object = None  # rank 0's tqdm bar
    losses: list = field(default_factory=list)
    summaries: list = field(default_factory=list)  # each step's timeline summary

    @property
    def rank0(self) -> bool:
        return self.comm.rank == 0

    @property
    def end(self) -> int:
        return self.start + self.config.steps

    def steps(self):
        """The global steps to run, behind rank 0's progress bar."""
        from tqdm import tqdm  # deferred: only the ranks use it

        self.bar = tqdm(range(self.start, self.end), disable=not self.rank0 or not self.config.progress_bar,
                        desc="train", unit="step", file=sys.stdout)
        return self.bar

    def save(self, step: int) -> dict | None:
        """Collective: every rank sends its pieces, rank 0 writes the checkpoint (and returns the full
        parameters: the float32 masters of a float16 run)."""
        master = self.opt.master  # the distributed optimizer's are gathered over data by every rank
        full = self.gpt.gather_full({**self.gpt.params, **master}, root=0)
        moments = {"m": self.gpt.gather_full(self.opt.m, root=0), "v": self.gpt.gather_full(self.opt.v, root=0)}
        if self.rank0:
            c = self.config
            try:
                checkpoint.save(c.out, full, config=self.model, step=step, opt_state={"t": self.opt.t, **moments},
                                extra={"chars": self.tok.chars, "mesh": list(c.shape), "pipe": c.pipe,
                                       "seed": c.seed})
            except OSError as err:  # e.g. a full disk: the previous checkpoint is still there, whole
                print(f"gpulab train: could not write {c.out} at step {step} ({err}); the previous checkpoint "
                      f"is intact", file=sys.stderr, flush=True)
        return full


def set_up(config: TrainConfig, comm) -> Run:
    """Read the corpus, start the model (new, or from ``config.resume``), cut it for this rank."""
    text = load_text(config.corpus)
    ck = checkpoint.load(config.resume) if config.resume else None
    tok = CharTokenizer(ck.extra["chars"]) if ck else CharTokenizer.from_text(text)
    tokens = tok.encode(text)
    split = int(0.9 * len(tokens))
    if ck:
        model, params, start = resumed_model(config, ck), ck.params, ck.step
    else:
        model = config.model(-(-tok.size // math.lcm(8, config.shape[0])) * math.lcm(8, config.shape[0]))
        params, start = init_params(model, seed=config.seed), 0  # vocab divisible by row; padding ids unused
    gpt = ParallelGPT(model, Mesh(*config.shape, pipe=config.pipe), overlap=config.overlap,
                      micro_batches=config.micro_batches, schedule=config.schedule, recompute=config.recompute,
                      sequence_parallel=config.sequence_parallel, virtual_stages=config.virtual_stages,
                      distributed_optimizer=config.distributed_optimizer)
    gpt.load_params(params, device=config.device)
    adam = dict(lr=config.lr, betas=(0.9, 0.99), weight_decay=config.weight_decay)
    opt = DistributedAdamW(gpt, **adam) if config.distributed_optimizer else AdamW(gpt.params, **adam)
    if ck and ck.opt_state:
        acc = accum_dtype(model.dtype)  # the optimizer's dtype: float32 for float16 models
        state = {k: gpt.local_pieces(ck.opt_state[k], acc, config.device) for k in ("m", "v")}
        if acc != model.dtype:  # the checkpoint holds the float32 masters of float16 runs
            state["master"] = gpt.local_pieces(params, acc, config.device)
        opt.load_state_dict({"t": ck.opt_state["t"], **state})
    run = Run(config, comm, tok, tokens[:split], tokens[split:], model, gpt, opt,
              LossScaler(enabled=model.dtype == "float16"), start)
    if run.rank0:
        log_path = config.log or config.out.with_suffix(".loss.jsonl")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        run.log = open(log_path, "a" if ck else "w")
        stages = f" x {config.pipe} stages ({config.micro_batches} micro-batches, {config.schedule})" \
            if config.pipe > 1 else ""
        print(f"gpulab train: {model}, mesh {config.shape}{stages}, {tok.size} characters, "
              f"{len(run.train_ids)} training tokens, steps {start}..{run.end}", flush=True)
    return run


def resumed_model(config: TrainConfig, ck: checkpoint.Checkpoint) -> GPTConfig:
    """The checkpoint's model, if it is the one ``config`` describes; ValueError naming what differs."""
    held = ck.config.to_dict()
    differ = [f"{name}={getattr(config, name)!r} (the checkpoint's is {held[name]!r})"
              for name in NEW_MODEL if getattr(config, name) != held[name]]
    if differ:
        raise ValueError(f"TrainConfig resume={str(config.resume)!r} holds another model: {'; '.join(differ)}")
    return ck.config


def lr_at(step: int, total: int, config: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to lr/10 at step ``total`` (a resumed run goes on
    from where its global step sits on the curve)."""
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = min(1.0, (step - config.warmup) / max(1, total - config.warmup))
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def one_step(run: Run, step: int, t0: float) -> None:
    """Global step ``step``: the batch, forward, backward, the optimizer; rank 0 logs it."""
    c = run.config
    x, y = get_batch(run.train_ids, c.batch_size, run.model.block_size, np.random.default_rng([c.seed, step]))
    lr = lr_at(step, run.end, c)
    with timeline.record() as tl:
        result = train_step(run.gpt, run.opt, (x, y), lr=lr, max_norm=c.grad_clip, scaler=run.scaler)
    run.summaries.append(timeline.summarize(tl.events))
    run.losses.append(result["loss"])
    if run.rank0:
        log_step(run, step, result, lr, t0)


def log_step(run: Run, step: int, result: dict, lr: float, t0: float) -> None:
    """Rank 0: one JSON line in the loss log, the bar's loss, and every ``log_every`` steps a printed line."""
    from tqdm import tqdm

    loss = result["loss"]
    record = {"step": step + 1, "loss": loss, "grad_norm": result["grad_norm"], "lr": lr,
              "time_s": round(time.perf_counter() - t0, 3)}
    if run.scaler.enabled:
        record.update(loss_scale=run.scaler.scale, skipped=result["skipped"])
    run.log.write(json.dumps(record) + "\n")
    run.log.flush()
    run.bar.set_postfix(loss=f"{loss:.3f}", refresh=False)  # tqdm redraws on its own clock
    if (step + 1 - run.start) % run.config.log_every == 0 or step + 1 == run.end:
        tqdm.write(f"step {step + 1}: loss {loss:.4f}", file=sys.stdout)


def stop_early(run: Run, step: int) -> int:
    """After Ctrl-C: save at ``step`` (every rank), say how to go on (rank 0)."""
    run.save(step)
    if run.rank0:
        run.log.close()
        out = run.config.out
        print(f"gpulab train: interrupted after step {step}; checkpoint {out} (resume with --resume {out})",
              flush=True)
    return INTERRUPTED


def finish(run: Run, wall_s: float) -> None:
    """The end of a run: the machine's peak, validation, the last checkpoint; rank 0 reports and samples."""
    from threadpoolctl import threadpool_limits

    c, comm = run.config, run.comm
    with threadpool_limits(os.cpu_count() or 1):  # the machine's peak: rank 0, the others asleep
        peak = alone(comm, lambda: peak_matmul(dtype=run.model.dtype, repeats=10, device=c.device))
    per_rank = comm.gather(report.steady(run.summaries), root=0)
    memories = comm.gather(memory_report(run.gpt, run.opt), root=0)
    rng = np.random.default_rng([c.seed, 10**9])  # validation batches, the same on all ranks
    vals = [run.gpt.loss(*get_batch(run.val_ids, c.batch_size, run.model.block_size, rng))
            for _ in range(c.eval_batches)]
    full = run.save(run.end)
    if run.rank0:
        run.log.close()
        summary = report.run_summary(c, run.model, run.losses, vals, wall_s)
        if run.scaler.enabled:
            summary.update(loss_scale=run.scaler.scale, skipped_steps=run.scaler.skipped)
        if per_rank[0] is not None:
            report.add_timing(summary, c, run.model, per_rank, memories, peak)
            report.print_timing(summary, c)
        print("summary " + json.dumps(summary), flush=True)
        if c.sample > 0:
            ids = generate(full, run.model, run.tok.encode("And "), c.sample, temperature=0.8, top_k=20,
                           n_valid=run.tok.size, rng=np.random.default_rng(c.seed))
            print("sample:\n" + run.tok.decode(ids), flush=True)
    run.gpt.free()
    run.gpt.mesh.free()


class _Interrupt:
    """SIGINT sets a flag instead of raising, so no rank leaves a collective half done."""

    def __init__(self):
        self.requested = False
        self.previous = signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum, frame):
        self.requested = True

    def restore(self) -> None:
        signal.signal(signal.SIGINT, self.previous)
