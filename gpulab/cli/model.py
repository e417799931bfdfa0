"""``gpulab model``: the performance model from the shell.

    gpulab model rank --world 1024 --model gpt-20b --machine perlmutter     # grid shapes, fastest first
    gpulab model predict --mesh 4,8,2,16 --model gpt-20b --machine perlmutter
    gpulab model compare --world 1024 --model gpt-80b --machine perlmutter  # AxoNN vs its baselines
    gpulab model machines                                                   # profiles and their sources
    gpulab model fit -n 4 --out results/engine_machine_p4.json              # fit this computer (mpiexec)

``--machine`` takes a profile name (perlmutter, frontier, dgx-h100; h100 is
an alias of dgx-h100) or a fitted machine's JSON file; without it, the
profile or file $GPULAB_MACHINE names, else perlmutter (docs/machines.md).
At scale the defaults are AxoNN's way of training: bf16, activation
recomputation, flash attention, overlap of everything but the weight cache
(``--overlap``, ``--no-recompute``, ``--no-flash`` change them). Every
assumption and every machine number's source is printed below the table.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict
from pathlib import Path

from gpulab.backend import DEVICES
from gpulab.cli import model_compare, model_memory
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.perf.comm_only import comm_only_rank
from gpulab.engine.perf.fitted_machine import FittedMachine
from gpulab.engine.perf.fitted_machine import fit as fit_machine
from gpulab.engine.perf.machines import MACHINES
from gpulab.engine.perf.machines import machine as engine_machine
from gpulab.engine.perf.predict import DEFAULT_BUCKET_MB, DEFAULT_OVERLAP, model_config, predict, rank
from gpulab.launch import inside_mpi_job, pin_gpu, relaunch
from gpulab.lazy_mpi import lazy_mpi
from gpulab.machines import ENV

MPI = lazy_mpi(globals())

DEFAULT_MACHINE = "perlmutter"
MACHINE_HELP = (f"{', '.join(MACHINES)} (h100 = dgx-h100) or a fitted JSON "
                f"(default: ${ENV}, else {DEFAULT_MACHINE})")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("model", help="predict iteration times and rank grid shapes",
                                   description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="model_command", required=True, metavar="ACTION")
    for name, help_text in (("rank", "grid shapes of --world GPUs, fastest first"),
                            ("predict", "one grid shape (--mesh R,C,D,P)")):
        p = sub.add_parser(name, help=help_text)
        if name == "rank":
            p.add_argument("--world", type=int, required=True, help="number of GPUs (ranks)")
            p.add_argument("--top", type=int, default=10, help="rows to print (default 10)")
            p.add_argument("--comm-only", action="store_true",
                           help="rank as AxoNN's published model does: communication time alone, from the "
                                "machine's bandwidth table, no latency or compute (beside the full model's place)")
            p.add_argument("--axonn-terms", action="store_true",
                           help="with --comm-only: AxoNN's own transposed-layer terms (K on the row term)")
        else:
            p.add_argument("--mesh", required=True, help="row,col,depth,data")
        p.add_argument("--model", default="gpt-20b", help="gpt-5b ... gpt-640b, or a GPTConfig JSON file")
        p.add_argument("--machine", default=None, help=MACHINE_HELP)
        p.add_argument("--batch-size", type=int, default=None, help="global batch in sequences "
                       "(default: 512 sequences, or the world size if larger)")
        p.add_argument("--seq-len", type=int, default=None, help="default: the model's block size")
        p.add_argument("--overlap", default=DEFAULT_OVERLAP, help=f"none, all or a list (default {DEFAULT_OVERLAP})")
        p.add_argument("--bucket-mb", type=float, default=DEFAULT_BUCKET_MB)
        p.add_argument("--no-recompute", action="store_true", help="keep all activations (no checkpointing)")
        p.add_argument("--no-flash", action="store_true", help="keep the T x T attention probabilities")
        p.add_argument("--json", action="store_true", help="print the predictions as JSON")
        p.set_defaults(func=main)
    model_compare.add_parser(sub)
    model_memory.add_parser(sub)
    p = sub.add_parser("machines", help="the machine profiles and the source of every number")
    p.set_defaults(func=show_machines)
    p = sub.add_parser("fit", help="measure this computer for the model (runs mpiexec -n N)")
    p.add_argument("-n", "--nprocs", type=int, default=4)
    p.add_argument("--out", default=None, help="default results/engine_machine_p<N>.json")
    p.add_argument("--reps", type=int, default=5, help="repetitions of each microbenchmark")
    p.add_argument("--repeat", type=int, default=1,
                   help="fit this many times and keep the mean; how far the fits differ says how far to "
                        "trust the model (default 1)")
    p.add_argument("--device", default="host", choices=tuple(DEVICES),
                   help="where the arrays live, as in the runs to predict (cupy: a GPU per rank)")
    p.set_defaults(func=fit)


def assumptions(args, overlap) -> list[str]:
    return [f"overlap: {overlap.label()} (progress {overlap.progress}, buckets {overlap.bucket_bytes / 2**20:g} MiB)",
            f"activation recomputation: {'off' if args.no_recompute else 'on (forward and its collectives twice)'}",
            f"attention probabilities: {'kept' if args.no_flash else 'not kept (flash attention)'}",
            "rings for every collective; concurrent groups do not share links; no load imbalance",
            "no pipeline parallelism (gpulab model compare models it); grid shapes must split heads, features, "
            "vocabulary and batch"]


def main(args) -> int:
    try:
        machine, config = engine_machine(args.machine, default=DEFAULT_MACHINE), model_config(args.model)
        overlap = Overlap.parse(args.overlap, bucket_bytes=int(args.bucket_mb * 2**20))
    except (KeyError, ValueError, OSError) as err:
        raise SystemExit(f"gpulab model: {err}") from err
    opts = dict(seq_len=args.seq_len, recompute=not args.no_recompute, flash_attention=not args.no_flash)
    if args.model_command == "rank" and args.comm_only:
        return comm_only(args, config, machine, overlap, opts)
    if args.model_command == "rank":
        batch = args.batch_size or max(512, args.world)
        preds = rank(config, args.world, batch, machine, overlap, **opts, keep_unfit=True)
        shown = [p for p in preds if p["fits"]][:args.top]
        dropped = sum(not p["fits"] for p in preds)
        title = f"{args.model} on {args.world} x {machine.name}, batch {batch} sequences"
    else:
        shape = tuple(int(v) for v in args.mesh.split(","))
        batch = args.batch_size or max(512, math.prod(shape))
        shown, dropped = [predict(config, shape, batch, machine, overlap, **opts)], 0
        title = f"{args.model} on {machine.name}, batch {batch} sequences"
    if args.json:
        print(json.dumps(shown, indent=1))
        return 0
    print(title)
    print(table(shown))
    if args.model_command == "rank":
        print(f"{len(shown)} shown; {dropped} shapes dropped: memory does not fit "
              f"({machine.usable_memory:.0%} of {machine.memory_bytes / 1e9:g} GB)")
    warned = [p for p in shown if p.get("caveat")]
    if warned:
        reason, _, why = warned[0]["caveat"].partition(": ")
        print(f"trust LOW for {len(warned)} of {len(shown)} shown: {why} "
              f"(e.g. #{shown.index(warned[0]) + 1}: {reason})")
    print("assumptions:\n  " + "\n  ".join(assumptions(args, overlap)))
    print(f"machine {machine.name}:\n  " + "\n  ".join(machine.assumptions()))
    return 0


def comm_only(args, config, machine, overlap, opts) -> int:
    """``rank --comm-only``: AxoNN's ranking, each shape's place in the full model's beside it."""
    batch = args.batch_size or max(512, args.world)
    rows = comm_only_rank(config, args.world, batch, machine, overlap, **opts, axonn_bug=args.axonn_terms)
    shown = rows[:args.top]
    if args.json:
        print(json.dumps(shown, indent=1))
        return 0
    print(f"{args.model} on {args.world} x {machine.name}, batch {batch} sequences: communication only "
          f"(AxoNN's model{', its transposed-layer terms' if args.axonn_terms else ''})")
    lines = [f"{'#':>3} {'row':>4} {'col':>4} {'depth':>5} {'data':>5} {'comm s':>9} {'full model s':>13} "
             f"{'full #':>6}  seconds by group"]
    for i, r in enumerate(shown, 1):
        R, C, D, P = r["shape"]
        groups = " ".join(f"{g}={v:.3g}" for g, v in sorted(r["groups"].items()))
        lines.append(f"{i:>3} {R:>4} {C:>4} {D:>5} {P:>5} {r['comm_s']:>9.4g} {r['full_iter_s']:>13.4g} "
                     f"{r['full_place']:>6}  {groups}")
    print("\n".join(lines))
    if rows:
        full_pick = min(rows, key=lambda r: r["full_place"])
        same = rows[0]["shape"] == full_pick["shape"]
        print(f"pick: {tuple(rows[0]['shape'])} by communication alone, {tuple(full_pick['shape'])} by the full "
              f"model" + (" (the same)" if same else f"; the comm-only pick is #{rows[0]['full_place']} there, "
                          f"{rows[0]['full_iter_s'] / full_pick['full_iter_s'] - 1:.0%} slower by the full model"))
    print("assumptions:\n  bytes of every collective by AxoNN's per-layer volumes (recomputation: forward "
          "terms twice), bf16; each group's bandwidth from the machine's table (by group size and how far "
          "apart its members sit), else its link; no latency, no compute, no overlap; the same candidate "
          "shapes as the full model (they fit its memory count)")
    print(f"machine {machine.name}:\n  " + "\n  ".join(machine.assumptions()))
    return 0


