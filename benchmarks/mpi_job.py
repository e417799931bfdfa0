"""How an engine benchmark starts itself as an MPI job whose record says where and how it ran.

    main(__doc__, configure=lambda run: add_run_args(run, link="1gbit", rounds=2, iters=5, fit_reps=2,
         timeout=600), job=job, launch=launch, report=report, run_help=..., report_help=...)
    # in launch(), inside `with EmulatedCluster`:
    run_as_job(__file__, n, timeout, cluster="emulated: 2 nodes x 2 ranks, ...")

The job re-runs the same script under ``mpiexec -n n`` (routed to the active
emulated cluster, if any) with the command line as typed, a description of
the cluster and the load average before the run, so the JSON record keeps them.
The small benchmarks' ranks instead print their measurements as one JSON line,
which ``rank0_json`` hands back.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from gpulab.launch import inside_mpi_job, mpiexec_command, run_on_ranks

ROOT = Path(__file__).resolve().parents[1]


def main(doc: str, *, configure, job, launch, report, run_help: str, report_help: str, check=None) -> None:
    """A benchmark's command line: ``run`` (``configure(parser)`` adds its options) measures, started
    as an MPI job by ``launch(args)`` whose ranks call ``job(args)``; ``report`` writes the docs."""
    from gpulab.cli.checks import Parser

    parser = Parser(description=doc.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    configure(sub.add_parser("run", help=run_help))
    sub.add_parser("report", help=report_help)
    args = parser.parse_args()
    if args.what == "report":
        report()
    elif inside_mpi_job():
        run_on_ranks(job, args)
    else:
        if check is not None:
            check(args, parser)
        sys.exit(launch(args))


def add_run_args(parser: argparse.ArgumentParser, *, link: str, rounds: int, iters: int, fit_reps: int,
                 timeout: float) -> None:
    """The options every engine benchmark's ``run`` takes (checked: one-line errors), and the provenance ones."""
    from gpulab.cli.checks import positive_float, positive_int, typed
    from gpulab.emulated import parse_link

    parser.add_argument("--link", default=link, type=typed(parse_link, "a link rate"),
                        help=f"rate of each emulated node's link (default {link})")
    parser.add_argument("--rounds", type=positive_int, default=rounds, help=f"interleaved rounds (default {rounds})")
    parser.add_argument("--iters", type=positive_int, default=iters,
                        help=f"timed iterations per round (default {iters})")
    parser.add_argument("--fit-reps", type=positive_int, default=fit_reps,
                        help=f"repetitions of each fit measurement (default {fit_reps})")
    parser.add_argument("--timeout", type=positive_float, default=timeout,
                        help=f"seconds before the job is stopped (default {timeout:g})")
    add_provenance_args(parser)


def add_provenance_args(parser: argparse.ArgumentParser) -> None:
    """Hidden --command/--cluster/--load-before, filled in by ``run_as_job``."""
    for hidden in ("--command", "--cluster"):
        parser.add_argument(hidden, default="", help=argparse.SUPPRESS)
    parser.add_argument("--load-before", type=float, nargs=3, default=None, help=argparse.SUPPRESS)


def job_env(**extra: str) -> dict:
    """The environment of a benchmark's ranks: the checkout importable, one BLAS thread per rank (the
    ranks already share the cores)."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", **extra}


def rank0_json(script: str, n: int, args: list[str], *, timeout: float | None = None, env: dict | None = None):
    """Run ``script args`` on ``n`` ranks (on the active emulated cluster, if any) and return the JSON
    line its rank 0 printed last; a failed job raises with what the ranks wrote."""
    done = subprocess.run(mpiexec_command(n, [str(script), *args]), env=env or job_env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"{Path(script).name} on {n} ranks exited {done.returncode}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def small_benchmark(script: str, doc: str, in_ranks, timeout: float = 900) -> dict | None:
    """A small benchmark's command line (``add_placement_args``): in the job's ranks run ``in_ranks()``,
    whose rank 0 prints one JSON object, and return None; otherwise start that job where the options
    say and return its record: what rank 0 printed, the command, date, setting, CPUs and load."""
    import time

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_placement_args(parser)
    parser.add_argument("--in-ranks", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.in_ranks:
        in_ranks()
        return None
    ranks, setting, cluster = placement(args, parser)
    load_before = os.getloadavg()[0]
    with cluster:
        measured = rank0_json(script, ranks, ["--in-ranks"], timeout=timeout)
    from gpulab.records import provenance

    return {"provenance": provenance(doc, typed_command(script)), "command": typed_command(script),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "setting": setting,
            "cpus": os.cpu_count(), "load_before": load_before, "load_after": os.getloadavg()[0], **measured}


def write_record(record: dict, stem: str, plot) -> Path:
    """A small benchmark's record as docs/results/<stem>_<setting>.json, and ``plot(record, path)`` beside it."""
    out = ROOT / "docs" / "results" / f"{stem}_{record['setting']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    plot(record, out.with_suffix(".png"))
    print(f"wrote {out.relative_to(ROOT)} and {out.with_suffix('.png').name}")
    return out


