"""The training loop of ``gpulab train`` (the command line is ``gpulab.cli.train``), on every rank.

Every rank draws the same global batch (seeded by step) and ``ParallelGPT``
computes its own slice. Rank 0 shows a tqdm bar, writes the loss log (JSON
lines, one per step), saves a full checkpoint (loadable on any grid) and
prints a text sample at the end. Every step is recorded as a timeline
(``timeline``); the end of the run reports, per iteration and averaged over
ranks and steps (the first few left out as warm-up), compute, exposed and
hidden communication by group, tokens/s and memory per rank. MFU is measured
against the best matmul of the same dtype on the same device
(``peak_matmul``). On GPUs each rank uses the GPU of its node-local rank;
collectives go to a CUDA-aware MPI or are staged through host memory
(``exchange``). float16 trains with float32 master weights and dynamic loss
scaling (``optim``).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

from gpulab.engine.gpt.config import GPTConfig, accum_dtype
from gpulab.engine.gpt.corpus import CharTokenizer, get_batch, load_text
from gpulab.engine.gpt.model import init_params
from gpulab.engine.gpt.sample import generate
from gpulab.engine.parallel import timeline
from gpulab.engine.parallel.gpt import ParallelGPT
from gpulab.engine.parallel.memory import memory_report
from gpulab.engine.parallel.mesh import Mesh
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.perf.flops import model_flops
from gpulab.engine.perf.timing import alone, peak_matmul
from gpulab.engine.training import checkpoint
from gpulab.engine.training.optim import AdamW, LossScaler, train_step
from gpulab.engine.training.zero1 import DistributedAdamW
from gpulab.jobsite import record_topology, topology_metadata
from gpulab.launch import pin_gpu
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())

WARMUP_STEPS = 3  # steps left out of the timeline summary (caches, thread pools, first allocations)


PEAK_WHERE = {"host": "all cores", "cupy": "this GPU", "fake": "all cores (fake device)"}


def timeline_report(s: dict, memory: dict, tokens_per_s: float, flops_per_s: float, peak: float,
                    peak_what: str = "best float32 matmul on all cores") -> str:
    """The per-iteration timeline summary, as ``gpulab train`` prints it."""
    ms = 1e3
    lines = [f"timeline per iteration (mean over ranks): {s['wall_s'] * ms:.1f} ms = compute "
             f"{s['compute_s'] * ms:.1f} ms + exposed communication {s['exposed_comm_s'] * ms:.1f} ms; "
             f"hidden (overlapped) communication {s['hidden_comm_s'] * ms:.1f} ms",
             f"throughput {tokens_per_s:.0f} tokens/s, {flops_per_s / 1e9:.2f} model GFLOP/s, MFU "
             f"{flops_per_s / peak:.1%} of this machine's measured peak ({peak / 1e9:.1f} GFLOP/s, "
             f"{peak_what})"]
    for group, g in sorted(s["groups"].items()):
        lines.append(f"  {group:>6}: {g['calls']:.0f} calls, {g['bytes'] / 1e6:.2f} MB, in flight "
                     f"{g['flight_s'] * ms:.1f} ms, exposed {g['exposed_s'] * ms:.1f} ms")
    lines.append("memory per rank (max over ranks): " + ", ".join(
        f"{k} {v / 1e6:.2f} MB" for k, v in memory.items()))
    return "\n".join(lines)


def lr_at(step: int, total: int, args) -> float:
    """Linear warm-up, then cosine decay to lr/10 at step ``total`` (a resumed run goes on
    from where its global step sits on the curve)."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = min(1.0, (step - args.warmup) / max(1, total - args.warmup))
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


class _Interrupt:
    """SIGINT sets a flag instead of raising, so no rank leaves a collective half done."""

    def __init__(self):
        self.requested = False
        self.previous = signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum, frame):
        self.requested = True

    def restore(self) -> None:
        signal.signal(signal.SIGINT, self.previous)


