"""The tree shapes of the broadcasts, on ranks relative to the root (``vr = (me - root) % p``).

One description of each tree, used by the schedules that send along it
(``trees``, ``pipelined``); the cost model and the drawings read those
schedules, so model, picture and code cannot drift apart. Pure arithmetic: no MPI.

k-nomial (radix k, binomial for k = 2): rank vr receives from
vr - (vr mod k*m) at the first level m = 1, k, k^2, ... where that is
non-zero, then sends to vr + j*m' (j = 1..k-1) for every lower level m'.
Binary heap: vr's children are 2vr+1 and 2vr+2, its parent (vr-1)//2.
"""

from __future__ import annotations

import functools

DEFAULT_CHUNK = 64 * 1024  # segment size of the pipelined algorithms


@functools.lru_cache(maxsize=4096)
def knomial_tree(p: int, radix: int) -> tuple[tuple[int | None, tuple[tuple[int, int], ...]], ...]:
    """For every relative rank: (parent, ((child, step), ...)), children in the order they are sent to.

    ``step`` is the child's send round: the levels done by ancestors, then the
    j-th child at this level (what a trace numbers the message with).
    """
    levels, mask = 0, 1
    while mask < p:  # levels = ceil(log_radix p)
        levels, mask = levels + 1, mask * radix
    out = []
    for vr in range(p):
        parent, mask, level = None, 1, 0
        while mask < p:
            if vr % (radix * mask):
                parent = vr - vr % (radix * mask)
                break
            mask, level = mask * radix, level + 1
        children = []
        while level > 0:
            mask, level = mask // radix, level - 1
            for j in range(1, radix):
                child = vr + j * mask
                if child < p:
                    children.append((child, (levels - 1 - level) * (radix - 1) + (j - 1)))
        out.append((parent, tuple(children)))
    return tuple(out)


def heap(vr: int, p: int) -> tuple[int | None, list[int], int]:
    """Parent, children and depth of vr in the binary heap tree 0 -> 1,2 -> 3,4,5,6 ..."""
    parent = None if vr == 0 else (vr - 1) // 2
    children = [c for c in (2 * vr + 1, 2 * vr + 2) if c < p]
    return parent, children, (vr + 1).bit_length() - 1


def heap_subtree(vr: int) -> int:
    """1 for the left subtree of the heap (under vr 1), 2 for the right (under vr 2)."""
    while vr > 2:
        vr = (vr - 1) // 2
    return vr
