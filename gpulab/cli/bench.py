"""``gpulab bench bcast``: measure broadcast algorithms against MPI_Bcast.

    gpulab bench bcast -n 4 --algorithms all --sizes 1K:64M --json out.json --plot out.png
    gpulab bench bcast -n 4 --device cupy --algorithms chain,mpi,nccl   # GPU buffers vs NCCL
    gpulab bench bcast -n 4 --algorithms chain,mpi,mpi:pipelined_tree/kary/1 --chunk-bytes 256K   # MPICH's own chain
    gpulab bench bcast -n 2 --algorithms mpi --check --dtype float32      # OSU's -c, nccl-tests' -d
    gpulab bench bcast -n 4 --sizes 1K --algorithms mpi,binomial --back-to-back   # no barrier between calls
    gpulab bench engine -n 4 --shapes all --overlap "none;all" --out rows.json   # ParallelGPT iterations

Outside an MPI job it starts ``mpiexec -n N`` on itself; inside one (srun,
mpiexec) it measures on the ranks it was given. A native variant
(``mpi:<MPICH algorithm>``, see ``gpulab.bcast.measurement.native_variants``) runs in a job
of its own, since MPICH reads the variables that force it at MPI_Init; the
rows of every job end up in one table, JSON and plot. The 'mpi' column on host
buffers is the bare comm.Bcast on the job's communicator.

Every point is measured in interleaved rounds (``gpulab.bcast.measurement.rounds``): by default until
its median's 95% interval is within ``--target`` of it or ``--budget`` seconds are spent, ``--rounds N``
for exactly N; ``--time-budget`` caps each round's timed iterations of a point. The table shows each
median with its interval; the JSON and CSV records (``gpulab.cli.bench_output``, docs/bench_schema.md)
keep every round's sample and the machine's state read before the job.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from gpulab.backend import DEVICES
from gpulab.bcast.algorithms import registry
from gpulab.bcast.entry import ALGORITHMS, entry_record
from gpulab.bcast.measurement import native_variants, nccl
from gpulab.bcast.measurement.rounds import MAX_ROUNDS, MIN_ROUNDS
from gpulab.cli.bench_output import format_table, write_outputs
from gpulab.cli.bench_rounds import measure_rounds, snapshot_env
from gpulab.cli.checks import (
    nonnegative_float,
    nonnegative_int,
    output_path,
    positive_float,
    positive_int,
    radix,
    size,
    sizes,
    usage_error,
)
from gpulab.emulated.topology import add_topology_args, topology_context
from gpulab.engine import GPTConfig, check_divisibility, grid_shapes
from gpulab.engine.parallel.overlap import PROGRESS, Overlap
from gpulab.engine.perf.timing import bench_config, measure, over_rounds
from gpulab.jobsite import record_topology
from gpulab.launch import inside_mpi_job, pin_gpu, relaunch
from gpulab.lazy_mpi import lazy_mpi
from gpulab.records import metadata
from gpulab.stats import Interval

MPI = lazy_mpi(globals())
ENGINE_ROUNDS = 6  # the fewest rounds whose order statistics bracket a median at 95%
BUDGET = 300.0  # seconds of rounds per sweep by default: the README's example (-n 4, all, 1K:64M) in 5 minutes at most


class _LevelAlgorithms:
    """--inter/--intra's choices: the registry's flat algorithms when parsing, not when this module loaded."""

    def __contains__(self, name) -> bool:
        return name in registry.level_names()

    def __iter__(self):
        return iter(sorted(registry.level_names()))


LEVEL_ALGORITHMS = _LevelAlgorithms()


def add_parser(subparsers) -> None:
    bench = subparsers.add_parser("bench", help="measure communication")
    what = bench.add_subparsers(dest="what", required=True, metavar="WHAT")
    p = what.add_parser("bcast", help="broadcast algorithms vs MPI_Bcast (OSU conventions)",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--ranks", type=positive_int, default=4, help="ranks to start when not inside an MPI job")
    p.add_argument("--algorithms", default="all", help="comma-separated names ('auto' too: the record says what it "
                                                        "chose; mpi:<MPICH algorithm> for MPICH's own, each in a "
                                                        "job of its own), or 'all' (default)")
    p.add_argument("--sizes", type=sizes, default="1K:64M",
                   help="'LOW:HIGH' powers of two, or a comma list (default 1K:64M)")
    p.add_argument("--root", type=nonnegative_int, default=0, help="root rank (default 0)")
    p.add_argument("--iters", type=positive_int, default=None, help="timed iterations (default: OSU's 1000/100)")
    p.add_argument("--warmup", type=nonnegative_int, default=None, help="warm-up iterations (default: OSU's 100/10)")
    p.add_argument("--time-budget", type=nonnegative_float, default=0.1,
                   help="max seconds of timed iterations per point and round, 0 for none (default 0.1)")
    p.add_argument("--rounds", type=positive_int, default=None,
                   help="measure every point exactly this many times, in interleaved rounds (default: until "
                        "--target or --budget)")
    p.add_argument("--target", type=positive_float, default=0.05,
                   help=f"without --rounds: a point stops once its median's 95%% interval is within this share "
                        f"of it (default 0.05; it takes at least {MIN_ROUNDS} rounds)")
    p.add_argument("--budget", type=positive_float, default=BUDGET,
                   help=f"without --rounds: no round starts that would end after this many seconds of the "
                        f"sweep (default {BUDGET:.0f}; at most {MAX_ROUNDS} rounds)")
    p.add_argument("--dtype", default="uint8", type=_dtype,
                   help="element type of the buffer, e.g. uint8, float32, float64 (default uint8): MPI sees it")
    p.add_argument("--check", action="store_true",
                   help="validate every timed iteration (OSU -c, nccl-tests -c); the fill and compare are not timed")
    p.add_argument("--back-to-back", action="store_true",
                   help="no barrier between iterations: calls follow each other as in a framework's loop")
    p.add_argument("--chunk-bytes", type=size, default=None, help="segment size for pipelined algorithms")
    p.add_argument("--radix", type=radix, default=None, help="k-nomial radix")
    p.add_argument("--ranks-per-node", type=positive_int, default=None, help="emulated node size for 'hierarchical'")
    p.add_argument("--inter", choices=LEVEL_ALGORITHMS, default=None,
                   help="hierarchical: the broadcast between node leaders (default binomial); "
                        "--chunk-bytes sizes its chunks when it is pipelined")
    p.add_argument("--intra", choices=LEVEL_ALGORITHMS, default=None,
                   help="hierarchical: the broadcast inside each node (default binomial)")
    p.add_argument("--device", choices=tuple(DEVICES), default="host",
                   help="where the buffers live: " + ", ".join(f"{k} = {v}" for k, v in DEVICES.items()))
    p.add_argument("--path", choices=("auto", "cuda-aware", "staged"), default=None,
                   help="device buffers: straight to a CUDA-aware MPI, or staged through host memory "
                        "(default: ask the MPI library; GPULAB_CUDA_AWARE=0/1 overrides)")
    p.add_argument("--staging-chunk-bytes", type=size, default=None, help="device buffers: D2H pipeline chunk")
    p.add_argument("--json", dest="json_path", type=output_path,
                   help="write the records (and machine metadata) as JSON")
    p.add_argument("--csv", dest="csv_path", type=output_path, help="write the records as CSV")
    p.add_argument("--plot", dest="plot_path", type=output_path, help="save time and busbw against size (PNG/SVG/PDF)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--inner-out", help=argparse.SUPPRESS)  # one job of several: rank 0 writes its rows here
    add_topology_args(p)
    p.set_defaults(func=run)
    _add_engine(what)


def run(args) -> int:
    algorithms = sorted(ALGORITHMS) if args.algorithms == "all" else args.algorithms.split(",")
    native = [a for a in algorithms if native_variants.is_variant(a)]
    for name in native:
        try:
            native_variants.parse(name)
        except ValueError as e:
            usage_error(f"gpulab bench bcast: error: {e}")
    unknown = [a for a in algorithms if a not in ALGORITHMS and a not in ("auto", "nccl") and a not in native]
    if unknown:
        usage_error(f"gpulab bench bcast: error: unknown algorithm(s) {unknown}; valid: "
                    f"{sorted(ALGORITHMS) + ['auto', 'nccl', 'mpi:<MPICH algorithm>']}")
    import numpy as np  # here: every gpulab command builds this parser, and only this one needs numpy

    uneven = [n for n in args.sizes if n % np.dtype(args.dtype).itemsize]
    if uneven:
        usage_error(f"gpulab bench bcast: error: sizes {uneven} are not whole numbers of {args.dtype}")
    if not inside_mpi_job():
        if args.root >= args.ranks:
            usage_error(f"gpulab bench bcast: error: --root {args.root} is not a rank of -n {args.ranks} "
                        f"(0..{args.ranks - 1})")
        with topology_context(args):
            if native:
                from gpulab.cli.bench_jobs import run_jobs

                return run_jobs(args, algorithms, native, report)
            return relaunch(args.ranks, sys.argv[1:], env=snapshot_env(args.ranks))
    return _measure(args)


def _measure(args) -> int:
    comm = MPI.COMM_WORLD
    record_topology(comm)
    algorithms = sorted(ALGORITHMS) if args.algorithms == "all" else args.algorithms.split(",")
    native = [a for a in algorithms if native_variants.is_variant(a)]
    if native:
        from gpulab.cli.bench_jobs import measure_variant

        return measure_variant(comm, args, algorithms, native, report)
    if args.device == "cupy" or "nccl" in algorithms:
        pin_gpu(comm)  # one GPU per rank by node-local rank, before CuPy starts
    if "nccl" in algorithms:
        if all(comm.allgather(nccl.available())):  # every rank or none asks the GPUs (collective)
            why = nccl.gpus_shared(comm)
        else:
            why = "the nccl baseline needs CuPy with NCCL and a GPU per rank"
        if why:
            if comm.rank == 0:
                print(f"gpulab bench: {why}", file=sys.stderr)
            return 2
    if args.root >= comm.size:  # inside a job started elsewhere (srun): the job's size is known only here
        if comm.rank == 0:
            print(f"gpulab bench bcast: error: --root {args.root} is not a rank of this {comm.size}-rank job",
                  file=sys.stderr)
        return 2
    options = {"chunk_bytes": args.chunk_bytes, "radix": args.radix, "ranks_per_node": args.ranks_per_node,
               "path": args.path, "staging_chunk_bytes": args.staging_chunk_bytes, **_level_options(args)}
    records, sweep = measure_rounds(comm, args, algorithms, options=options, dtype=args.dtype, check=args.check,
                                    back_to_back=args.back_to_back,
                                    device="cupy" if "nccl" in algorithms else args.device)
    if comm.rank != 0:
        return 0
    return report(args, records, comm.size, metadata(comm.size, **entry_record()), [sweep])


def report(args, records: list[dict], p: int, meta: dict, sweeps: list[dict]) -> int:
    """Rank 0 of the job, or the process that merged several jobs: the table and files, or the rows for that
    process (--inner-out); exit 1 when a validation failed."""
    if args.inner_out:
        with open(args.inner_out, "w") as f:
            json.dump({"metadata": meta, "records": records, "sweeps": sweeps}, f)
        return 0 if all(r["valid"] for r in records) else 1
    print(format_table(records, sweeps[0].get("snapshot") if sweeps else None))
    write_outputs(args, records, p, meta, sweeps)
    return 0 if all(r["valid"] for r in records) else 1


def _dtype(text: str) -> str:
    import numpy as np

    try:
        return np.dtype(text).name
    except TypeError:
        raise argparse.ArgumentTypeError(f"not a numpy dtype: {text!r}") from None


def _level_options(args) -> dict:
    """hierarchical's two levels as chosen on the command line; a pipelined level takes --chunk-bytes."""
    options = {}
    for level in ("inter", "intra"):
        name = getattr(args, level)
        if name:
            options[level] = name
            if registry.get(name).pipelined and args.chunk_bytes:
                options[level + "_options"] = {"chunk_bytes": args.chunk_bytes}
    return options


