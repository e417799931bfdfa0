"""``gpulab tune``: fit the cost model, build the tuning table, and record how well both work.

    gpulab tune fit      -n 2                      ping-pong -> alpha/beta (saved in the tuning file)
    gpulab tune bcast    -n 2,3,4,8 --sizes 1K:64M sweep -> tuning table that algorithm="auto" uses
    gpulab tune compare  -n 2,3,4,8                auto vs MPI_Bcast vs every fixed algorithm
    gpulab tune accuracy -n 2:8                    model predictions vs measurements
    gpulab tune workload -n 4 --networks vgg16,gpt2   start-up broadcast of real networks

The tuning file is --table PATH, else $GPULAB_TUNING_TABLE, else
~/.cache/gpulab/bcast_tuning.json. For each process count the command starts
``mpiexec -n P`` on itself (or measures on the ranks it was given inside an
MPI job) and merges what each job's rank 0 reports.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from gpulab.bcast.fit import MPICH_SINGLE_COPY, fit_machine
from gpulab.cli.checks import typed, nonnegative_float, output_path, positive_int
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
            m = r["model"]
            # the switch of the MPI library that ran (without starting MPI here)
            switch = MPICH_SINGLE_COPY if r["metadata"]["mpi"].startswith("MPICH") else None
            r["model"] = fit_machine(m["notes"]["samples"], p=p, cores=m["cores"], switch=switch,
                                     ranks_per_node=m["ranks_per_node"], call=m.get("call", 0.0)).to_dict()
    return results


def run(args) -> int:
    if getattr(args, "reanalyse", None):
        return outer(args, _reanalysed(args.reanalyse))
    if inside_mpi_job():
        return inner(args)
    with topology_context(args):
        return _launch_each(args)


def _launch_each(args) -> int:
    results = {}
    for p in args.ranks:
        with tempfile.TemporaryDirectory(prefix="gpulab-tune-") as tmp:
            out = os.path.join(tmp, "result.json")
            if not args.quiet:
                print(f"gpulab tune {args.what}: {p} ranks", file=sys.stderr, flush=True)
            code = relaunch(p, [*sys.argv[1:], "--inner-out", out])
            if code != 0 or not os.path.exists(out):
                print(f"gpulab tune {args.what}: the job on {p} ranks failed (exit {code})", file=sys.stderr)
                return code or 1
            with open(out) as f:
                results[p] = json.load(f)
    return outer(args, results)
