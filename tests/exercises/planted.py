"""Planted wrong solutions: each a mistake learners make, which its check must name."""

import math

import numpy as np

from gpulab.exercises import blocks


# --- exercise 1
def linear_forgets_last_rank(buf, root, comm):
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == root:
        for dest in range(size - 1):  # stops one short
            if dest != root:
                comm.Send(buf, dest=dest)
    elif rank != size - 1:
        comm.Recv(buf, source=root)


def linear_always_from_rank_0(buf, root, comm):
    if comm.Get_rank() == 0:
        for dest in range(1, comm.Get_size()):
            comm.Send(buf, dest=dest)
    else:
        comm.Recv(buf, source=0)


def binomial_relative_peers(buf, root, comm):
    """Sends and receives with relative ranks, never mapped back by + root."""
    rank, size = comm.Get_rank(), comm.Get_size()
    me = (rank - root) % size
    mask = 1
    while mask < size:
        if me & mask:
            comm.Recv(buf, source=me - mask)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if me + mask < size:
            comm.Send(buf, dest=me + mask)
        mask >>= 1


def binomial_is_linear(buf, root, comm):
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == root:
        for dest in range(size):
            if dest != root:
                comm.Send(buf, dest=dest)
    else:
        comm.Recv(buf, source=root)


def binomial_shifted_by_one(buf, root, comm):
    """Sends bytes 1.. and receives them at 0..: every byte one place early."""
    rank, size = comm.Get_rank(), comm.Get_size()
    me = (rank - root) % size
    mask = 1
    while mask < size:
        if me & mask:
            comm.Recv(buf[:-1], source=(me - mask + root) % size)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if me + mask < size:
            comm.Send(buf[1:] if me == 0 else buf[:-1], dest=(me + mask + root) % size)
        mask >>= 1


# --- exercise 2
def chain_drops_last_chunk(buf, root, comm, chunk_bytes):
    rank, size = comm.Get_rank(), comm.Get_size()
    me = (rank - root) % size
    for lo in range(0, len(buf) - chunk_bytes + 1, chunk_bytes):  # only whole chunks
        chunk = buf[lo:lo + chunk_bytes]
        if me > 0:
            comm.Recv(chunk, source=(rank - 1) % size)
        if me < size - 1:
            comm.Send(chunk, dest=(rank + 1) % size)


def chain_whole_buffer(buf, root, comm, chunk_bytes):
    """Right bytes, but one message: no pipelining."""
    rank, size = comm.Get_rank(), comm.Get_size()
    me = (rank - root) % size
    if me > 0:
        comm.Recv(buf, source=(rank - 1) % size)
    if me < size - 1:
        comm.Send(buf, dest=(rank + 1) % size)


# --- exercise 3
# the whole buffer to every rank instead of its block: the same code as binomial_is_linear, another fault here
scatter_whole_buffer = binomial_is_linear


def ring_sends_own_block_every_step(buf, root, comm):
    """Forgets to pass on the block received in the step before."""
    rank, size = comm.Get_rank(), comm.Get_size()
    me = (rank - root) % size
    parts = blocks(len(buf), size)
    for _ in range(size - 1):
        lo, hi = parts[me]
        rlo, rhi = parts[(me - 1) % size]
        comm.Sendrecv(buf[lo:hi], dest=(rank + 1) % size, recvbuf=buf[rlo:rhi], source=(rank - 1) % size)


def ring_to_rank_0(buf, root, comm):
    """Everyone sends to rank 0 (a gather, not a ring): rank 0 waits forever on the others."""
    rank, size = comm.Get_rank(), comm.Get_size()
    me = (rank - root) % size
    parts = blocks(len(buf), size)
    for step in range(size - 1):
        lo, hi = parts[(me - step) % size]
        rlo, rhi = parts[(me - step - 1) % size]
        comm.Sendrecv(buf[lo:hi], dest=0, recvbuf=buf[rlo:rhi], source=(rank - 1) % size)


# --- exercise 4
def forward_without_allreduce(x, W, mesh):
    return x @ W.T


def backward_without_depth_sum(dy, x, W, mesh):
    partial = dy @ W
    dx = np.empty_like(partial)
    mesh.row_comm.Allreduce(partial, dx)
    return dx, dy.T @ x


# --- exercise 5
def gpipe_order(pipe, stage, micro):
    return [("F", i) for i in range(micro)] + [("B", i) for i in reversed(range(micro))]


def backward_before_forward(pipe, stage, micro):
    ops = []
    for i in range(micro):
        ops += [("B", i), ("F", i)] if stage < pipe - 1 else [("F", i), ("B", i)]
    return ops


# --- exercise 6
def pingpong_round_trip(comm, nbytes, iters):
    import time

    buf = np.zeros(nbytes, np.uint8)
    t0 = time.perf_counter()
    for _ in range(iters):
        if comm.Get_rank() == 0:
            comm.Send(buf, dest=1)
            comm.Recv(buf, source=1)
        elif comm.Get_rank() == 1:
            comm.Recv(buf, source=0)
            comm.Send(buf, dest=0)
    return (time.perf_counter() - t0) / iters  # a round trip, not one way


def fit_swapped(sizes, seconds):
    beta, alpha = np.polyfit(np.asarray(sizes, float), np.asarray(seconds, float), 1)
    return beta, alpha


def predict_floor_log(algorithm, nbytes, p, alpha, beta, chunk_bytes=None):
    if algorithm == "linear":
        return (p - 1) * (alpha + nbytes * beta)
    if algorithm == "binomial":
        return math.floor(math.log2(p)) * (alpha + nbytes * beta)
    k = math.ceil(nbytes / chunk_bytes)
    return (p + k - 2) * (alpha + min(chunk_bytes, nbytes) * beta)
