"""The command line: ``python -m tests.testbeds.slurm {up,run}`` (see tests.testbeds.slurm)."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys

from tests.testbeds.slurm import __doc__ as about
from tests.testbeds.slurm.config import Node
from tests.testbeds.slurm.testbed import SlurmTestbed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.testbeds.slurm", description=about.splitlines()[0],
                                     usage="%(prog)s {up,run} [options] [-- COMMAND ...]")
    parser.add_argument("action", choices=("up", "run"), help="up: run until Ctrl-C; run: run COMMAND against it")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=4, help="CPUs each node declares")
    parser.add_argument("--gpus", type=int, default=2, help="fake GPUs (GRES) each node declares")
    parser.add_argument("--emulated", action="store_true",
                        help="each slurmd in a node of an emulated cluster, slurmctld in its login node")
    parser.add_argument("--link", default="1gbit", help="with --emulated: each node's link (100mbit, 1gbit, unlimited)")
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)  # options may follow the action
    args, command = parser.parse_args(argv[:split]), argv[split + 1:]
    nodes = [Node(f"n{i + 1}") for i in range(args.nodes)]
    with SlurmTestbed(nodes, cpus=args.cpus, gpus=args.gpus, emulated=args.emulated, link=args.link) as slurm:
        where = f" at {', '.join(n.address for n in nodes)}, slurmctld at {slurm.controller_address}" \
            if args.emulated else ""
        print(f"Slurm is up in {slurm.timings['up_s']:.1f} s: nodes {', '.join(n.name for n in nodes)}{where}\n"
              f"export SLURM_CONF={slurm.conf}", flush=True)
        if args.emulated:
            print(f"export PATH={slurm.bin}:$PATH", flush=True)
        if args.action == "run":
            return subprocess.run(command, env=slurm.env()).returncode
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
        finally:
            print("stopping Slurm", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
