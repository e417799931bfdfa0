"""The two halves of ``gpulab tune`` (see ``gpulab.cli.tune``).

``inner(args)`` runs inside one MPI job (every rank) and writes rank 0's
result as JSON; ``outer(args, results)`` gets {P: result} for every process
count, stores models and tables in the tuning file, prints a summary and
writes --json/--plot.
"""

from __future__ import annotations

import json
import os
import sys

from gpulab.bcast.entry import entry_record
from gpulab.bcast.measurement import experiments, export, report
from gpulab.bcast.selection.tuning import build_table
from gpulab.bcast.sizes import format_size
from gpulab.jobsite import record_topology
from gpulab.lazy_mpi import lazy_mpi
from gpulab.records import metadata
from gpulab.workloads.startup import broadcast_model
from gpulab.workloads.startup import report as workload_report

MPI = lazy_mpi(globals())


def _progress(comm, args):
    if args.quiet or comm.rank != 0:
        return None

    def show(row):
        print(f"  p={row['p']} {row['algorithm']:>22} {format_size(row['nbytes']):>6} {row['avg_us']:10.1f} us",
              file=sys.stderr, flush=True)
    return show


def inner(args) -> int:
    comm = MPI.COMM_WORLD
    record_topology(comm)
    meta = {**metadata(comm.size, **entry_record()), "load_before": os.getloadavg()} if comm.rank == 0 else None
    progress = _progress(comm, args)
    algorithms = args.algorithms.split(",") if getattr(args, "algorithms", None) else None
    result: dict = {}
    if getattr(args, "native_variant", None):
        result["native"] = experiments.native_sweep(comm, args.sizes, args.native_variant,
                                                    time_budget=args.time_budget, progress=progress)
        if comm.rank == 0 and MPI.Get_library_version().startswith("MPICH") and export.loaded_libmpi():
            result["mpich_rules"] = export.library_rules(export.loaded_libmpi())
    elif args.what == "fit":
        result["model"] = experiments.fit(comm, args.sizes, args.ranks_per_node, args.time_budget)
    elif args.what == "bcast":
        model = None if args.no_fit or comm.size < 2 else experiments.fit(comm, ranks_per_node=args.ranks_per_node)
        model = comm.bcast(model, root=0)
        result["model"] = model
        result["table"] = experiments.tune(
            comm, args.sizes, chunks=args.chunks,
            radices=args.radices, time_budget=args.time_budget,
            margin=args.margin, machine=model, progress=progress)
    elif args.what == "compare":
        kw = {"algorithms": algorithms} if algorithms else {}
        result["rows"] = experiments.compare(comm, args.sizes, table=args.table, rounds=args.rounds,
                                             time_budget=args.time_budget, progress=progress, **kw)
    elif args.what == "accuracy":
        result["model"] = experiments.fit(comm) if comm.size > 1 else None
        kw = {"algorithms": algorithms} if algorithms else {}
        result["rows"] = experiments.accuracy(comm, args.sizes, time_budget=args.time_budget,
                                              ranks_per_node=args.ranks_per_node, rounds=args.rounds,
                                              progress=progress, **kw)
    elif args.what == "workload":
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
    results = {int(p): r for p, r in results.items()}
    ok = report.handle(args, results, workload_report)
    if getattr(args, "export", None):
        ok &= _export(args, results)
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump({str(p): r for p, r in results.items()}, f, indent=1)
        print(f"wrote {args.json_path}")
    if args.plot_path:
        # only --plot draws, and every gpulab command imports this module to build its parser
        import matplotlib

        matplotlib.use("Agg")
        from gpulab.bcast.plots import tuning_plots as plots

        plots.for_command(args.what, results).savefig(args.plot_path, dpi=110)
        print(f"wrote {args.plot_path}")
    return 0 if ok else 1


def _export(args, results: dict) -> bool:
    """Tables of the native rows (MPI_Bcast's own choice unless a variant beats it by --margin), then the file."""
    tables = {}
    for p, r in sorted(results.items()):
        tables[p] = r["native_table"] = build_table(r["native"], p, args.margin)
        print(report.format_ranges(tables[p], "the exported native MPI_Bcast"))
    builtin = next((r["mpich_rules"] for r in results.values() if "mpich_rules" in r), None)
    fmt, *path = args.export
    print(export.write(fmt, path[0] if path else None, tables, builtin))
    return all(row["valid"] for r in results.values() for row in r["native"])