def table(preds: list[dict]) -> str:
    head = (f"{'#':>3} {'row':>4} {'col':>4} {'depth':>5} {'data':>5} {'iter s':>9} {'compute':>9} "
            f"{'exposed':>9} {'hidden':>8} {'MFU':>6} {'mem GB':>7}  exposed by group")
    lines = [head]
    for i, p in enumerate(preds, 1):
        R, C, D, P = p["shape"]
        groups = " ".join(f"{g}={v['exposed_s']:.3g}" for g, v in sorted(p["groups"].items())
                          if v["exposed_s"] > 0)
        lines.append(f"{i:>3} {R:>4} {C:>4} {D:>5} {P:>5} {p['iter_s']:>9.4g} {p['compute_s']:>9.4g} "
                     f"{p['exposed_comm_s']:>9.4g} {p['hidden_comm_s']:>8.3g} {p['mfu']:>6.1%} "
                     f"{p['memory']['total'] / 1e9:>7.1f}  {groups}")
    return "\n".join(lines)


def show_machines(args) -> int:
    for name in MACHINES:
        m = engine_machine(name)
        print(f"{name}: {m.description}")
        print(f"  {m.ranks_per_node} GPUs/node, peak {m.peak_flops / 1e12:g} TFLOP/s, "
              f"{m.memory_bytes / 1e9:g} GB, intra {m.intra.bandwidth / 1e9:g} GB/s, "
              f"inter {m.inter.bandwidth / 1e9:g} GB/s")
        print("  " + "\n  ".join(m.assumptions()))
    return 0


