"""What MPICH 5's MPI_Bcast runs on a communicator, given where its ranks sit (read from MPICH's own tuning files).

MPICH picks a broadcast in two rule files, read at MPI_Init:

* ``maint/tuning/coll/ch4/generic.json`` (the ch4 device): when the communicator
  has a node hierarchy ("comm_hierarchy=parent": some node holds more than one
  of its ranks, ``MPIR_Comm_create_subcomms`` in ``src/mpi/comm/commutil.c``,
  ``MPIR_Comm_is_parent_comm`` in ``src/include/mpir_comm.h``), then for
  comm_size < 8 composition alpha; for powers of two alpha below 12288 B, beta
  below 524288 B, gamma above; otherwise alpha below 12288 B, gamma above.
  Without a hierarchy (every rank on its own node): gamma.
* ``src/mpid/ch4/src/ch4_coll_impl.h`` says what the compositions do: alpha = the
  root sends to its node's leader (the node's lowest rank) unless it leads, a
  broadcast among node leaders, then a shared-memory broadcast inside each
  node; beta = the root's node first (when the root does not lead it), then the
  leaders, then the other nodes; gamma = the MPIR rule over the whole communicator.
* ``maint/tuning/coll/mpir/generic.json`` (the MPIR rule): binomial for
  comm_size < 8 or up to 12288 B, scatter + recursive-doubling allgather up to
  524288 B on powers of two, scatter + ring allgather otherwise.

``steps`` returns those phases in the order they run, as (level, algorithm,
ranks) tuples; ``gpulab.bcast.cost.hockney`` prices them. The leaders' communicator
holds one rank per node and so has no hierarchy itself. Inside a node MPICH's
shared-memory module has its own release-gather broadcast, but only for a process
that is not multi-threaded (``maint/tuning/coll/ch4/posix_generic.json``:
"is_multi_threaded=no"); mpi4py starts MPI with MPI_THREAD_MULTIPLE, so gpulab's ranks
fall back to the MPIR rule there, and the model prices that phase with the MPIR rule
over the node's ranks, as it prices one node.
"""

from __future__ import annotations

SHORT, LONG, MIN_PROCS = 12288, 524288, 8  # the MPIR and ch4 rule files' thresholds (bytes, ranks)


def mpir_rule(nbytes: int, p: int) -> str:
    """The MPIR rule (mpir/generic.json): binomial, scatter_allgather_rd or scatter_allgather_ring."""
    if p < MIN_PROCS or nbytes <= SHORT:
        return "binomial"
    if p & (p - 1) == 0 and nbytes <= LONG:
        return "scatter_allgather_rd"
    return "scatter_allgather_ring"


def has_hierarchy(rank_nodes) -> bool:
    """MPICH's "comm_hierarchy=parent": some node holds more than one rank (one node of several ranks too)."""
    return len(set(rank_nodes)) < len(rank_nodes)


def composition(nbytes: int, rank_nodes) -> str:
    """"alpha", "beta" or "gamma" (ch4/generic.json) for a communicator with rank i on node ``rank_nodes[i]``."""
    p = len(rank_nodes)
    if not has_hierarchy(rank_nodes):
        return "gamma"
    if p < MIN_PROCS:
        return "alpha"
    if nbytes < SHORT:
        return "alpha"
    if p & (p - 1) == 0 and nbytes < LONG:
        return "beta"
    return "gamma"


def steps(nbytes: int, rank_nodes, root: int = 0) -> tuple[str, list[tuple[str, str, int]]]:
    """(composition, [(level, algorithm, ranks)]) MPI_Bcast runs, phase after phase.

    level: "send" (one message root -> its leader), "inter" (among node leaders),
    "intra" (inside the largest node: the nodes run theirs at once), "flat"
    (the whole communicator, each message on the link between its ranks' nodes).
    """
    rank_nodes = list(rank_nodes)
    p = len(rank_nodes)
    kind = composition(nbytes, rank_nodes)
    if kind == "gamma":
        return kind, [("flat", mpir_rule(nbytes, p), p)]
    nodes = len(set(rank_nodes))
    local = max(rank_nodes.count(n) for n in set(rank_nodes))
    root_node = rank_nodes[root]
    root_leads = rank_nodes.index(root_node) == root
    inter = [("inter", mpir_rule(nbytes, nodes), nodes)] if nodes > 1 else []
    intra = [("intra", mpir_rule(nbytes, local), local)] if local > 1 else []
    if kind == "alpha":
        return kind, ([] if root_leads else [("send", "send", 2)]) + inter + intra
    # beta: a non-leader root first broadcasts inside its node, then the leaders, then the other nodes
    at_root = rank_nodes.count(root_node)
    first = [] if root_leads else [("intra", mpir_rule(nbytes, at_root), at_root)]
    return kind, first + inter + intra


def describe(nbytes: int, rank_nodes, root: int = 0) -> str:
    """One line: which composition and phases, e.g. 'alpha: inter binomial on 2 + intra binomial on 2'."""
    kind, phases = steps(nbytes, rank_nodes, root)
    return f"{kind}: " + " + ".join(f"{level} {alg} on {n}" for level, alg, n in phases)