def _add_engine(what) -> None:
    p = what.add_parser("engine", help="time ParallelGPT iterations on grid shapes (gpulab.engine.perf.timing)")
    p.add_argument("-n", "--ranks", type=positive_int, default=4, help="ranks to start when not inside an MPI job")
    p.add_argument("--shapes", default="all", help="'all' or R,C,D,P;R,C,D,P")
    p.add_argument("--overlap", default="none;all", help="overlap settings, ';'-separated (each: none, all, or a,b)")
    p.add_argument("--progress", default="poll", choices=PROGRESS,
                   help="mpich: MPICH's progress thread (the job is started with MPIR_CVAR_ASYNC_PROGRESS=1)")
    p.add_argument("--bucket-kb", type=positive_int, default=256)
    p.add_argument("--config", default=None, help="GPTConfig as JSON (default: bench_config)")
    p.add_argument("--batch-size", type=positive_int, default=16)
    p.add_argument("--iters", type=positive_int, default=5)
    p.add_argument("--rounds", type=positive_int, default=ENGINE_ROUNDS,
                   help="sweep every (shape, overlap) this many times, interleaved; each row is the median "
                        f"over rounds with its 95%% interval (default {ENGINE_ROUNDS}: the fewest that give one)")
    p.add_argument("--warmup", type=nonnegative_int, default=2)
    p.add_argument("--peak", type=positive_float, default=None, help="machine peak FLOP/s for MFU")
    p.add_argument("--device", default="host", choices=tuple(DEVICES), help="where the arrays live")
    p.add_argument("--out", type=output_path, required=True)
    p.set_defaults(func=run_engine)


