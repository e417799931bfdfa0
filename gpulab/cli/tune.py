"""``gpulab tune``: fit the cost model, build the tuning table, and record how well both work.

    gpulab tune fit      -n 2                      ping-pong -> alpha/beta (saved in the tuning file)
    gpulab tune bcast    -n 2,3,4,8 --sizes 1K:64M sweep -> tuning table that algorithm="auto" uses
    gpulab tune bcast    -n 4 --only-native --export mpich sel.json   MPICH's own algorithms -> its selection file
    gpulab tune compare  -n 2,3,4,8                auto vs MPI_Bcast vs every fixed algorithm
    gpulab tune accuracy -n 2:8                    model predictions vs measurements
    gpulab tune workload -n 4 --networks vgg16,gpt2   start-up broadcast of real networks

The tuning file is --table PATH, else $GPULAB_TUNING_TABLE, else
~/.cache/gpulab/bcast_tuning.json. For each process count the command starts
``mpiexec -n P`` on itself (or measures on the ranks it was given inside an
MPI job) and merges what each job's rank 0 reports. ``--export`` also
measures MPICH's own algorithms (``--native``), each in a job of its own, and
writes what was fastest among them as the MPI library's settings
(``gpulab.bcast.measurement.export``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

from gpulab.bcast.cost.hockney import Machine
from gpulab.bcast.measurement import native_variants
from gpulab.bcast.measurement.pingpong_fit import MPICH_SINGLE_COPY, fit_machine
from gpulab.cli.checks import nonnegative_float, output_path, positive_int, typed
from gpulab.cli.checks import sizes as size_list
from gpulab.cli.tune_jobs import inner, outer
from gpulab.emulated.topology import add_topology_args, topology_context
from gpulab.launch import inside_mpi_job, relaunch


def _ranks(text: str) -> list[int]:
    """'4' -> [4]; '2,3,4,8' -> those; '2:8' -> 2..8."""
    if ":" in text:
        low, high = (int(x) for x in text.split(":"))
        counts = list(range(low, high + 1))
    else:
        counts = [int(x) for x in text.split(",")]
    if not counts or min(counts) < 1:
        raise ValueError(f"process counts must be >= 1: {text!r}")
    return counts


def _radices(text: str) -> list[int]:
    values = [int(x) for x in text.split(",")]
    if min(values) < 2:
        raise ValueError(f"radices must be >= 2: {text!r}")
    return values


def add_parser(subparsers) -> None:
    tune = subparsers.add_parser("tune", help="fit the broadcast cost model and tune algorithm='auto'",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = tune.add_subparsers(dest="what", required=True, metavar="WHAT")
    for name, helptext, ranks, sizes in (
            ("fit", "ping-pong fit of alpha and beta", "2", None),
            ("bcast", "sweep algorithms x chunks x radices x sizes; write the tuning table", "2,3,4,8", "1K:64M"),
            ("compare", "auto vs MPI_Bcast vs every fixed algorithm, side by side", "2,3,4,8", "1K:64M"),
            ("accuracy", "model predictions vs measurements for every algorithm", "2:8",
             "1K,4K,16K,64K,256K,1M,4M,16M,64M"),
            ("workload", "broadcast real networks' parameters, layer-wise and fused", "4", None)):
        p = what.add_parser(name, help=helptext)
        p.add_argument("-n", "--ranks", type=typed(_ranks, "process counts"), default=ranks,
                       help=f"process counts: 4, 2,3,4,8 or 2:8 (default {ranks})")
        if sizes:
            p.add_argument("--sizes", type=size_list, default=sizes, help=f"message sizes (default {sizes})")
        p.add_argument("--table", default=None, help="tuning file (default $GPULAB_TUNING_TABLE or "
                                                     "~/.cache/gpulab/bcast_tuning.json)")
        p.add_argument("--time-budget", type=nonnegative_float, default=0.05 if name != "fit" else 0.02,
                       help="max seconds of timed iterations per point")
        p.add_argument("--json", dest="json_path", type=output_path, help="write the results as JSON")
        p.add_argument("--plot", dest="plot_path", type=output_path, help="save a plot (PNG/SVG/PDF)")
        p.add_argument("--quiet", action="store_true", help="no progress output")
        p.add_argument("--inner-out", help=argparse.SUPPRESS)
        add_topology_args(p)
        if name in ("fit", "bcast", "accuracy"):
            p.add_argument("--ranks-per-node", type=positive_int, default=None if name != "accuracy" else 2,
                           help="emulated node size (fit: pairs inside vs across; accuracy: for hierarchical)")
        if name == "fit":
            p.add_argument("--sizes", type=size_list, default=None,
                           help="ping-pong sizes (default: 8 B .. 4 MiB around the eager/single-copy switch)")
            p.add_argument("--no-save", action="store_true", help="print the fit without storing it")
        if name == "bcast":
            p.add_argument("--chunks", type=size_list, default="16K,64K,256K,1M",
                           help="chunk sizes for pipelined algorithms")
            p.add_argument("--radices", type=typed(_radices, "radices"), default="3,4,8", help="k-nomial radices")
            p.add_argument("--margin", type=nonnegative_float, default=0.10,
                           help="how much faster than MPI_Bcast an algorithm must be to replace it")
            p.add_argument("--no-fit", action="store_true", help="do not fit the model before the sweep")
            p.add_argument("--export", nargs="+", metavar=("FORMAT", "FILE"), default=None,
                           help="also measure MPICH's own algorithms and write the fastest as FORMAT: mpich FILE "
                                "(selection JSON), openmpi FILE (dynamic rules), mvapich2 (prints the ranges)")
            p.add_argument("--native", default=None, help="native variants the export measures, comma-separated "
                           f"(default {','.join(native_variants.TUNED)}; a pipelined_tree at each of --chunks)")
            p.add_argument("--only-native", action="store_true",
                           help="measure only the native variants (no gpulab sweep, the tuning table untouched)")
            p.add_argument("--native-rounds", type=positive_int, default=3,
                           help="rounds of the native jobs; each row keeps its median round (default 3)")
            p.add_argument("--native-variant", help=argparse.SUPPRESS)  # inside one variant's job
        if name in ("compare", "accuracy", "workload"):
            p.add_argument("--algorithms", default=None, help="comma-separated algorithm names")
        if name == "accuracy":
            p.add_argument("--reanalyse", metavar="JSON", help="measure nothing: refit the ping-pong samples and "
                                                               "recompute the predictions of a saved run")
        if name in ("compare", "accuracy"):
            p.add_argument("--rounds", type=positive_int, default=3 if name == "compare" else 2,
                           help="interleaved rounds per size; each point keeps its fastest round")
        if name == "workload":
            p.add_argument("--networks", default="vgg16,gpt2", help="comma-separated: alexnet, vgg16, resnet50, "
                                                                    "gpt2, gpt2-medium")
            p.add_argument("--repeats", type=positive_int, default=3)
        p.set_defaults(func=run)


def _reanalysed(path: str) -> dict:
    """A saved ``tune accuracy --json`` run, its models refitted from their stored samples by today's code."""
    with open(path) as f:
        results = {int(p): r for p, r in json.load(f).items()}
    for p, r in results.items():
        if r.get("model"):
            m = Machine.from_dict(r["model"])
            # the switch of the MPI library that ran (without starting MPI here)
            switch = MPICH_SINGLE_COPY if r["metadata"]["mpi"].startswith("MPICH") else None
            r["model"] = fit_machine(m.notes["samples"], p=p, cores=m.cores, switch=switch,
                                     ranks_per_node=m.ranks_per_node, call=m.call).to_dict()
    return results


