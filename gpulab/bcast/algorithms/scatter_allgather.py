"""Van de Geijn broadcast: binomial scatter, then an allgather.

The message is cut into p blocks of ceil(n/p) bytes; the scatter leaves block
vr on relative rank vr, and the allgather gives every rank every block. Each
rank sends and receives about 2n(p-1)/p bytes in total instead of n per tree
level, which is why MPICH switches to these for long messages:
  recursive doubling: 2 log2(p) a + 2((p-1)/p) n b   (power-of-two p)
  ring:               (log2 p + p - 1) a + 2((p-1)/p) n b
Each function returns one rank's schedule (``executor.Op``s in group indices),
built once per (p, root, rank, size) and cached. Every step is one blocking
Send, Recv or Sendrecv: each depends on the one before, so there is nothing to overlap.
"""

from __future__ import annotations

import functools

from gpulab.bcast.algorithms.trees import absolute
from gpulab.bcast.runtime.executor import RECV, SEND, SENDRECV, Op


def _lowbit(vr: int, p: int) -> int:
    """Span of vr's binomial subtree: its lowest set bit (the root spans all of p)."""
    return vr & -vr if vr else 1 << (p - 1).bit_length()


def binomial_scatter(p: int, root: int, me: int, n: int) -> list[Op]:
    """Leave bytes [vr*ss, (vr+span)*ss) of the message on each relative rank, ss = ceil(n/p)."""
    vr = (me - root) % p
    ss = -(-n // p)  # block size, ceil(n/p)

    def subtree_bytes(v: int, span: int) -> tuple[int, int]:
        return min(v * ss, n), min(min(v + span, p) * ss, n)

    ops = []
    span = _lowbit(vr, p)
    if vr:
        lo, hi = subtree_bytes(vr, span)
        if hi > lo:
            ops.append(Op(RECV, absolute(vr - span, root, p), lo, hi))
    mask = span >> 1
    while mask:
        child = vr + mask
        lo, hi = subtree_bytes(child, mask) if child < p else (0, 0)
        if hi > lo:
            # rounds count down from the root's top mask, as in the binomial tree
            step = (p - 1).bit_length() - mask.bit_length()
            ops.append(Op(SEND, absolute(child, root, p), lo, hi, None, "scatter", step))
        mask >>= 1
    return ops


@functools.lru_cache(maxsize=4096)
def scatter_allgather_ring(p: int, root: int, me: int, n: int) -> tuple[Op, ...]:
    """Scatter, then p-1 ring steps: pass the block you got last to your right neighbour."""
    if p == 1:
        return ()
    vr = (me - root) % p
    ss = -(-n // p)
    block = lambda b: (min(b * ss, n), min((b + 1) * ss, n))  # noqa: E731
    right, left = absolute(vr + 1, root, p), absolute(vr - 1, root, p)
    return tuple(binomial_scatter(p, root, me, n) + [
        Op(SENDRECV, right, *block((vr - i) % p), None, "allgather", i, left, *block((vr - i - 1) % p))
        for i in range(p - 1)])


@functools.lru_cache(maxsize=4096)
def scatter_allgather_rd(p: int, root: int, me: int, n: int) -> tuple[Op, ...]:
    """Scatter, then recursive doubling over the largest power of two q <= p.

    For p that is not a power of two, the p - q extra ranks first hand their
    block to rank vr - q ("fold"), ride along in their partner's exchanges,
    and get the full message back at the end ("unfold"): two extra steps.
    """
    if p == 1:
        return ()
    vr = (me - root) % p
    ops = binomial_scatter(p, root, me, n)
    ss = -(-n // p)
    q = 1 << (p.bit_length() - 1)
    extra = p - q
    blocks = lambda lo, hi: (min(lo * ss, n), min(hi * ss, n))  # noqa: E731
    if vr >= q:  # an extra rank: fold, wait, unfold
        partner = absolute(vr - q, root, p)
        return tuple(ops + [Op(SEND, partner, *blocks(vr, vr + 1), None, "fold", 0),
                            Op(RECV, partner, *blocks(0, vr)), Op(RECV, partner, *blocks(vr + 1, p))])
    if vr < extra:
        ops.append(Op(RECV, absolute(vr + q, root, p), *blocks(vr + q, vr + q + 1)))
    distance = 1
    while distance < q:
        partner = vr ^ distance
        mine, theirs = vr & ~(distance - 1), partner & ~(distance - 1)
        # the blocks of my aligned group of `distance` ranks, and those of the extra ranks folded into it
        for lo, hi, plo, phi in ((mine, mine + distance, theirs, theirs + distance),
                                 (q + mine, q + min(mine + distance, extra),
                                  q + theirs, q + min(theirs + distance, extra))):
            send, recv = blocks(lo, max(lo, hi)), blocks(plo, max(plo, phi))
            if send[1] > send[0] or recv[1] > recv[0]:  # both sides compute both sizes, so both skip alike
                peer = absolute(partner, root, p)
                ops.append(Op(SENDRECV, peer, *send, None, "allgather", distance.bit_length() - 1, peer, *recv))
        distance <<= 1
    if vr < extra:
        ops += [Op(SEND, absolute(vr + q, root, p), *blocks(0, vr + q), None, "unfold", 0),
                Op(SEND, absolute(vr + q, root, p), *blocks(vr + q + 1, p), None, "unfold", 0)]
    return tuple(ops)