def fit(args) -> int:
    """Outside an MPI job: re-run on ``-n`` ranks. Inside: fit this computer, rank 0 saves the machine."""
    out = args.out or f"results/engine_machine_p{args.nprocs}.json"
    if not inside_mpi_job():
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        if args.repeat < 1 or args.reps < 1:
            raise SystemExit("gpulab model fit: --reps and --repeat must be at least 1")
        return relaunch(args.nprocs, ["model", "fit", "--out", out, "--reps", str(args.reps),
                                      "--repeat", str(args.repeat), "--device", args.device])
    # deferred: every gpulab command imports this module to build its parser; only the ranks use it
    from threadpoolctl import threadpool_limits

    comm = MPI.COMM_WORLD
    if args.device == "cupy":
        pin_gpu(comm)  # one GPU per node-local rank, before CuPy starts CUDA
    local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
    threadpool_limits(max(1, (os.cpu_count() or 1) // local))  # as gpulab train and the bench do
    fits = [fit_machine(comm, args.reps, device=args.device) for _ in range(args.repeat)]
    if comm.rank == 0:
        machine = FittedMachine.mean(fits) if len(fits) > 1 else fits[0]
        machine.save(out)
        print(json.dumps({k: v for k, v in asdict(machine).items()
                          if k not in ("collectives", "collective_points")}, indent=1))
        print("\n".join(machine.trust_lines()))
    return 0