def run(args) -> int:
    if any(getattr(args, k, None) for k in ("export", "native", "only_native")):
        check_export(args)
    if getattr(args, "reanalyse", None):
        return outer(args, _reanalysed(args.reanalyse))
    if inside_mpi_job():
        return inner(args)
    with topology_context(args):
        return _launch_each(args)


def _launch_each(args) -> int:
    results = {}
    for p in args.ranks:
        jobs = [] if getattr(args, "only_native", False) else [("", {})]
        # the native jobs in rounds, each round every variant once, each round starting one variant later
        # (no variant always runs first or right after another): a slow spell of a shared machine hits one
        # round of each, and each row keeps its median round (see merge)
        names = native_rows(args)
        rounds = getattr(args, "native_rounds", 1) if names else 0
        jobs += [(name, native_variants.environment(name))
                 for r in range(rounds) for name in names[r % len(names):] + names[:r % len(names)]]
        for name, env in jobs:
            with tempfile.TemporaryDirectory(prefix="gpulab-tune-") as tmp:
                out = os.path.join(tmp, "result.json")
                if not args.quiet:
                    print(f"gpulab tune {args.what}: {p} ranks {name}", file=sys.stderr, flush=True)
                extra = ["--native-variant", name] if name else []
                code = relaunch(p, [*sys.argv[1:], *extra, "--inner-out", out], env=env)
                if code != 0 or not os.path.exists(out):
                    print(f"gpulab tune {args.what}: the job on {p} ranks {name} failed (exit {code})",
                          file=sys.stderr)
                    return code or 1
                with open(out) as f:
                    merge(results.setdefault(p, {}), json.load(f))
    return outer(args, results)


