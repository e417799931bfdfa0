"""Two-level broadcast: root -> one leader per node -> every rank of each node.

Dense GPU nodes have fast links inside a node (NVLink, PCIe) and slower ones
between nodes (InfiniBand). Crossing the slow network once per node, then
fanning out locally, is what MPICH's SMP-aware bcast and Open MPI's "han" do:
  T = T_inter(algorithm, nodes) + T_intra(algorithm, ranks per node)
Nodes come from the real topology (``Split_type(COMM_TYPE_SHARED)``) or are
emulated with ``ranks_per_node`` (consecutive ranks form a node), so a
16-GPU-per-node cluster can be studied on one laptop.
"""

from __future__ import annotations

import functools

from gpulab.bcast.runtime.executor import Group
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())


@functools.cache
def _key(what: str) -> int:
    """The attribute key under which a communicator caches ``what`` (created at first use, not at import)."""
    return MPI.Comm.Create_keyval()


def node_of_rank(comm: MPI.Comm, ranks_per_node: int | None) -> tuple[int, ...]:
    """Node index of every rank of ``comm``; the real topology is looked up once per communicator."""
    if ranks_per_node is not None:
        return tuple(rank // ranks_per_node for rank in range(comm.size))
    cached = comm.Get_attr(_key("topology"))
    if cached is None:
        # collective, but once per communicator: the lowest rank on each node names the node
        shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
        first_rank_on_node = comm.allgather(shared.allreduce(comm.rank, op=MPI.MIN))
        shared.Free()
        names = sorted(set(first_rank_on_node))
        cached = tuple(names.index(first) for first in first_rank_on_node)
        comm.Set_attr(_key("topology"), cached)
    return cached


def hierarchical(g: Group, data, root: int, *, run, inter: str = "binomial", intra: str = "binomial",
                 ranks_per_node: int | None = None, inter_options: dict | None = None,
                 intra_options: dict | None = None) -> None:
    """``run(name, group, data, root, options)`` executes a flat algorithm on a subgroup."""
    node = node_of_rank(g.comm, ranks_per_node)
    me = g.members[g.me]
    leaders, local = layout(node, tuple(g.members), g.members[root], me)
    root_rank = g.members[root]
    inter_comm = intra_comm = None
    if "mpi" in (inter, intra):  # MPI's own Bcast needs real communicators for the two levels
        inter_comm, intra_comm = _level_comms(g.comm, node, tuple(leaders))
    if me in leaders:
        inter_group = g.subgroup(leaders, g.algorithm + "/inter", inter_comm)
        run(inter, inter_group, data, leaders.index(root_rank), inter_options or {})
    leader = next(rank for rank in local if rank in leaders)
    intra_group = g.subgroup(local, g.algorithm + "/intra", intra_comm)
    run(intra, intra_group, data, local.index(leader), intra_options or {})


@functools.lru_cache(maxsize=1024)
def layout(node: tuple[int, ...], members: tuple[int, ...], root_rank: int, me: int):
    """(the node leaders, my node's ranks), in group order, computed once per layout: the root
    leads its own node, so the message never crosses the network twice."""
    nodes: dict[int, list[int]] = {}
    for rank in members:
        nodes.setdefault(node[rank], []).append(rank)
    leaders = [root_rank if node[root_rank] == n else ranks[0] for n, ranks in sorted(nodes.items())]
    return leaders, nodes[node[me]]


def _level_comms(comm: MPI.Comm, node: list[int], leaders: tuple[int, ...]):
    """(leaders' communicator or None, my node's communicator), split once per layout and cached."""
    cache = comm.Get_attr(_key("level communicators"))
    if cache is None:
        cache = {}
        comm.Set_attr(_key("level communicators"), cache)
    key = (tuple(node), leaders)
    if key not in cache:
        is_leader = comm.rank in leaders
        inter = comm.Split(0 if is_leader else MPI.UNDEFINED, leaders.index(comm.rank) if is_leader else 0)
        intra = comm.Split(node[comm.rank], comm.rank)
        cache[key] = (None if inter == MPI.COMM_NULL else inter, intra)
    return cache[key]
