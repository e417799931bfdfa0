"""Where the ranks sit decides which hops cross the network: flat broadcasts priced per placement.

The plain model charges every message of a flat broadcast that spans nodes at
the network's price. Really each message takes the link between its two
ranks' nodes (shared memory inside a node, the network between nodes), and all
messages that leave or enter one node share that node's link. With block
placement (ranks 0..r-1 on node 0, ...) a binomial tree's first hops cross the
network and its last ones stay inside nodes; with round-robin (rank i on node
i mod N) almost every hop crosses it, and a node's ranks send at once on one link.

The time is the longer of
  - the critical path, each message at the price of its own link (a binomial
    parent's sends one after another, k-nomial's and linear's at once; a
    chain's first chunk through every hop, then one chunk per slowest hop), and
  - the busiest node link: the bytes that must cross it, at the network's rate.

    placed("binomial", 32 << 20, [0, 1, 2, 3, 0, 1, 2, 3], machine)   # seconds, round-robin 4 x 2
"""

from __future__ import annotations

import math

from gpulab.bcast.algorithms import registry
from gpulab.bcast.algorithms.tree_shapes import DEFAULT_CHUNK
from gpulab.bcast.runtime.executor import SEND

PLACED = ("linear", "binomial", "knomial", "chain")  # the flat algorithms priced message by message


def _schedule(algorithm: str, p: int, root: int, me: int, nbytes: int, options: dict):
    record = registry.get(algorithm)  # options left unset (None) take the builder's defaults
    return record.build(p, root, me, nbytes, **{k: v for k, v in options.items() if v and k in record.options})


def _sends(algorithm: str, p: int, root: int, me: int, nbytes: int, options: dict) -> list[tuple[int, int, bool]]:
    """(peer, bytes, blocking) of each message rank ``me`` sends, in order (only sends carry a phase)."""
    return [(op.peer, op.hi - op.lo, op.kind == SEND)
            for op in _schedule(algorithm, p, root, me, nbytes, options) if op.phase]


def placed(algorithm: str, nbytes: int, rank_nodes, machine, root: int = 0, **options) -> float:
    """Seconds for one flat broadcast of ``nbytes`` with rank i on node ``rank_nodes[i]``."""
    if algorithm not in PLACED:
        raise ValueError(f"placement is priced for {PLACED}, not {algorithm!r}")
    p = len(rank_nodes)
    if p < 2 or nbytes <= 0:
        return 0.0

    def link(u: int, v: int):
        return machine.intra if rank_nodes[u] == rank_nodes[v] else machine.inter

    def cost(u: int, v: int, size: float) -> float:
        return link(u, v).regime(size).time(size) + machine.overhead

    sends = [_sends(algorithm, p, root, me, nbytes, options) for me in range(p)]
    if algorithm == "chain":
        k = max(1, math.ceil(nbytes / (options.get("chunk_bytes") or DEFAULT_CHUNK)))
        hops, rank = [], root
        while sends[rank]:
            nxt = sends[rank][0][0]
            hops.append(cost(rank, nxt, nbytes / k))
            rank = nxt
        path = sum(hops) + (k - 1) * max(hops)
    else:
        arrival, frontier = {root: 0.0}, [root]
        while frontier:
            u = frontier.pop()
            busy = arrival[u]  # when u's earlier sends, queued one after another, are done
            for v, size, blocking in sends[u]:
                if blocking or link(u, v).serial(size):
                    busy += cost(u, v, size)
                    arrival[v] = busy
                else:
                    arrival[v] = arrival[u] + cost(u, v, size)
                frontier.append(v)
        path = max(arrival.values())
    return max(path, _busiest_link(sends, rank_nodes, machine))


def _busiest_link(sends, rank_nodes, machine) -> float:
    """Seconds the most loaded node link needs for what crosses it (out of or into its node)."""
    load: dict[tuple[str, int], float] = {}
    for u, messages in enumerate(sends):
        for v, size, _ in messages:
            if rank_nodes[u] != rank_nodes[v]:
                seconds = size * machine.inter.regime(size).beta
                load[("out", rank_nodes[u])] = load.get(("out", rank_nodes[u]), 0.0) + seconds
                load[("in", rank_nodes[v])] = load.get(("in", rank_nodes[v]), 0.0) + seconds
    return max(load.values(), default=0.0)
