"""Unsegmented tree broadcasts: linear, binomial, k-nomial.

All three move the whole message at each hop, so they cost whole-message
latency per level: good for short messages, where latency dominates.
Ranks are renumbered relative to the root, ``vr = (me - root) % p``, so the
root is always vr = 0 (mpi4py's demo/reductions and MPICH do the same).

Each function returns one rank's schedule (``executor.Op``s in group indices),
built once per (p, root, rank, size, options) and cached; the executor
runs it. Who sends concurrently, and why:
- binomial sends to its children one after another, largest subtree first,
  as MPICH does: concurrent sends would share the sender's link, so every
  subtree would start late (two link transfers become three at p = 4).
- linear and k-nomial post their sends at once (Isend): linear's root has
  nothing to gain by ordering them, and k-nomial exists to use a sender's
  several ports (or the receivers' copies, on one node) at the same time.

Costs (Hockney, n bytes): linear (p-1)(a + nb); binomial ceil(log2 p)(a + nb);
k-nomial about (k-1) ceil(log_k p)(a + nb).
"""

from __future__ import annotations

import functools

from gpulab.bcast.algorithms.tree_shapes import knomial_tree
from gpulab.bcast.runtime.executor import ISEND, RECV, SEND, Op


def absolute(v: int, root: int, p: int) -> int:
    """The group index of relative rank ``v``."""
    return (v + root) % p


@functools.lru_cache(maxsize=4096)
def linear(p: int, root: int, me: int, nbytes: int) -> tuple[Op, ...]:
    """The root sends the whole message to every other rank, all sends posted at once."""
    if me != root:
        return (Op(RECV, root, 0, nbytes),)
    return tuple(Op(ISEND, absolute(v, root, p), 0, nbytes, None, "linear", v - 1) for v in range(1, p))


@functools.lru_cache(maxsize=4096)
def binomial(p: int, root: int, me: int, nbytes: int) -> tuple[Op, ...]:
    """Each round doubles the number of ranks holding the message; a parent sends to its
    children one after another, the largest subtree first."""
    return _tree(p, root, me, nbytes, 2, SEND)


@functools.lru_cache(maxsize=4096)
def knomial(p: int, root: int, me: int, nbytes: int, radix: int = 4) -> tuple[Op, ...]:
    """Each round multiplies the holders by ``radix``; a parent posts all its children's sends at once."""
    return _tree(p, root, me, nbytes, radix, ISEND)


def _tree(p: int, root: int, me: int, nbytes: int, radix: int, send: str) -> tuple[Op, ...]:
    """The k-nomial tree of ``tree_shapes.knomial_tree``: receive from the parent, then send to the children."""
    vr = (me - root) % p
    parent, children = knomial_tree(p, radix)[vr]
    ops = [] if parent is None else [Op(RECV, absolute(parent, root, p), 0, nbytes)]
    return tuple(ops + [Op(send, absolute(child, root, p), 0, nbytes, None, "tree", step)
                        for child, step in children])
