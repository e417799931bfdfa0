"""The two halves of ``gpulab tune`` (see ``gpulab.tune_cli``).

``inner(args)`` runs inside one MPI job (every rank) and writes rank 0's
result as JSON; ``outer(args, results)`` gets {P: result} for every process
count, stores models and tables in the tuning file, prints a summary and
writes --json/--plot.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys

from gpulab.emulated.topology import record_topology, topology_metadata


def _sizes(text):
    from gpulab.bench import size_range

    return size_range(text) if text else None


def _progress(comm, args):
    if args.quiet or comm.rank != 0:
        return None

    def show(row):
        from gpulab.sizes import format_size

        print(f"  p={row['p']} {row['algorithm']:>22} {format_size(row['nbytes']):>6} {row['avg_us']:10.1f} us",
              file=sys.stderr, flush=True)
    return show


def metadata(comm) -> dict:
    from mpi4py import MPI

    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "gpulab " + " ".join(a for a in sys.argv[1:] if not a.startswith("--inner-out")
                                            and "gpulab-tune-" not in a),
            "ranks": comm.size, "host": platform.node(), "cores": len(os.sched_getaffinity(0)),
            "python": platform.python_version(), "mpi": " ".join(MPI.Get_library_version().split()[:3]),
            "load_before": os.getloadavg(), **topology_metadata()}


def inner(args) -> int:
    from mpi4py import MPI

    from gpulab.bcast import experiments

    comm = MPI.COMM_WORLD
    record_topology(comm)
    meta = metadata(comm) if comm.rank == 0 else None
    progress = _progress(comm, args)
    algorithms = args.algorithms.split(",") if getattr(args, "algorithms", None) else None
    result: dict = {}
    if args.what == "fit":
        result["model"] = experiments.fit(comm, _sizes(args.sizes), args.ranks_per_node, args.time_budget)
    elif args.what == "bcast":
        model = None if args.no_fit or comm.size < 2 else experiments.fit(comm, ranks_per_node=args.ranks_per_node)
        model = comm.bcast(model, root=0)
        result["model"] = model
        result["table"] = experiments.tune(
            comm, _sizes(args.sizes), chunks=[int(c) for c in _sizes(args.chunks)],
            radices=[int(r) for r in args.radices.split(",")], time_budget=args.time_budget,
            margin=args.margin, machine=model, progress=progress)
    elif args.what == "compare":
        kw = {"algorithms": algorithms} if algorithms else {}
        result["rows"] = experiments.compare(comm, _sizes(args.sizes), table=args.table, rounds=args.rounds,
                                             time_budget=args.time_budget, progress=progress, **kw)
    elif args.what == "accuracy":
        result["model"] = experiments.fit(comm) if comm.size > 1 else None
        kw = {"algorithms": algorithms} if algorithms else {}
        result["rows"] = experiments.accuracy(comm, _sizes(args.sizes), time_budget=args.time_budget,
                                              ranks_per_node=args.ranks_per_node, rounds=args.rounds,
                                              progress=progress, **kw)
    elif args.what == "workload":
        from gpulab.workloads.bench import broadcast_model

        names = algorithms or ["mpi", "binomial", "chain", "scatter_allgather_ring", "auto"]
        rows = []
        with experiments.auto_registered(args.table):
            for network in args.networks.split(","):
                rows += broadcast_model(comm, network, names, repeats=args.repeats)
                if progress:
                    print(f"  p={comm.size} {network} done", file=sys.stderr, flush=True)
        result["rows"] = rows
    if comm.rank != 0:
        return 0
    result["metadata"] = {**meta, "load_after": os.getloadavg()}
    if args.inner_out:
        with open(args.inner_out, "w") as f:
            json.dump(result, f)
        return 0
    return outer(args, {comm.size: result})


def outer(args, results: dict) -> int:
    from gpulab.bcast import report

    results = {int(p): r for p, r in results.items()}
    ok = report.handle(args, results)
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump({str(p): r for p, r in results.items()}, f, indent=1)
        print(f"wrote {args.json_path}")
    if args.plot_path:
        import matplotlib

        matplotlib.use("Agg")
        from gpulab.bcast import plots

        plots.for_command(args.what, results).savefig(args.plot_path, dpi=110)
        print(f"wrote {args.plot_path}")
    return 0 if ok else 1
