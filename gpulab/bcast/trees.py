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
from gpulab.bcast.layouts import knomial_tree


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

    The tree (who receives from whom, in which round) is ``layouts.knomial_tree``.
    """
    p, vr = relative(g, root)
    parent, children = knomial_tree(p, radix)[vr]
    if parent is not None:
        g.recv((parent + root) % p, data)
    wait_all([g.isend((child + root) % p, data, "tree", step) for child, step in children])
