"""The gpulab command line: gpulab bench|cluster|train|tune|model ...

Every command lives in a module of this folder that defines
``add_parser(subparsers)``; the parser it adds sets ``func`` (called with the
parsed args). None of them initialises MPI at import. A command that needs
ranks re-runs itself under mpiexec with ``gpulab.launch.relaunch`` when it
was not started inside an MPI job.
"""

from __future__ import annotations

import argparse
import importlib

# command name -> module that implements it
COMMANDS = {
    "bench": "gpulab.cli.bench",
    "cluster": "gpulab.cli.cluster",
    "model": "gpulab.cli.model",
    "scoreboard": "gpulab.cli.scoreboard",
    "train": "gpulab.cli.train",
    "tune": "gpulab.cli.tune",
}


def build_parser() -> argparse.ArgumentParser:
    from gpulab.cli.checks import Parser  # one-line errors, for every subcommand too

    parser = Parser(prog="gpulab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS.values():
        importlib.import_module(module).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)
