"""``gpulab cluster up|show|down``: an emulated cluster that stays up between commands.

    gpulab cluster up --nodes 4 --link 1gbit [--placement round-robin] [--ranks-per-node 2] [--name NAME]
    export GPULAB_CLUSTER=NAME        # every gpulab command (bench, tune, train) then runs on it
    gpulab cluster show [NAME]        # nodes, addresses, link rates, processes on each node
    gpulab cluster down [NAME | --all]

Commands given ``--nodes`` bring up a cluster of their own for the length of
the command instead. The nodes are network namespaces held by one keeper
process; ``down`` ends it and the kernel removes the namespaces, links and
bridge. Needs root, or unprivileged user namespaces.
"""

from __future__ import annotations

import argparse
import sys

DEFAULT_NAME = "gpulab"


def add_parser(subparsers) -> None:
    from gpulab.emulated import PLACEMENTS

    cluster = subparsers.add_parser("cluster", help="an emulated multi-node cluster on this machine",
                                    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = cluster.add_subparsers(dest="what", required=True, metavar="WHAT")
    up = what.add_parser("up", help="bring a cluster up (it stays up until 'down')")
    up.add_argument("--name", default=DEFAULT_NAME, help=f"its name (default {DEFAULT_NAME})")
    up.add_argument("--nodes", type=int, default=4)
    up.add_argument("--ranks-per-node", type=int, default=None, help="default: ranks / nodes at each launch")
    up.add_argument("--link", default="1gbit", help="100mbit, 1gbit, 10gbit or unlimited (default 1gbit)")
    up.add_argument("--placement", choices=PLACEMENTS, default="block")
    up.add_argument("--mode", choices=("auto", "root", "user"), default="auto",
                    help="root, or an unprivileged user namespace (default: root if root)")
    up.add_argument("--shared-cores", action="store_true",
                    help="let every node use every core (default: each node its own share of the cores)")
    show = what.add_parser("show", help="describe one cluster, or list those that are up")
    show.add_argument("name", nargs="?")
    down = what.add_parser("down", help="take a cluster down")
    down.add_argument("name", nargs="?", default=DEFAULT_NAME)
    down.add_argument("--all", action="store_true", help="every cluster that is up")
    cluster.set_defaults(func=run)


def _up_names() -> list[str]:
    from gpulab.emulated import STATE_DIR

    return sorted(p.stem for p in STATE_DIR.glob("*.json")) if STATE_DIR.is_dir() else []


def run(args) -> int:
    from gpulab.emulated import ClusterUnavailable, EmulatedCluster

    try:
        if args.what == "up":
            cluster = EmulatedCluster(nodes=args.nodes, ranks_per_node=args.ranks_per_node, link=args.link,
                                      placement=args.placement, mode=args.mode, name=args.name, export=False,
                                      own_cores=not args.shared_cores)
            cluster.start(detached=True)
            print(cluster.describe())
            print(f"run gpulab commands on it with: export GPULAB_CLUSTER={args.name}")
            return 0
        if args.what == "show":
            names = [args.name] if args.name else _up_names()
            if not names:
                print("no emulated cluster is up")
            for name in names:
                cluster = EmulatedCluster.attach(name)
                print(cluster.describe() if cluster.alive() else f"{name}: not up (stale state file)")
            return 0
        names = _up_names() if args.all else [args.name]
        for name in names:
            EmulatedCluster.attach(name).stop()
            print(f"{name}: down")
        return 0
    except ClusterUnavailable as e:
        print(f"gpulab cluster: {e}", file=sys.stderr)
        return 1
