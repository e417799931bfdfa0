"""Unsegmented tree broadcasts: linear, binomial, k-nomial.

All three move the whole message at each hop, so they cost whole-message
latency per level: good for short messages, where latency dominates.
Ranks are renumbered relative to the root, ``vr = (me - root) % p``, so the
root is always vr = 0 (mpi4py's demo/reductions and MPICH do the same).

Costs (Hockney, n bytes): linear (p-1)(a + nb); binomial ceil(log2 p)(a + nb);
k-nomial about (k-1) ceil(log_k p)(a + nb).
"""

from __future__ import annotations

from gpulab.bcast.group import Group, wait_all


def relative(g: Group, root: int) -> tuple[int, int]:
    """(p, vr): group size and my rank relative to the root."""
    return g.size, (g.me - root) % g.size


def linear(g: Group, data, root: int) -> None:
    """The root sends the whole message to every other rank, one after another."""
    p, vr = relative(g, root)
    if vr == 0:
        wait_all([g.isend((root + v) % p, data, "linear", v - 1) for v in range(1, p)])
    else:
        g.recv(root, data)


def binomial(g: Group, data, root: int) -> None:
    """Each round doubles the number of ranks holding the message."""
    knomial(g, data, root, radix=2)


def knomial(g: Group, data, root: int, radix: int = 4) -> None:
    """Each round multiplies the holders by ``radix``; a parent sends to radix-1 children.

    Rank vr receives from vr - (vr mod radix*mask) at the first level where
    that is non-zero, then sends to vr + j*mask for every lower level.
    """
    p, vr = relative(g, root)
    levels, mask = 0, 1
    while mask < p:  # levels = ceil(log_radix p)
        levels, mask = levels + 1, mask * radix
    mask, level = 1, 0
    while mask < p:
        if vr % (radix * mask):
            g.recv((vr - vr % (radix * mask) + root) % p, data)
            break
        mask, level = mask * radix, level + 1
    sends = []
    while level > 0:
        mask, level = mask // radix, level - 1
        for j in range(1, radix):
            child = vr + j * mask
            if child < p:
                # round: levels already done by ancestors, then my j-th child at this level
                step = (levels - 1 - level) * (radix - 1) + (j - 1)
                sends.append(g.isend((child + root) % p, data, "tree", step))
    wait_all(sends)
