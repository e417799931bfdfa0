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
# # Exercise 2 · The pipelined chain
#
# A tree sends the *whole* buffer at every step. For a large buffer it pays
# to cut it into chunks and pipeline them down a chain: the root sends chunk
# 0 to the next rank, then chunk 1 while that rank forwards chunk 0, and so
# on. With p ranks and k chunks of n/k bytes the model says
# (p + k - 2)(alpha + n beta / k): too few chunks and the chain fills slowly,
# too many and every chunk pays alpha.
#
# Write `chain_bcast(buf, root, comm, chunk_bytes)`: rank `me = (rank - root) % size`
# receives each chunk from relative rank `me - 1` and forwards it to `me + 1`
# (the last rank only receives). Chunks are `buf[lo:lo + chunk_bytes]`; the last
# one may be shorter, and a chunk larger than the buffer means one message.
# `comm` offers `Send`, `Recv`, `Isend`, `Irecv`, `Sendrecv`, `rank`, `size`.
#
# The check runs it for every root, awkward sizes and chunk sizes 1000, 4096
# and 1 MiB, compares every byte with `MPI_Bcast`, and checks that each rank
# talks only to its neighbours in the chain, in the right number of chunks.
# Then you measure your chunk sweep against the model: on an emulated
# cluster of two nodes joined by a 1 Gbit/s link where this machine can make
# one (root and network namespaces), otherwise on the engines you have.

# %% tags=["parameters"] nbgrader={"grade": false, "grade_id": "parameters", "locked": true, "schema_version": 3, "solution": false}
N_ENGINES = 4

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import os

from gpulab.cluster import start_engines
from gpulab.exercises import check_chain, chunk_sweep, on_engines, timing

GRADING = os.environ.get("GPULAB_GRADING") == "1"  # the grader skips the measurements
engines = start_engines(N_ENGINES)

# %% nbgrader={"grade": false, "grade_id": "chain_bcast", "locked": false, "schema_version": 3, "solution": true}
def chain_bcast(buf, root, comm, chunk_bytes):
    """Broadcast buf from root down the chain root -> root+1 -> ..., chunk by chunk."""
    ### BEGIN SOLUTION
    rank, size = comm.Get_rank(), comm.Get_size()
    me = (rank - root) % size
    before, after = (rank - 1) % size, (rank + 1) % size
    for lo in range(0, len(buf), chunk_bytes):
        chunk = buf[lo:lo + chunk_bytes]
        if me > 0:
            comm.Recv(chunk, source=before)
        if me < size - 1:
            comm.Send(chunk, dest=after)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "check_chain", "locked": true, "points": 4, "schema_version": 3, "solution": false}
print(on_engines(engines, check_chain, chain_bcast))

# %% [markdown] nbgrader={"grade": false, "grade_id": "sweep_statement", "locked": true, "schema_version": 3, "solution": false}
# ## Your chunk sweep against the model
#
# Each row: your chain broadcasting 4 MiB with one chunk size, measured, and
# the model's prediction with alpha and beta fitted by ping-pong on the same
# engines. Where is the best chunk size, measured and predicted? The formula
# puts it at k* = sqrt((p - 2) n beta / alpha) chunks.

# %% nbgrader={"grade": false, "grade_id": "sweep", "locked": true, "schema_version": 3, "solution": false}
if not GRADING:
    from gpulab.emulated import ClusterUnavailable

    try:  # two emulated nodes, two engines each, a 1 Gbit/s link between them
        sweep_engines = start_engines(4, nodes=2, link="1gbit")
    except ClusterUnavailable as why:
        print(f"no emulated cluster here ({why}); measuring on the local engines")
        sweep_engines = engines
    try:
        print(on_engines(sweep_engines, timing, chain_bcast, algorithm="chain", chunk_bytes=1 << 16))
        for row in on_engines(sweep_engines, chunk_sweep, chain_bcast):
            print(f"chunk {row['chunk_bytes']:>8} B: measured {row['measured_ms']:7.2f} ms, "
                  f"model {row['model_ms']:7.2f} ms")
    finally:
        if sweep_engines is not engines:
            sweep_engines.stop()

# %% nbgrader={"grade": false, "grade_id": "stop", "locked": true, "schema_version": 3, "solution": false}
engines.stop()
