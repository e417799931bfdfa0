"""How an engine benchmark starts itself as an MPI job whose record says where and how it ran.

    add_provenance_args(run_parser)       # hidden --command/--cluster/--load-before, filled in by run_as_job
    run_as_job(__file__, n, timeout, cluster="emulated: 2 nodes x 2 ranks, ...")   # inside `with EmulatedCluster`

The job re-runs the same script under ``mpiexec -n n`` (routed to the active
emulated cluster, if any) with the command line as typed, a description of
the cluster and the load average before the run, so the JSON record keeps them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from gpulab.launch import mpiexec_command

ROOT = Path(__file__).resolve().parents[1]


def add_provenance_args(parser: argparse.ArgumentParser) -> None:
    for hidden in ("--command", "--cluster"):
        parser.add_argument(hidden, default="", help=argparse.SUPPRESS)
    parser.add_argument("--load-before", type=float, nargs=3, default=None, help=argparse.SUPPRESS)


def run_as_job(script: str, n: int, timeout: float, cluster: str) -> int:
    """Run ``script`` with this process's arguments on ``n`` ranks; its exit status."""
    command = f"python benchmarks/{Path(script).name} " + " ".join(sys.argv[1:])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    extra = ["--command", command, "--cluster", cluster, "--load-before", *map(str, os.getloadavg())]
    cmd = mpiexec_command(n, [str(Path(script).resolve()), *sys.argv[1:], *extra])
    return subprocess.run(cmd, env=env, timeout=timeout).returncode
