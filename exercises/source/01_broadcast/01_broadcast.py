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
# # Exercise 1 · Write your own broadcast from Send and Recv
#
# A broadcast copies the root's buffer to every rank. MPI gives it as one
# call, `MPI_Bcast`; here you build it from point-to-point messages, twice:
#
# 1. **linear**: the root sends the whole buffer to every other rank, one
#    after the other (p - 1 steps);
# 2. **binomial**: a rank that has the data sends it on, so the number of
#    ranks holding it doubles every step (ceil(log2 p) steps).
#
# Your function gets `buf` (a numpy `uint8` array, the root's bytes on the
# root, garbage elsewhere), `root` and `comm`, and must leave the root's bytes
# in `buf` on every rank. `comm` offers `Send(buf, dest, tag=0)`,
# `Recv(buf, source, tag=0)`, `Isend`, `Irecv`, `Sendrecv`, `rank` and
# `size`, nothing else: no collectives.
#
# The checks run your function on the MPI engines for **every root** and for
# awkward sizes (1, 7, 1000, 4099, 65541 bytes), compare every byte with
# `MPI_Bcast`, and tell you which rank got which bytes wrong, at which step
# and from whom, or which rank waited for a message that never came.
# Then they time your broadcast beside gpulab's own (`gpulab.bcast`).
#
# Background: notebook 01 (broadcast algorithms) draws both trees.

# %% tags=["parameters"] nbgrader={"grade": false, "grade_id": "parameters", "locked": true, "schema_version": 3, "solution": false}
N_ENGINES = 4

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import os

from gpulab.cluster import start_engines
from gpulab.exercises import check_bcast, on_engines, timing

GRADING = os.environ.get("GPULAB_GRADING") == "1"  # the grader skips the timings
engines = start_engines(N_ENGINES)

# %% [markdown] nbgrader={"grade": false, "grade_id": "linear_statement", "locked": true, "schema_version": 3, "solution": false}
# ## 1. Linear broadcast (2 points)
#
# The root sends `buf` to every other rank; every other rank receives it from the root.

# %% nbgrader={"grade": false, "grade_id": "linear_bcast", "locked": false, "schema_version": 3, "solution": true}
def linear_bcast(buf, root, comm):
    """Broadcast buf from root: the root sends to each rank in turn."""
    ### BEGIN SOLUTION
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == root:
        for dest in range(size):
            if dest != root:
                comm.Send(buf, dest=dest)
    else:
        comm.Recv(buf, source=root)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "check_linear", "locked": true, "points": 2, "schema_version": 3, "solution": false}
print(on_engines(engines, check_bcast, linear_bcast, shape="linear"))

# %% [markdown] nbgrader={"grade": false, "grade_id": "binomial_statement", "locked": true, "schema_version": 3, "solution": false}
# ## 2. Binomial broadcast (3 points)
#
# Number the ranks relative to the root, `me = (rank - root) % size`, so that
# the root is 0. In step k (k = 0, 1, ...) every rank `me < 2**k` that has the
# data sends it to `me + 2**k` (if that rank exists). Equivalently: a rank
# receives from `me` minus its lowest set bit, then sends to `me + mask` for
# every `mask` below that bit, largest first. Remember to map relative ranks
# back: `(me + root) % size`.

# %% nbgrader={"grade": false, "grade_id": "binomial_bcast", "locked": false, "schema_version": 3, "solution": true}
def binomial_bcast(buf, root, comm):
    """Broadcast buf from root along a binomial tree: ceil(log2 p) steps."""
    ### BEGIN SOLUTION
    rank, size = comm.Get_rank(), comm.Get_size()
    me = (rank - root) % size  # relative rank: the root is 0
    mask = 1
    while mask < size:  # receive from the rank that differs in my lowest set bit
        if me & mask:
            comm.Recv(buf, source=(me - mask + root) % size)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:  # then send to the ranks below that bit, farthest first
        if me + mask < size:
            comm.Send(buf, dest=(me + mask + root) % size)
        mask >>= 1
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "check_binomial", "locked": true, "points": 3, "schema_version": 3, "solution": false}
print(on_engines(engines, check_bcast, binomial_bcast, shape="binomial"))

# %% [markdown] nbgrader={"grade": false, "grade_id": "timing_statement", "locked": true, "schema_version": 3, "solution": false}
# ## 3. Yours beside the library's
#
# Microseconds per broadcast of 1 MiB: your function, gpulab's version of
# the same algorithm and `MPI_Bcast` (each checked right first). Why is the
# linear one slower, and by about how much should it be on 4 ranks?

# %% nbgrader={"grade": false, "grade_id": "timing", "locked": true, "schema_version": 3, "solution": false}
if not GRADING:
    for fn, algorithm in ((linear_bcast, "linear"), (binomial_bcast, "binomial")):
        print(on_engines(engines, timing, fn, algorithm=algorithm))

# %% nbgrader={"grade": false, "grade_id": "stop", "locked": true, "schema_version": 3, "solution": false}
engines.stop()
