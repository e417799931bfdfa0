"""Segmented (pipelined) broadcasts: chain, binary tree, split binary tree.

The message is cut into chunks of ``chunk_bytes``; a rank forwards chunk c
while chunk c+1 is still arriving, so every link is busy at once. Costs
(Hockney, k chunks): chain (p + k - 2)(a + nb/k), binary tree about
2(h + k - 1)(a + nb/k) for height h. Small chunks hide more latency per hop
but pay alpha more often; ``gpulab.bcast.model.best_chunk`` gives the optimum.
"""

from __future__ import annotations

from collections import deque

from gpulab.bcast.group import Group, Pending, wait_all
from gpulab.bcast.layouts import DEFAULT_CHUNK, heap, heap_subtree
from gpulab.bcast.trees import relative

RECV_WINDOW = 8  # receives posted ahead, so a chunk never waits for its buffer to be posted


def _chunks(n: int, chunk_bytes: int) -> list[slice]:
    return [slice(start, min(start + chunk_bytes, n)) for start in range(0, n, chunk_bytes)]


def forward_chunks(g: Group, data, parent: int | None, children: list[int], chunk_bytes: int,
                   phase: str, depth: int) -> list[Pending]:
    """Receive ``data`` chunk by chunk from ``parent`` and forward each to ``children``.

    Group indices are absolute; ``depth`` is the number of hops from the
    source, so chunk c leaves this rank in logical step c + depth. Returns the
    send requests still in flight (the caller waits, so it can combine trees).
    The last chunk is marked (``Group.isend``'s ``last``), so ranks whose
    buffers differ by whole chunks raise ``BcastSizeError`` instead of waiting.
    """
    chunks = _chunks(data.nbytes, chunk_bytes)
    final = len(chunks) - 1
    sends = []
    if parent is None:
        for c, part in enumerate(chunks):
            sends += [g.isend(child, data[part], phase, c + depth, last=c == final) for child in children]
        return sends
    posted = deque(g.irecv(parent, data[part], last=c == final) for c, part in enumerate(chunks[:RECV_WINDOW]))
    for c, part in enumerate(chunks):
        posted.popleft().wait()
        if c + RECV_WINDOW < len(chunks):
            posted.append(g.irecv(parent, data[chunks[c + RECV_WINDOW]], last=c + RECV_WINDOW == final))
        sends += [g.isend(child, data[part], phase, c + depth, last=c == final) for child in children]
    return sends


def chain(g: Group, data, root: int, chunk_bytes: int = DEFAULT_CHUNK) -> None:
    """Pipelined chain (ring without the closing link): root -> vr 1 -> vr 2 -> ..."""
    p, vr = relative(g, root)
    parent = None if vr == 0 else (vr - 1 + root) % p
    children = [(vr + 1 + root) % p] if vr + 1 < p else []
    wait_all(forward_chunks(g, data, parent, children, chunk_bytes, "chain", vr))


def binary_tree(g: Group, data, root: int, chunk_bytes: int = DEFAULT_CHUNK) -> None:
    """Pipelined binary tree: each rank forwards every chunk to its two children."""
    p, vr = relative(g, root)
    parent, children, depth = heap(vr, p)
    absolute = lambda v: None if v is None else (v + root) % p  # noqa: E731
    wait_all(forward_chunks(g, data, absolute(parent), [absolute(c) for c in children],
                            chunk_bytes, "tree", depth))


def split_binary_tree(g: Group, data, root: int, chunk_bytes: int = DEFAULT_CHUNK) -> None:
    """Open MPI's split binary tree.

    The first half of the message is pipelined down the left subtree and the
    second half down the right one, at the same time; then rank i of the left
    subtree swaps halves with rank i of the right one. Ranks left without a
    partner (the subtrees differ in size) get their missing half from the root.
    """
    p, vr = relative(g, root)
    if p == 1:
        return
    absolute = lambda v: (v + root) % p  # noqa: E731
    halves = {1: data[: data.nbytes // 2], 2: data[data.nbytes // 2:]}
    side = {1: [v for v in range(1, p) if heap_subtree(v) == 1], 2: [v for v in range(1, p) if heap_subtree(v) == 2]}
    pairs = min(len(side[1]), len(side[2]))
    unpaired = side[1][pairs:] + side[2][pairs:]
    if vr == 0:
        sends = []
        for s in (1, 2):
            if side[s]:
                sends += forward_chunks(g, halves[s], None, [absolute(s)], chunk_bytes, "pipeline", 0)
        sends += [g.isend(absolute(v), halves[3 - heap_subtree(v)], "exchange", 0) for v in unpaired]
        wait_all(sends)
        return
    mine = heap_subtree(vr)
    parent, children, depth = heap(vr, p)
    wait_all(forward_chunks(g, halves[mine], absolute(parent), [absolute(c) for c in children],
                            chunk_bytes, "pipeline", depth - 1))
    if vr in unpaired:
        g.recv(root, halves[3 - mine])
    else:
        partner = side[3 - mine][side[mine].index(vr)]
        g.sendrecv(absolute(partner), halves[mine], absolute(partner), halves[3 - mine], "exchange", 0)