def ratio_plot(path: Path, curves: dict, *, xlabel: str, ylabel: str, title: str) -> None:
    """Ratios over message size, one curve per label (label -> [(bytes, ratio), ...]), on a log2 axis of
    KiB with a line at 1.0 (the small benchmarks' plots of one call's time against another's)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    for label, points in curves.items():
        ax.plot([nbytes >> 10 for nbytes, _ in points], [ratio for _, ratio in points], "o-", label=label)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_placement_args(parser: argparse.ArgumentParser) -> None:
    """--ranks N (on this machine) or --link RATE (emulated nodes, 2 x 2 in block placement unless
    --nodes/--ranks-per-node/--placement say otherwise): where a small benchmark runs."""
    from gpulab.emulated import PLACEMENTS

    parser.add_argument("--ranks", type=int, default=4, help="ranks on this machine (default 4; not with --link)")
    parser.add_argument("--link", default=None, help="emulate nodes joined at this rate, e.g. 1gbit")
    parser.add_argument("--nodes", type=int, default=2, help="emulated nodes, with --link (default 2)")
    parser.add_argument("--ranks-per-node", type=int, default=2, help="ranks on each, with --link (default 2)")
    parser.add_argument("--placement", choices=PLACEMENTS, default="block",
                        help="ranks' order over the nodes, with --link (default block)")


def placement(args: argparse.Namespace, parser: argparse.ArgumentParser):
    """(ranks, the setting's name, a context that holds its cluster) for ``add_placement_args``' options;
    bad ones end the command with the parser's one-line error."""
    from contextlib import nullcontext

    if args.ranks < 2:
        parser.error("--ranks must be at least 2")
    if not args.link:
        return args.ranks, f"1x{args.ranks}_machine", nullcontext()
    if args.ranks != 4:
        parser.error("--link runs emulated nodes (--nodes, --ranks-per-node): --ranks does not apply")
    if args.nodes < 2 or args.ranks_per_node < 1:
        parser.error("--nodes must be at least 2 and --ranks-per-node at least 1")
    from gpulab.emulated import EmulatedCluster, parse_link

    try:
        link = parse_link(args.link)
    except ValueError as err:
        parser.error(str(err))
    nodes, per_node = args.nodes, args.ranks_per_node
    return (nodes * per_node, f"{nodes}x{per_node}_{args.placement}_{args.link}",
            EmulatedCluster(nodes=nodes, ranks_per_node=per_node, link=link, placement=args.placement))


def typed_command(script: str) -> str:
    """The command as typed, with the MPICH control variables (``MPIR_CVAR_*``, read at MPI_Init) and the
    emulated nodes' TCP congestion control ($GPULAB_TCP_CONGESTION) it ran under in front."""
    from gpulab.emulated.cluster import ENV_CONGESTION

    settings = [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("MPIR_CVAR_") or k == ENV_CONGESTION]
    return " ".join([*settings, f"python benchmarks/{Path(script).name}", *sys.argv[1:]])


def tcp_congestion() -> str:
    """TCP's congestion control where this process runs (an emulated node's namespace, or the machine)."""
    from gpulab.emulated.netns import CONGESTION

    return Path(CONGESTION).read_text().strip()


def run_as_job(script: str, n: int, timeout: float, cluster: str) -> int:
    """Run ``script`` with this process's arguments on ``n`` ranks; its exit status."""
    command = typed_command(script)
    env = job_env()
    extra = ["--command", command, "--cluster", cluster, "--load-before", *map(str, os.getloadavg())]
    cmd = mpiexec_command(n, [str(Path(script).resolve()), *sys.argv[1:], *extra])
    return subprocess.run(cmd, env=env, timeout=timeout).returncode