def run_engine(args) -> int:
    """Every (shape, overlap) in interleaved rounds, the median over rounds of each with its interval
    (``timing.over_rounds``); rank 0 writes the rows."""
    if not inside_mpi_job():
        env = {"MPIR_CVAR_ASYNC_PROGRESS": "1"} if args.progress == "mpich" else {}
        return relaunch(args.ranks, sys.argv[1:], env=env)
    # deferred: every gpulab command imports this module to build its parser; only the ranks use it
    from threadpoolctl import threadpool_limits

    comm = MPI.COMM_WORLD
    if args.device == "cupy":
        pin_gpu(comm)  # one GPU per node-local rank, before CuPy starts CUDA
    local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
    threadpool_limits(max(1, (os.cpu_count() or 1) // local))
    config = GPTConfig.from_dict(json.loads(args.config)) if args.config else bench_config()
    shapes = grid_shapes(comm.size) if args.shapes == "all" else \
        [tuple(int(v) for v in s.split(",")) for s in args.shapes.split(";")]
    runs = [(shape, Overlap.parse(text.replace("+", ","), progress=args.progress,
                                  bucket_bytes=args.bucket_kb << 10))
            for shape in shapes for text in args.overlap.split(";")]
    for shape, _ in runs:
        check_divisibility(config, shape, args.batch_size)
    results = {i: [] for i in range(len(runs))}
    for round_ in range(args.rounds):  # interleaved: a burst of load elsewhere hits one round of each
        for i, (shape, overlap) in enumerate(runs):
            row = measure(comm, config, shape, args.batch_size, overlap, iters=args.iters,
                          warmup=args.warmup, peak_flops=args.peak, device=args.device)
            if comm.rank == 0:
                results[i].append(row)
                print(f"round {round_ + 1}/{args.rounds} {shape} {overlap.label():>30}: "
                      f"{row['iter_s'] * 1e3:8.1f} ms exposed {row['summary']['exposed_comm_s'] * 1e3:6.1f} ms "
                      f"hidden {row['summary']['hidden_comm_s'] * 1e3:6.1f} ms", flush=True)
    if comm.rank == 0:
        rows = [over_rounds(rounds) for rounds in results.values() if rounds]
        for row in rows:
            iv = Interval.from_dict(row["iter_s_interval"]).scaled(1e3)
            print(f"{tuple(row['shape'])} {row['overlap_label']:>30}: {iv.text('ms')}", flush=True)
        with open(args.out, "w") as f:
            json.dump(rows, f)
    return 0