def merge(result: dict, job: dict) -> None:
    """One job's result into its process count's: native rows add up (a row measured again takes its
    rounds' median, and is valid only if every round was), the rest is the main job's.

    The median, not the fastest round: each native variant runs in jobs of its own, and on a small
    machine a job's time varies with where the kernel puts its busy-polling ranks (4 nodes x 1 on 2
    cores, 1 KiB: about 30 or about 55 us, by the job; ``--tie-cores`` fixes the placement). The
    fastest round would compare luck."""
    rows = {(r["algorithm"], r["nbytes"]): r for r in result.get("native", [])}
    for row in job.pop("native", []):
        key = (row["algorithm"], row["nbytes"])
        if key in rows:
            before = rows[key]
            rounds_us = before.get("rounds_us", [before["avg_us"]]) + [row["avg_us"]]
            row = {**row, "rounds_us": rounds_us, "avg_us": statistics.median(rounds_us),
                   "valid": row["valid"] and before["valid"]}
        rows[key] = row
    result.update({k: v for k, v in job.items() if k not in result or k != "metadata"})
    if rows:
        result["native"] = list(rows.values())


def check_export(args) -> None:
    from gpulab.bcast.measurement.export import FORMATS
    from gpulab.cli.checks import usage_error

    if args.export is None:
        usage_error("gpulab tune bcast: error: --native and --only-native go with --export")
    fmt, *path = args.export
    if fmt not in FORMATS or len(path) != (0 if fmt == "mvapich2" else 1):
        usage_error(f"gpulab tune bcast: error: --export takes mpich FILE, openmpi FILE or mvapich2, "
                    f"not {' '.join(args.export)!r}")
    try:
        native_rows(args)
    except ValueError as e:
        usage_error(f"gpulab tune bcast: error: {e}")


def native_rows(args) -> list[str]:
    """The native rows to measure: 'mpi' and every variant, a pipelined_tree once per chunk size."""
    if getattr(args, "export", None) is None or getattr(args, "native_variant", None):
        return []
    names = args.native.split(",") if args.native else list(native_variants.TUNED)
    rows = ["mpi"] if "mpi" not in names else []
    for name in names:
        if name != "mpi" and native_variants.parse(name)[0] == "pipelined_tree":
            rows += [native_variants.variant_name(name, chunk) for chunk in args.chunks]
        else:
            rows.append(name)
    return rows
