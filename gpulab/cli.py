"""The gpulab command line: gpulab bench|cluster|train|tune|model ...

Each command lives in its own module that defines ``add_parser(subparsers)``;
the parser it adds sets ``func`` (called with the parsed args). Modules are
imported only when listed here, and none of them initialises MPI at import.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command name -> module that implements it
COMMANDS = {
    "bench": "gpulab.bench_cli",
    "cluster": "gpulab.emulated.cli",
    "model": "gpulab.engine.model_cli",
    "train": "gpulab.engine.train",
    "tune": "gpulab.tune_cli",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpulab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS.values():
        importlib.import_module(module).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
