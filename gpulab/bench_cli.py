"""``gpulab bench bcast``: measure broadcast algorithms against MPI_Bcast.

    gpulab bench bcast -n 4 --algorithms all --sizes 1K:64M --json out.json --plot out.png
    gpulab bench bcast -n 4 --device cupy --algorithms chain,mpi,nccl   # GPU buffers vs NCCL

Outside an MPI job it starts ``mpiexec -n N`` on itself; inside one (srun,
mpiexec) it measures on the ranks it was given.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import platform
import subprocess
import sys

from gpulab.emulated.topology import add_topology_args, record_topology, topology_context, topology_metadata
from gpulab.launch import inside_mpi_job, mpiexec_command, pin_gpu


def add_parser(subparsers) -> None:
    bench = subparsers.add_parser("bench", help="measure communication")
    what = bench.add_subparsers(dest="what", required=True, metavar="WHAT")
    p = what.add_parser("bcast", help="broadcast algorithms vs MPI_Bcast (OSU conventions)",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--ranks", type=int, default=4, help="ranks to start when not inside an MPI job")
    p.add_argument("--algorithms", default="all", help="comma-separated names, or 'all' (default)")
    p.add_argument("--sizes", default="1K:64M", help="'LOW:HIGH' powers of two, or a comma list (default 1K:64M)")
    p.add_argument("--root", type=int, default=0)
    p.add_argument("--iters", type=int, default=None, help="timed iterations (default: OSU's 1000/100)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up iterations (default: OSU's 100/10)")
    p.add_argument("--time-budget", type=float, default=1.0,
                   help="max seconds of timed iterations per point, 0 for none (default 1.0)")
    p.add_argument("--chunk-bytes", type=str, default=None, help="segment size for pipelined algorithms")
    p.add_argument("--radix", type=int, default=None, help="k-nomial radix")
    p.add_argument("--ranks-per-node", type=int, default=None, help="emulated node size for 'hierarchical'")
    p.add_argument("--device", choices=("host", "cupy", "fake"), default="host",
                   help="where the buffers live: host (numpy), cupy (GPU) or fake (CPU stand-in for a GPU)")
    p.add_argument("--path", choices=("auto", "cuda-aware", "staged"), default=None,
                   help="device buffers: straight to a CUDA-aware MPI, or staged through host memory "
                        "(default: ask the MPI library; GPULAB_CUDA_AWARE=0/1 overrides)")
    p.add_argument("--staging-chunk-bytes", type=str, default=None, help="device buffers: D2H pipeline chunk")
    p.add_argument("--json", dest="json_path", help="write the records (and machine metadata) as JSON")
    p.add_argument("--csv", dest="csv_path", help="write the records as CSV")
    p.add_argument("--plot", dest="plot_path", help="save time and busbw against size (PNG/SVG/PDF)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_topology_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    if not inside_mpi_job():
        argv = [a for a in sys.argv[1:]]
        with topology_context(args):
            command = mpiexec_command(args.ranks, ["-m", "gpulab.cli", *argv])
            return subprocess.call(command)
    return _measure(args)


def _measure(args) -> int:
    from mpi4py import MPI

    from gpulab.bcast import ALGORITHMS
    from gpulab.bench import parse_size, size_range, sweep

    comm = MPI.COMM_WORLD
    record_topology(comm)
    algorithms = sorted(ALGORITHMS) if args.algorithms == "all" else args.algorithms.split(",")
    unknown = [a for a in algorithms if a not in ALGORITHMS and a != "nccl"]
    if unknown:
        if comm.rank == 0:
            print(f"gpulab bench: unknown algorithm(s) {unknown}; valid: {sorted(ALGORITHMS) + ['nccl']}",
                  file=sys.stderr)
        return 2
    if args.device == "cupy" or "nccl" in algorithms:
        pin_gpu(comm)  # one GPU per rank by node-local rank, before CuPy starts
    if "nccl" in algorithms:
        from gpulab.bcast import nccl

        if not nccl.available():
            if comm.rank == 0:
                print("gpulab bench: the nccl baseline needs CuPy with NCCL and a GPU per rank", file=sys.stderr)
            return 2
    sizes = size_range(args.sizes)
    options = {"chunk_bytes": parse_size(args.chunk_bytes) if args.chunk_bytes else None,
               "radix": args.radix, "ranks_per_node": args.ranks_per_node, "path": args.path,
               "staging_chunk_bytes": parse_size(args.staging_chunk_bytes) if args.staging_chunk_bytes else None}
    bar = _progress(len(algorithms) * len(sizes)) if comm.rank == 0 and not args.quiet else None
    records = sweep(comm, algorithms, sizes, options=options, root=args.root, iters=args.iters,
                    device="cupy" if "nccl" in algorithms else args.device,
                    warmup=args.warmup, time_budget=args.time_budget or None,
                    progress=(lambda done, total, r: _advance(bar, r)) if bar else None)
    if comm.rank != 0:
        return 0
    if bar:
        bar.close()
    print(format_table(records))
    _write_outputs(args, records, comm.size)
    return 0 if all(r["valid"] for r in records) else 1


def _progress(total: int):
    from tqdm import tqdm

    return tqdm(total=total, unit="point", file=sys.stderr, mininterval=0.5, dynamic_ncols=True)


def _advance(bar, record: dict) -> None:
    from gpulab.bench import format_size

    bar.set_postfix_str(f"{record['algorithm']} {format_size(record['nbytes'])}", refresh=False)
    bar.update()


def format_table(records: list[dict]) -> str:
    """Rows = sizes, columns = algorithms, cells = avg us; '!' marks a failed validation."""
    from gpulab.bench import format_size

    algorithms = list(dict.fromkeys(r["algorithm"] for r in records))
    cells = {(r["nbytes"], r["algorithm"]): r for r in records}
    width = max(10, *(len(a) + 1 for a in algorithms))
    lines = ["size".rjust(8) + "".join(a.rjust(width) for a in algorithms) + "  best (x vs mpi)"]
    for size in sorted({r["nbytes"] for r in records}):
        row = [cells.get((size, a)) for a in algorithms]
        text = "".join((f"{r['avg_us']:.1f}" + ("" if r["valid"] else "!")).rjust(width) if r else
                       "-".rjust(width) for r in row)
        present = [r for r in row if r]
        best = min(present, key=lambda r: r["avg_us"])
        mpi = cells.get((size, "mpi"))
        ratio = f" ({mpi['avg_us'] / best['avg_us']:.2f}x)" if mpi else ""
        lines.append(format_size(size).rjust(8) + text + f"  {best['algorithm']}{ratio}")
    p = records[0]["p"] if records else "?"
    return f"broadcast time per call (us, average over {p} ranks)\n" + "\n".join(lines)


def metadata(p: int) -> dict:
    from mpi4py import MPI

    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "gpulab " + " ".join(sys.argv[1:]), "ranks": p, "host": platform.node(),
            "cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
            "mpi": " ".join(MPI.Get_library_version().split()[:3]), **topology_metadata()}


def _write_outputs(args, records: list[dict], p: int) -> None:
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump({"metadata": metadata(p), "records": records}, f, indent=1)
    if args.csv_path:
        with open(args.csv_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=[k for k in records[0] if k != "options"] + ["options"])
            writer.writeheader()
            writer.writerows({**r, "options": json.dumps(r["options"])} for r in records)
    if args.plot_path:
        import matplotlib

        matplotlib.use("Agg")
        from gpulab.plots import sweep_figure

        fig = sweep_figure(records)
        fig.suptitle(f"broadcast on {p} ranks ({metadata(p)['mpi']})")
        fig.savefig(args.plot_path, dpi=120)
    for path in (args.json_path, args.csv_path, args.plot_path):
        if path:
            print(f"wrote {path}")
