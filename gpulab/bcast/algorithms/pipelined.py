"""Segmented (pipelined) broadcasts: chain, binary tree, split binary tree.

The message is cut into chunks of ``chunk_bytes``; a rank forwards chunk c
while chunk c+1 is still arriving, so every link is busy at once. Costs
(Hockney, k chunks): chain (p + k - 2)(a + nb/k), binary tree about
2(h + k - 1)(a + nb/k) for height h. Small chunks hide more latency per hop
but pay alpha more often; ``gpulab.bcast.cost.hockney.best_chunk`` gives the optimum.

Each function returns one rank's schedule (``executor.Op``s in group indices),
built once per (p, root, rank, size, chunk) and cached. Sends are posted as
soon as their chunk is there (Isend) and receives RECV_WINDOW chunks ahead:
overlap is the point of a pipeline.
"""

from __future__ import annotations

import functools

from gpulab.bcast.algorithms.tree_shapes import DEFAULT_CHUNK, heap, heap_subtree
from gpulab.bcast.algorithms.trees import absolute
from gpulab.bcast.runtime.executor import ISEND, POST, RECV, SENDRECV, WAIT, WAITALL, Op

RECV_WINDOW = 8  # receives posted ahead, so a chunk never waits for its buffer to be posted


def forward_chunks(lo: int, hi: int, parent: int | None, children: list[int], chunk_bytes: int,
                   phase: str, depth: int) -> list[Op]:
    """Receive bytes [lo, hi) chunk by chunk from ``parent`` and forward each to ``children``.

    Group indices are absolute; ``depth`` is the number of hops from the
    source, so chunk c leaves this rank in logical step c + depth. The sends
    stay in flight (the caller decides where to wait, so it can combine trees).
    The last chunk is marked (``Op.last``), so ranks whose buffers differ by
    whole chunks raise ``BcastSizeError`` instead of waiting.
    """
    chunks = [(start, min(start + chunk_bytes, hi)) for start in range(lo, hi, chunk_bytes)]
    final = len(chunks) - 1
    ops = []
    if parent is not None:
        ops += [Op(POST, parent, a, b, c == final) for c, (a, b) in enumerate(chunks[:RECV_WINDOW])]
    for c, (a, b) in enumerate(chunks):
        if parent is not None:
            ops.append(Op(WAIT, parent, a, b, c == final))
            if c + RECV_WINDOW < len(chunks):
                ops.append(Op(POST, parent, *chunks[c + RECV_WINDOW], c + RECV_WINDOW == final))
        ops += [Op(ISEND, child, a, b, c == final, phase, c + depth) for child in children]
    return ops


@functools.lru_cache(maxsize=4096)
def chain(p: int, root: int, me: int, nbytes: int, chunk_bytes: int = DEFAULT_CHUNK) -> tuple[Op, ...]:
    """Pipelined chain (ring without the closing link): root -> vr 1 -> vr 2 -> ..."""
    vr = (me - root) % p
    parent = None if vr == 0 else absolute(vr - 1, root, p)
    children = [absolute(vr + 1, root, p)] if vr + 1 < p else []
    return tuple(forward_chunks(0, nbytes, parent, children, chunk_bytes, "chain", vr))


@functools.lru_cache(maxsize=4096)
def binary_tree(p: int, root: int, me: int, nbytes: int, chunk_bytes: int = DEFAULT_CHUNK) -> tuple[Op, ...]:
    """Pipelined binary tree: each rank forwards every chunk to its two children."""
    parent, children, depth = heap((me - root) % p, p)
    return tuple(forward_chunks(0, nbytes, None if parent is None else absolute(parent, root, p),
                                [absolute(c, root, p) for c in children], chunk_bytes, "tree", depth))


@functools.lru_cache(maxsize=4096)
def split_binary_tree(p: int, root: int, me: int, nbytes: int,
                      chunk_bytes: int = DEFAULT_CHUNK) -> tuple[Op, ...]:
    """Open MPI's split binary tree.

    The first half of the message is pipelined down the left subtree and the
    second half down the right one, at the same time; then rank i of the left
    subtree swaps halves with rank i of the right one. Ranks left without a
    partner (the subtrees differ in size) get their missing half from the root.
    """
    vr = (me - root) % p
    if p == 1:
        return ()
    halves = {1: (0, nbytes // 2), 2: (nbytes // 2, nbytes)}
    side = {1: [v for v in range(1, p) if heap_subtree(v) == 1], 2: [v for v in range(1, p) if heap_subtree(v) == 2]}
    pairs = min(len(side[1]), len(side[2]))
    unpaired = side[1][pairs:] + side[2][pairs:]
    if vr == 0:
        ops = []
        for s in (1, 2):
            if side[s]:
                ops += forward_chunks(*halves[s], None, [absolute(s, root, p)], chunk_bytes, "pipeline", 0)
        return tuple(ops + [Op(ISEND, absolute(v, root, p), *halves[3 - heap_subtree(v)], None, "exchange", 0)
                            for v in unpaired])
    mine = heap_subtree(vr)
    parent, children, depth = heap(vr, p)
    ops = forward_chunks(*halves[mine], absolute(parent, root, p), [absolute(c, root, p) for c in children],
                         chunk_bytes, "pipeline", depth - 1) + [Op(WAITALL, -1, 0, 0)]
    if vr in unpaired:
        return tuple(ops + [Op(RECV, root, *halves[3 - mine])])
    partner = absolute(side[3 - mine][side[mine].index(vr)], root, p)
    lo, hi = halves[3 - mine]
    return tuple(ops + [Op(SENDRECV, partner, *halves[mine], None, "exchange", 0, partner, lo, hi)])
