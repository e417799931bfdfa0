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
# # Exercise 6 · Alpha and beta from your own ping-pong, and a broadcast predicted
#
# The Hockney model prices one message of n bytes at `alpha + n * beta`:
# alpha is the fixed cost per message, beta the cost per byte (1 / bandwidth).
# Measure them yourself and predict a broadcast with them.
#
# 1. `pingpong(comm, nbytes, iters)`: rank 0 sends `nbytes` to rank 1, which
#    sends them back, `iters` times (other ranks do nothing); return the
#    one-way time per message on rank 0 (the round trip / 2, averaged), using
#    `time.perf_counter()`. `comm` offers `Send`, `Recv`, `rank`, `size`.
# 2. `fit_alpha_beta(sizes, seconds)`: the least-squares line through the
#    points, returned as `(alpha, beta)`.
# 3. `predict_bcast(algorithm, nbytes, p, alpha, beta, chunk_bytes=None)`:
#    seconds for "linear" ((p-1) messages one after the other), "binomial"
#    (ceil(log2 p) rounds) and "chain" (p + k - 2 chunk steps of
#    `chunk_bytes`, k = ceil(n / chunk_bytes)).
#
# The check verifies the messages your ping-pong sends and that it returns
# one-way time, recovers alpha and beta from exact data, and compares your
# predictions with gpulab's model. Then your numbers predict a binomial
# broadcast on these engines, beside the measured one.

# %% tags=["parameters"] nbgrader={"grade": false, "grade_id": "parameters", "locked": true, "schema_version": 3, "solution": false}
N_ENGINES = 4

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import math
import os
import time

import numpy as np

from gpulab.cluster import start_engines
from gpulab.exercises import check_alpha_beta, on_engines, prediction_vs_measured

GRADING = os.environ.get("GPULAB_GRADING") == "1"  # the grader skips the measurement
engines = start_engines(N_ENGINES)

# %% nbgrader={"grade": false, "grade_id": "pingpong", "locked": false, "schema_version": 3, "solution": true}
def pingpong(comm, nbytes, iters):
    """One-way seconds per message of nbytes between ranks 0 and 1 (the result on rank 0)."""
    ### BEGIN SOLUTION
    buf = np.zeros(nbytes, np.uint8)
    rank = comm.Get_rank()
    t0 = time.perf_counter()
    for _ in range(iters):
        if rank == 0:
            comm.Send(buf, dest=1)
            comm.Recv(buf, source=1)
        elif rank == 1:
            comm.Recv(buf, source=0)
            comm.Send(buf, dest=0)
    return (time.perf_counter() - t0) / (2 * iters)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "fit_alpha_beta", "locked": false, "schema_version": 3, "solution": true}
def fit_alpha_beta(sizes, seconds):
    """(alpha, beta) of the least-squares line seconds = alpha + sizes * beta."""
    ### BEGIN SOLUTION
    beta, alpha = np.polyfit(np.asarray(sizes, float), np.asarray(seconds, float), 1)
    return alpha, beta
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "predict_bcast", "locked": false, "schema_version": 3, "solution": true}
def predict_bcast(algorithm, nbytes, p, alpha, beta, chunk_bytes=None):
    """Seconds for one broadcast of nbytes over p ranks in the Hockney model."""
    ### BEGIN SOLUTION
    if algorithm == "linear":
        return (p - 1) * (alpha + nbytes * beta)
    if algorithm == "binomial":
        return math.ceil(math.log2(p)) * (alpha + nbytes * beta)
    if algorithm == "chain":
        k = math.ceil(nbytes / chunk_bytes)
        return (p + k - 2) * (alpha + min(chunk_bytes, nbytes) * beta)
    raise ValueError(algorithm)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "check_alpha_beta", "locked": true, "points": 4, "schema_version": 3, "solution": false}
print(on_engines(engines, check_alpha_beta, (pingpong, fit_alpha_beta, predict_bcast)))

# %% [markdown] nbgrader={"grade": false, "grade_id": "predict_statement", "locked": true, "schema_version": 3, "solution": false}
# ## Your prediction against a measured broadcast
#
# Your ping-pong at 8 B .. 4 MiB, your fit, your prediction of a 1 MiB
# binomial broadcast on these engines, and gpulab's binomial broadcast
# measured. If they differ, which of the model's assumptions fails here (cores
# shared by the ranks, one protocol for all sizes, Python's cost per message)?

# %% nbgrader={"grade": false, "grade_id": "predict", "locked": true, "schema_version": 3, "solution": false}
if not GRADING:
    print(on_engines(engines, prediction_vs_measured, (pingpong, fit_alpha_beta, predict_bcast)))

# %% nbgrader={"grade": false, "grade_id": "stop", "locked": true, "schema_version": 3, "solution": false}
engines.stop()
