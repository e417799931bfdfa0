"""What commands share about the emulated cluster: the flags, the context they launch in, the metadata.

    add_topology_args(parser)                       # --nodes, --link, --placement
    with topology_context(args):                    # an EmulatedCluster when --nodes is given
        subprocess.call(mpiexec_command(n, [...]))  # lands on the emulated nodes
    record_topology(comm)                           # in the ranks (collective), then topology_metadata()

Where the machine cannot host an emulated cluster, ``topology_context``
prints why and runs on the single machine, as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

from gpulab.emulated import ENV_TOPOLOGY, PLACEMENTS, ClusterUnavailable, EmulatedCluster, parse_link


def add_topology_args(parser) -> None:
    group = parser.add_argument_group("emulated cluster (network namespaces on this machine; see docs/cluster.md)")
    group.add_argument("--nodes", type=int, default=None,
                       help="run the ranks on this many emulated nodes (ranks per node = ranks / nodes)")
    group.add_argument("--link", default="1gbit", type=_link,
                       help="rate of each node's link with --nodes: 100mbit, 1gbit, 10gbit, unlimited (default 1gbit)")
    group.add_argument("--placement", choices=PLACEMENTS, default="block",
                       help="ranks to nodes with --nodes: block (0,1 on node 1, ...) or round-robin (default block)")


def _link(text: str) -> str:
    try:
        return parse_link(text) or "unlimited"
    except ValueError as e:
        import argparse

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
        cluster = EmulatedCluster(nodes=nodes, link=args.link, placement=args.placement).start()
    except ClusterUnavailable as e:
        print(f"gpulab: {e}", file=sys.stderr)
        print("gpulab: running on the single machine instead", file=sys.stderr)
        yield None
        return
    with cluster:
        yield cluster


_RECORDED: dict | None = None


def record_topology(comm) -> dict:
    """Collective: nodes and ranks per node as MPI sees them (Split_type), plus how the job was launched."""
    global _RECORDED
    from mpi4py import MPI

    shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
    first = comm.allgather(shared.allreduce(comm.rank, op=MPI.MIN))
    local_sizes = comm.allgather(shared.size)
    shared.Free()
    names = list(dict.fromkeys(first))
    node = [names.index(f) for f in first]
    launched = json.loads(os.environ[ENV_TOPOLOGY]) if ENV_TOPOLOGY in os.environ else {}
    placement = launched.get("placement") or ("block" if node == sorted(node) else "interleaved")
    _RECORDED = {"emulated": bool(launched.get("emulated")), "nodes": len(names),
                 "ranks_per_node": max(local_sizes), "placement": placement,
                 "link": launched.get("link"), "link_bytes_per_s": launched.get("link_bytes_per_s"),
                 "transport": launched.get("transport", "as the MPI library chose"), "rank_nodes": node}
    return _RECORDED


def topology_metadata() -> dict:
    """The topology of this job for a result's metadata: as recorded, else as launched, else unknown."""
    if _RECORDED is not None:
        return dict(_RECORDED)
    if ENV_TOPOLOGY in os.environ:
        launched = json.loads(os.environ[ENV_TOPOLOGY])
        return {k: launched.get(k) for k in ("emulated", "nodes", "ranks_per_node", "placement", "link",
                                             "link_bytes_per_s", "transport", "rank_nodes")}
    return {"emulated": False, "nodes": None, "ranks_per_node": None, "placement": None, "link": None,
            "transport": "as the MPI library chose"}