def train(args, shape) -> int:
    # deferred: every gpulab command imports this module to build its parser; only the ranks use these
    from threadpoolctl import threadpool_limits
    from tqdm import tqdm

    comm = MPI.COMM_WORLD
    rank0 = comm.rank == 0
    if args.device == "cupy":
        pin_gpu(comm)  # before CuPy starts CUDA: one GPU per node-local rank
    local = record_topology(comm)["ranks_per_node"]
    threadpool_limits(max(1, (os.cpu_count() or 1) // local))  # ranks sharing a node share cores

    text = load_text(args.corpus)
    ck = checkpoint.load(args.resume) if args.resume else None
    tok = CharTokenizer(ck.extra["chars"]) if ck else CharTokenizer.from_text(text)
    tokens = tok.encode(text)
    split = int(0.9 * len(tokens))
    train_ids, val_ids = tokens[:split], tokens[split:]
    if ck:
        config, params, start = ck.config, ck.params, ck.step
    else:
        pad = math.lcm(8, shape[0])  # vocab divisible by row; unused ids are never targets
        config = GPTConfig(vocab_size=-(-tok.size // pad) * pad, block_size=args.block_size,
                           n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd, dtype=args.dtype)
        params, start = init_params(config, seed=args.seed), 0
    T = config.block_size  # gpulab.cli.train made the flags agree with a resumed checkpoint

    try:
        overlap = Overlap.parse(args.overlap, progress=args.progress_mode, bucket_bytes=args.bucket_kb << 10)
    except ValueError as err:
        raise SystemExit(f"--overlap: {err}") from err
    mesh = Mesh(*shape, pipe=args.pipe)
    gpt = ParallelGPT(config, mesh, overlap=overlap, micro_batches=args.micro_batches, schedule=args.schedule,
                      recompute=args.recompute, sequence_parallel=args.sequence_parallel,
                      virtual_stages=args.virtual_stages, distributed_optimizer=args.distributed_optimizer)
    gpt.load_params(params, device=args.device)
    adam = dict(lr=args.lr, betas=(0.9, 0.99), weight_decay=args.weight_decay)
    opt = DistributedAdamW(gpt, **adam) if args.distributed_optimizer \
        else AdamW(gpt.params, **adam)
    if ck and ck.opt_state:
        acc = accum_dtype(config.dtype)  # the optimizer's dtype: float32 for float16 models
        state = {k: gpt.local_pieces(ck.opt_state[k], acc, args.device) for k in ("m", "v")}
        if acc != config.dtype:  # the checkpoint holds the float32 masters of float16 runs
            state["master"] = gpt.local_pieces(params, acc, args.device)
        opt.load_state_dict({"t": ck.opt_state["t"], **state})
    del params  # from here on each rank keeps only its pieces
    scaler = LossScaler(enabled=config.dtype == "float16")
    out = Path(args.out)
    log_path = Path(args.log) if args.log else out.with_suffix(".loss.jsonl")
    if rank0:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        stages = f" x {args.pipe} stages ({args.micro_batches} micro-batches, {args.schedule})" \
            if args.pipe > 1 else ""
        print(f"gpulab train: {config}, mesh {shape}{stages}, {tok.size} characters, "
              f"{len(train_ids)} training tokens, steps {start}..{start + args.steps}", flush=True)
    log = open(log_path, "a" if ck else "w") if rank0 else None

    def save(step: int) -> dict | None:  # collective: every rank sends its pieces, rank 0 writes (and returns them)
        master = opt.master  # (the distributed optimizer's: gathered over data, by every rank)
        full = gpt.gather_full({**gpt.params, **master}, root=0)  # float16 runs: the float32 masters
        moments = {"m": gpt.gather_full(opt.m, root=0), "v": gpt.gather_full(opt.v, root=0)}
        if rank0:
            try:
                checkpoint.save(out, full, config=config, step=step, opt_state={"t": opt.t, **moments},
                                extra={"chars": tok.chars, "mesh": list(shape), "pipe": args.pipe,
                                       "seed": args.seed})
            except OSError as err:  # e.g. a full disk: the previous checkpoint is still there, whole
                print(f"gpulab train: could not write {out} at step {step} ({err}); the previous checkpoint "
                      f"is intact", file=sys.stderr, flush=True)
        return full

    t0 = time.perf_counter()
    losses, summaries = [], []
    end = start + args.steps
    bar = tqdm(range(start, end), disable=not rank0 or args.no_progress,
               desc="train", unit="step", file=sys.stdout)
    interrupt = _Interrupt()  # Ctrl-C: mpiexec hands SIGINT to every rank; all stop after the same step
    for step in bar:
        x, y = get_batch(train_ids, args.batch_size, T, np.random.default_rng([args.seed, step]))
        lr = lr_at(step, start + args.steps, args)
        with timeline.record() as tl:
            result = train_step(gpt, opt, (x, y), lr=lr, max_norm=args.grad_clip, scaler=scaler)
        summaries.append(timeline.summarize(tl.events))
        loss = result["loss"]
        losses.append(loss)
        if rank0:
            record = {"step": step + 1, "loss": loss, "grad_norm": result["grad_norm"], "lr": lr,
                      "time_s": round(time.perf_counter() - t0, 3)}
            if scaler.enabled:
                record.update(loss_scale=scaler.scale, skipped=result["skipped"])
            log.write(json.dumps(record) + "\n")
            log.flush()
            bar.set_postfix(loss=f"{loss:.3f}", refresh=False)  # tqdm redraws on its own clock
            if (step + 1 - start) % args.log_every == 0 or step + 1 == end:
                tqdm.write(f"step {step + 1}: loss {loss:.4f}", file=sys.stdout)
        if comm.allreduce(interrupt.requested, op=MPI.LOR):
            save(step + 1)
            if rank0:
                log.close()
                print(f"gpulab train: interrupted after step {step + 1}; checkpoint {out} (resume with "
                      f"--resume {out})", flush=True)
            interrupt.restore()
            return 130
        if args.checkpoint_every and (step + 1 - start) % args.checkpoint_every == 0 and step + 1 < end:
            save(step + 1)
    interrupt.restore()
    wall = time.perf_counter() - t0
    with threadpool_limits(os.cpu_count() or 1):  # the machine's peak: rank 0, the others asleep
        peak = alone(comm, lambda: peak_matmul(dtype=config.dtype, repeats=10, device=args.device))
    steady = summaries[min(WARMUP_STEPS, len(summaries) - 1):] if summaries else []
    per_rank = comm.gather(timeline.mean_summary(steady) if steady else None, root=0)
    memories = comm.gather(memory_report(gpt, opt), root=0)

    rng = np.random.default_rng([args.seed, 10**9])  # validation batches, the same on all ranks
    vals = [gpt.loss(*get_batch(val_ids, args.batch_size, T, rng)) for _ in range(args.eval_batches)]
    full = save(end)
    if rank0:
        log.close()
        head = float(np.mean(losses[:10])) if losses else float("nan")
        tail = float(np.mean(losses[-10:])) if losses else float("nan")
        summary = {"first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
                   "first10_mean": head, "last10_mean": tail,
                   "val_loss": float(np.mean(vals)) if vals else None, "steps": args.steps,
                   "wall_s": round(wall, 2), "mesh": list(shape), "pipe": args.pipe,
                   "micro_batches": args.micro_batches, "schedule": args.schedule, "checkpoint": str(out),
                   "recompute": args.recompute, "distributed_optimizer": args.distributed_optimizer,
                   "sequence_parallel": args.sequence_parallel, "virtual_stages": args.virtual_stages,
                   "overlap": overlap.label(), "device": args.device, "dtype": config.dtype,
                   "topology": topology_metadata()}
        if scaler.enabled:
            summary.update(loss_scale=scaler.scale, skipped_steps=scaler.skipped)
        if per_rank[0] is not None:
            tl_summary = timeline.mean_summary(per_rank)
            summary["timeline"] = {k: round(v, 6) for k, v in tl_summary.items() if k != "groups"}
            summary["timeline"]["groups"] = tl_summary["groups"]
            summary["tokens_per_s"] = round(args.batch_size * T / tl_summary["wall_s"], 1)
            flops_per_s = model_flops(config, args.batch_size, T) / tl_summary["wall_s"]
            summary["model_flops_per_s"], summary["peak_flops"] = flops_per_s, peak
            summary["mfu"] = flops_per_s / peak
            summary["memory"] = {k: max(m[k] for m in memories) for k in memories[0]}
            print(timeline_report(tl_summary, summary["memory"], summary["tokens_per_s"], flops_per_s, peak,
                                  f"best {config.dtype} matmul on {PEAK_WHERE[args.device]}"), flush=True)
        print("summary " + json.dumps(summary), flush=True)
        if args.sample > 0:
            prompt = tok.encode("And ")
            ids = generate(full, config, prompt, args.sample, temperature=0.8, top_k=20,
                           n_valid=tok.size, rng=np.random.default_rng(args.seed))
            print("sample:\n" + tok.decode(ids), flush=True)
    gpt.free()
    mesh.free()
    return 0
