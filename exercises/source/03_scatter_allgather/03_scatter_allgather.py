# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "statement", "locked": true, "schema_version": 3, "solution": false}
# # Exercise 3 · Scatter, then ring allgather (van de Geijn's broadcast)
#
# For long messages MPICH does not send the whole buffer down a tree. It cuts
# it into p blocks, **scatters** them (relative rank i gets block i), then
# every rank passes blocks around a **ring** until all have all: each rank
# sends and receives about 2n(p-1)/p bytes instead of n per tree level.
#
# `blocks(nbytes, p)` gives the blocks: block i is bytes `[lo, hi)`,
# ceil(n/p) bytes each (the last ones shorter, possibly empty). Relative rank
# `me = (rank - root) % size` owns block `me`.
#
# 1. `scatter(buf, root, comm)`: afterwards each rank must hold its own block
#    (what it holds elsewhere does not matter). A binomial scatter sends each
#    child the blocks of its whole subtree; sending each rank its own block
#    from the root also passes, but the root's own block must never leave it.
# 2. `ring_allgather(buf, root, comm)`: each rank starts with only its own block;
#    in step s (s = 0 .. p-2) it sends block `(me - s) % p` to rank `rank + 1`
#    and receives block `(me - s - 1) % p` from rank `rank - 1` (use `Sendrecv`,
#    or `Isend` + `Recv`: a ring of blocking sends can deadlock).
# 3. Together they are a broadcast.
#
# `comm` offers `Send`, `Recv`, `Isend`, `Irecv`, `Sendrecv`, `rank`, `size`.

# %% tags=["parameters"] nbgrader={"grade": false, "grade_id": "parameters", "locked": true, "schema_version": 3, "solution": false}
N_ENGINES = 4

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import os

from gpulab.cluster import start_engines
from gpulab.exercises import blocks, check_bcast, check_ring_allgather, check_scatter, on_engines, timing

GRADING = os.environ.get("GPULAB_GRADING") == "1"  # the grader skips the timing
engines = start_engines(N_ENGINES)

# %% nbgrader={"grade": false, "grade_id": "scatter", "locked": false, "schema_version": 3, "solution": true}
def scatter(buf, root, comm):
    """Leave block (rank - root) % size of the root's buf on every rank (binomial scatter)."""
    ### BEGIN SOLUTION
    rank, size = comm.Get_rank(), comm.Get_size()
    me = (rank - root) % size
    parts = blocks(len(buf), size)

    def span(first, count):  # bytes of blocks first .. first + count - 1
        last = min(first + count, size) - 1
        return parts[first][0], parts[last][1]

    mask = 1
    while mask < size:  # receive my subtree's blocks from me minus my lowest set bit
        if me & mask:
            lo, hi = span(me, mask)
            if hi > lo:
                comm.Recv(buf[lo:hi], source=(me - mask + root) % size)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:  # send each child its subtree's blocks
        if me + mask < size:
            lo, hi = span(me + mask, mask)
            if hi > lo:
                comm.Send(buf[lo:hi], dest=(me + mask + root) % size)
        mask >>= 1
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "check_scatter", "locked": true, "points": 2, "schema_version": 3, "solution": false}
print(on_engines(engines, check_scatter, scatter))

# %% nbgrader={"grade": false, "grade_id": "ring_allgather", "locked": false, "schema_version": 3, "solution": true}
def ring_allgather(buf, root, comm):
    """Every rank holds block (rank - root) % size; pass blocks around the ring until all hold all."""
    ### BEGIN SOLUTION
    rank, size = comm.Get_rank(), comm.Get_size()
    me = (rank - root) % size
    parts = blocks(len(buf), size)
    right, left = (rank + 1) % size, (rank - 1) % size
    for step in range(size - 1):
        lo, hi = parts[(me - step) % size]
        rlo, rhi = parts[(me - step - 1) % size]
        comm.Sendrecv(buf[lo:hi], dest=right, recvbuf=buf[rlo:rhi], source=left)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "check_ring_allgather", "locked": true, "points": 2, "schema_version": 3, "solution": false}
print(on_engines(engines, check_ring_allgather, ring_allgather))

# %% nbgrader={"grade": false, "grade_id": "scatter_allgather_bcast", "locked": false, "schema_version": 3, "solution": true}
def scatter_allgather_bcast(buf, root, comm):
    """A broadcast: scatter, then ring allgather."""
    ### BEGIN SOLUTION
    scatter(buf, root, comm)
    ring_allgather(buf, root, comm)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "check_scatter_allgather", "locked": true, "points": 1, "schema_version": 3, "solution": false}
print(on_engines(engines, check_bcast, scatter_allgather_bcast))

# %% [markdown] nbgrader={"grade": false, "grade_id": "timing_statement", "locked": true, "schema_version": 3, "solution": false}
# ## Yours beside the library's (4 MiB)
#
# gpulab's `scatter_allgather_ring` runs the same algorithm. Is it faster than
# the binomial tree of exercise 1 at this size on this machine? The model
# says when it should be: (log2 p + p - 1) alpha + 2 (p-1)/p n beta against
# log2 p (alpha + n beta).

# %% nbgrader={"grade": false, "grade_id": "timing", "locked": true, "schema_version": 3, "solution": false}
if not GRADING:
    print(on_engines(engines, timing, scatter_allgather_bcast, algorithm="scatter_allgather_ring", nbytes=1 << 22))

# %% nbgrader={"grade": false, "grade_id": "stop", "locked": true, "schema_version": 3, "solution": false}
engines.stop()
