"""What commands share about the emulated cluster: the flags, and the context they launch in.

    add_topology_args(parser)                       # --nodes, --link, --placement, --tie-cores
    with topology_context(args):                    # an EmulatedCluster when --nodes is given
        subprocess.call(mpiexec_command(n, [...]))  # lands on the emulated nodes

What a job records about where it ran is ``gpulab.jobsite``'s (record_topology, topology_metadata).

Where the machine cannot host an emulated cluster, ``topology_context``
prints why and runs on the single machine.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from gpulab.emulated import PLACEMENTS, ClusterUnavailable, EmulatedCluster, parse_link


def add_topology_args(parser) -> None:
    group = parser.add_argument_group("emulated cluster (network namespaces on this machine; see docs/cluster.md)")
    group.add_argument("--nodes", type=int, default=None,
                       help="run the ranks on this many emulated nodes (ranks per node = ranks / nodes)")
    group.add_argument("--link", default="1gbit", type=_link,
                       help="rate of each node's link with --nodes: 100mbit, 1gbit, 10gbit, unlimited (default 1gbit)")
    group.add_argument("--placement", choices=PLACEMENTS, default="block",
                       help="ranks to nodes with --nodes: block (0,1 on node 1, ...) or round-robin (default block)")
    group.add_argument("--tie-cores", action="store_true", default=None,
                       help="with more --nodes than cores, run node k on core k mod cores, so that every job "
                            "places its ranks alike (default: $GPULAB_TIE_CORES=1, else the kernel places them)")


def _link(text: str) -> str:
    try:
        return parse_link(text) or "unlimited"
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


@contextlib.contextmanager
def topology_context(args):
    """An emulated cluster for the launches inside the block when ``args.nodes`` is set (else nothing)."""
    nodes = getattr(args, "nodes", None)
    if not nodes:
        yield None
        return
    from gpulab.launch import inside_mpi_job

    if inside_mpi_job():  # the ranks themselves: already placed
        yield None
        return
    try:
        cluster = EmulatedCluster(nodes=nodes, link=args.link, placement=args.placement,
                                  tie_cores=getattr(args, "tie_cores", None)).start()
    except ClusterUnavailable as e:
        print(f"gpulab: {e}", file=sys.stderr)
        print("gpulab: running on the single machine instead", file=sys.stderr)
        yield None
        return
    with cluster:
        yield cluster
