"""Van de Geijn broadcast: binomial scatter, then an allgather.

The message is cut into p blocks of ceil(n/p) bytes; the scatter leaves block
vr on relative rank vr, and the allgather gives every rank every block. Each
rank sends and receives about 2n(p-1)/p bytes in total instead of n per tree
level, which is why MPICH switches to these for long messages:
  recursive doubling: 2 log2(p) a + 2((p-1)/p) n b   (power-of-two p)
  ring:               (log2 p + p - 1) a + 2((p-1)/p) n b
"""

from __future__ import annotations

from gpulab.bcast.group import Group
from gpulab.bcast.trees import relative


def _lowbit(vr: int, p: int) -> int:
    """Span of vr's binomial subtree: its lowest set bit (the root spans all of p)."""
    return vr & -vr if vr else 1 << (p - 1).bit_length()


def binomial_scatter(g: Group, data, root: int) -> int:
    """Leave bytes [vr*ss, (vr+span)*ss) of the message on each relative rank; return ss."""
    p, vr = relative(g, root)
    n = data.nbytes
    ss = -(-n // p)  # block size, ceil(n/p)

    def subtree_bytes(v: int, span: int):
        return data[min(v * ss, n): min(min(v + span, p) * ss, n)]

    span = _lowbit(vr, p)
    if vr:
        part = subtree_bytes(vr, span)
        if part.nbytes:
            g.recv((vr - span + root) % p, part)
    mask = span >> 1
    while mask:
        child = vr + mask
        part = subtree_bytes(child, mask) if child < p else data[:0]
        if part.nbytes:
            # rounds count down from the root's top mask, as in the binomial tree
            step = (p - 1).bit_length() - mask.bit_length()
            g.send((child + root) % p, part, "scatter", step)
        mask >>= 1
    return ss


def scatter_allgather_ring(g: Group, data, root: int) -> None:
    """Scatter, then p-1 ring steps: pass the block you got last to your right neighbour."""
    p, vr = relative(g, root)
    if p == 1:
        return
    ss = binomial_scatter(g, data, root)
    n = data.nbytes
    block = lambda b: data[min(b * ss, n): min((b + 1) * ss, n)]  # noqa: E731
    right, left = (vr + 1 + root) % p, (vr - 1 + root) % p
    for i in range(p - 1):
        g.sendrecv(right, block((vr - i) % p), left, block((vr - i - 1) % p), "allgather", i)


def scatter_allgather_rd(g: Group, data, root: int) -> None:
    """Scatter, then recursive doubling over the largest power of two q <= p.

    For p that is not a power of two, the p - q extra ranks first hand their
    block to rank vr - q ("fold"), ride along in their partner's exchanges,
    and get the full message back at the end ("unfold"): two extra steps.
    """
    p, vr = relative(g, root)
    if p == 1:
        return
    ss = binomial_scatter(g, data, root)
    n = data.nbytes
    q = 1 << (p.bit_length() - 1)
    extra = p - q
    blocks = lambda lo, hi: data[min(lo * ss, n): min(hi * ss, n)]  # noqa: E731
    absolute = lambda v: (v + root) % p  # noqa: E731
    if vr >= q:  # an extra rank: fold, wait, unfold
        g.send(absolute(vr - q), blocks(vr, vr + 1), "fold", 0)
        g.recv(absolute(vr - q), blocks(0, vr))
        g.recv(absolute(vr - q), blocks(vr + 1, p))
        return
    if vr < extra:
        g.recv(absolute(vr + q), blocks(vr + q, vr + q + 1))
    distance = 1
    while distance < q:
        partner = vr ^ distance
        mine, theirs = vr & ~(distance - 1), partner & ~(distance - 1)
        # the blocks of my aligned group of `distance` ranks, and those of the extra ranks folded into it
        for lo, hi, plo, phi in ((mine, mine + distance, theirs, theirs + distance),
                                 (q + mine, q + min(mine + distance, extra),
                                  q + theirs, q + min(theirs + distance, extra))):
            send, recv = blocks(lo, max(lo, hi)), blocks(plo, max(plo, phi))
            if send.nbytes or recv.nbytes:  # both sides compute both sizes, so both skip alike
                g.sendrecv(absolute(partner), send, absolute(partner), recv,
                           "allgather", distance.bit_length() - 1)
        distance <<= 1
    if vr < extra:
        g.send(absolute(vr + q), blocks(0, vr + q), "unfold", 0)
        g.send(absolute(vr + q), blocks(vr + q + 1, p), "unfold", 0)
