"""``gpulab train``: train a character-level GPT on the shipped corpus, on a 4D mesh.

    gpulab train --mesh 1,2,2,1 -n 4              # row,col,depth,data; 4 ranks
    gpulab train --mesh 2,1,1,1 --resume results/gpt.npz --steps 100   # other grid, go on
    gpulab train --mesh 1,1,2,2 --overlap all     # overlap communication (gpulab.engine.overlap)
    gpulab train --mesh 1,2,1,1 --device cupy --dtype float16   # on GPUs, mixed precision

Outside an MPI job the command re-launches itself under ``mpiexec -n N``
(``gpulab.launch``). Every rank draws the same global batch (seeded by step)
and ``ParallelGPT`` computes its own slice. Rank 0 shows a tqdm bar, writes
the loss log (JSON lines, one per step), saves a full checkpoint (loadable on
any grid) and prints a text sample at the end. Every step is recorded as a
timeline (``gpulab.engine.timeline``); the end of the run reports, per
iteration and averaged over ranks and steps (the first few left out as
warm-up), compute, exposed and hidden communication by group, tokens/s and
memory per rank. MFU is measured against the best matmul of the same dtype on
the same device (``peak_matmul``). ``--device cupy`` gives each rank the GPU of
its node-local rank; collectives go to a CUDA-aware MPI or are staged through
host memory (``gpulab.engine.exchange``). ``--dtype float16`` trains with
float32 master weights and dynamic loss scaling (``gpulab.engine.optim``).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

# (flags, argparse keywords): one list drives the parser and the re-launch argv
_OPTIONS = [
    (("--mesh",), dict(default="1,1,1,1", help="grid row,col,depth,data (default 1,1,1,1)")),
    (("-n", "--nprocs"), dict(type=int, default=None, help="MPI ranks (default: product of --mesh)")),
    (("--steps",), dict(type=int, default=500, help="optimizer steps to run (default 500)")),
    (("--batch-size",), dict(type=int, default=32, help="global batch, sequences (default 32)")),
    (("--block-size",), dict(type=int, default=64, help="sequence length T (default 64)")),
    (("--n-layer",), dict(type=int, default=2)),
    (("--n-head",), dict(type=int, default=4)),
    (("--n-embd",), dict(type=int, default=64)),
    (("--dtype",), dict(default="float32", choices=["float16", "float32", "float64"])),
    (("--device",), dict(default="host", choices=["host", "cupy", "fake"],
                         help="where arrays live: host (numpy), cupy (one GPU per rank), fake (CPU "
                              "stand-in for a GPU, gpulab.fakedevice)")),
    (("--lr",), dict(type=float, default=5e-3, help="peak learning rate (default 5e-3)")),
    (("--warmup",), dict(type=int, default=20, help="linear warm-up steps (default 20)")),
    (("--weight-decay",), dict(type=float, default=0.1)),
    (("--grad-clip",), dict(type=float, default=1.0, help="max global gradient norm (default 1)")),
    (("--seed",), dict(type=int, default=0)),
    (("--corpus",), dict(default=None, help="text file (default: the shipped KJV Genesis+Exodus)")),
    (("--out",), dict(default="results/gpt.npz", help="checkpoint path (default results/gpt.npz)")),
    (("--log",), dict(default=None, help="loss log, JSON lines (default: <out>.loss.jsonl)")),
    (("--resume",), dict(default=None, help="checkpoint to continue from (any grid shape)")),
    (("--eval-batches",), dict(type=int, default=4, help="validation batches at the end")),
    (("--sample",), dict(type=int, default=200, help="characters to sample at the end (0: none)")),
    (("--log-every",), dict(type=int, default=50, help="print the loss every N steps")),
    (("--no-progress",), dict(action="store_true", help="no tqdm bar")),
    (("--overlap",), dict(default="none", help="none, all, or a list of async_grads,prefetch,cache,buckets")),
    (("--progress-mode",), dict(default="poll", choices=["poll", "thread", "none"],
                                help="who moves collectives in flight (default poll)")),
    (("--bucket-kb",), dict(type=int, default=256, help="gradient bucket size with --overlap buckets")),
]


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("train", help="train a small GPT on a 4D (row,col,depth,data) mesh",
                                   description=__doc__.splitlines()[0])
    for flags, kwargs in _OPTIONS:
        parser.add_argument(*flags, **kwargs)
    from gpulab.emulated.topology import add_topology_args

    add_topology_args(parser)  # --nodes/--link/--placement: an emulated cluster for the launch
    parser.set_defaults(func=main)


def parse_mesh(text: str) -> tuple[int, int, int, int]:
    try:
        shape = tuple(int(v) for v in text.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 4 or min(shape) < 1:
        raise SystemExit(f"--mesh must be four positive ints row,col,depth,data; got {text!r}")
    return shape


def _argv(args) -> list[str]:
    """The command-line arguments that reproduce ``args`` (for the re-launch)."""
    out = []
    for flags, kwargs in _OPTIONS:
        dest = flags[-1].lstrip("-").replace("-", "_")
        value = getattr(args, dest)
        if kwargs.get("action") == "store_true":
            out += [flags[-1]] if value else []
        elif value is not None:
            out += [flags[-1], str(value)]
    return out


def main(args) -> int:
    shape = parse_mesh(args.mesh)
    n = math.prod(shape)
    if args.nprocs is not None and args.nprocs != n:
        raise SystemExit(f"-n {args.nprocs} does not match --mesh {args.mesh} "
                         f"(row*col*depth*data = {n})")
    if not (inside_mpi() or os.environ.get("GPULAB_TRAIN_LAUNCHED")):
        from gpulab.emulated.topology import topology_context
        from gpulab.launch import mpiexec_command

        with topology_context(args):
            cmd = mpiexec_command(n, ["-m", "gpulab.cli", "train", *_argv(args)])
            env = {**os.environ, "GPULAB_TRAIN_LAUNCHED": "1"}  # never re-launch twice
            return subprocess.call(cmd, env=env)
    return train(args, shape)


def inside_mpi() -> bool:
    from gpulab.launch import inside_mpi_job

    return inside_mpi_job()


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


def train(args, shape) -> int:
    from mpi4py import MPI
    from threadpoolctl import threadpool_limits
    from tqdm import tqdm

    from gpulab.engine import checkpoint
    from gpulab.engine.config import GPTConfig, accum_dtype
    from gpulab.engine.corpus import CharTokenizer, get_batch, load_text
    from gpulab.engine.mesh import Mesh
    from gpulab.engine.model import init_params
    from gpulab.engine import timeline
    from gpulab.engine.bench import alone, peak_matmul
    from gpulab.engine.flops import model_flops
    from gpulab.engine.memory import memory_report
    from gpulab.engine.optim import AdamW, LossScaler, train_step
    from gpulab.engine.overlap import Overlap
    from gpulab.engine.parallel import ParallelGPT
    from gpulab.engine.sample import generate

    comm = MPI.COMM_WORLD
    rank0 = comm.rank == 0
    if args.device == "cupy":
        from gpulab.launch import pin_gpu

        pin_gpu(comm)  # before CuPy starts CUDA: one GPU per node-local rank
    from gpulab.emulated.topology import record_topology, topology_metadata

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
    T = min(args.block_size, config.block_size)

    try:
        overlap = Overlap.parse(args.overlap, progress=args.progress_mode, bucket_bytes=args.bucket_kb << 10)
    except ValueError as err:
        raise SystemExit(f"--overlap: {err}")
    mesh = Mesh(*shape)
    gpt = ParallelGPT(config, mesh, overlap=overlap)
    gpt.load_params(params, device=args.device)
    opt = AdamW(gpt.params, lr=args.lr, betas=(0.9, 0.99), weight_decay=args.weight_decay)
    if ck and ck.opt_state:
        acc = accum_dtype(config.dtype)  # the optimizer's dtype: float32 for float16 models
        state = {k: gpt.local_pieces(ck.opt_state[k], acc, args.device) for k in ("m", "v")}
        if opt.master:  # the checkpoint holds the float32 masters of float16 runs
            state["master"] = gpt.local_pieces(params, acc, args.device)
        opt.load_state_dict({"t": ck.opt_state["t"], **state})
    del params  # from here on each rank keeps only its pieces
    scaler = LossScaler(enabled=config.dtype == "float16")
    out = Path(args.out)
    log_path = Path(args.log) if args.log else out.with_suffix(".loss.jsonl")
    if rank0:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        print(f"gpulab train: {config}, mesh {shape}, {tok.size} characters, "
              f"{len(train_ids)} training tokens, steps {start}..{start + args.steps}", flush=True)
    log = open(log_path, "a" if ck else "w") if rank0 else None

    t0 = time.perf_counter()
    losses, summaries = [], []
    bar = tqdm(range(start, start + args.steps), disable=not rank0 or args.no_progress,
               desc="train", unit="step", file=sys.stdout)
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
            if (step + 1 - start) % args.log_every == 0 or step + 1 == start + args.steps:
                tqdm.write(f"step {step + 1}: loss {loss:.4f}", file=sys.stdout)
    wall = time.perf_counter() - t0
    with threadpool_limits(os.cpu_count() or 1):  # the machine's peak: rank 0, the others asleep
        peak = alone(comm, lambda: peak_matmul(dtype=config.dtype, repeats=10, device=args.device))
    steady = summaries[min(WARMUP_STEPS, len(summaries) - 1):] if summaries else []
    per_rank = comm.gather(timeline.mean_summary(steady) if steady else None, root=0)
    memories = comm.gather(memory_report(gpt), root=0)

    rng = np.random.default_rng([args.seed, 10**9])  # validation batches, the same on all ranks
    vals = [gpt.loss(*get_batch(val_ids, args.batch_size, T, rng)) for _ in range(args.eval_batches)]
    full = gpt.gather_full({**gpt.params, **opt.master}, root=0)  # float16 runs: the float32 masters
    moments = {"m": gpt.gather_full(opt.m, root=0), "v": gpt.gather_full(opt.v, root=0)}
    if rank0:
        log.close()
        checkpoint.save(out, full, config=config, step=start + args.steps,
                        opt_state={"t": opt.t, **moments},
                        extra={"chars": tok.chars, "mesh": list(shape), "seed": args.seed})
        head = float(np.mean(losses[:10])) if losses else float("nan")
        tail = float(np.mean(losses[-10:])) if losses else float("nan")
        summary = {"first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
                   "first10_mean": head, "last10_mean": tail,
                   "val_loss": float(np.mean(vals)) if vals else None, "steps": args.steps,
                   "wall_s": round(wall, 2), "mesh": list(shape), "checkpoint": str(out),
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
