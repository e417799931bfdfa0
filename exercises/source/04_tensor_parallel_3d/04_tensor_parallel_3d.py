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
# # Exercise 4 · The 3D tensor-parallel Linear layer, forward and backward
#
# AxoNN splits a Linear layer `Y = X W^T` (W is [n, k]) over a grid of
# R x C x D ranks (`Mesh(row=R, col=C, depth=D)`). Rank (r, c, d) holds
#
# * `x`: its depth slice d of the tokens, input features of column block c: [M, k/C];
# * `W`: the weight block of output rows r and input columns c: [n/R, k/C].
#
# Forward: `x @ W.T` is only a *partial* sum over the input features (the
# other column blocks hold the rest), so sum it over `mesh.col_comm`:
# `y` [M, n/R]. Backward, given `dy` [M, n/R]: `dy @ W` is partial over the
# output rows, sum it over `mesh.row_comm`: `dx` [M, k/C]; `dy.T @ x` is this
# depth slice's share of the weight gradient, sum it over `mesh.depth_comm`:
# `dW` [n/R, k/C]. (The engine keeps W sharded over depth and reduce-scatters
# dW; here every depth rank holds the whole block and the whole sum.)
#
# Use `comm.Allreduce(sendbuf, recvbuf)` on the mesh's communicators (mpi4py,
# numpy float64 arrays). The check runs your functions on every grid shape of
# 4 ranks (2x2x1, 1x2x2, 2x1x2, 4x1x1, 1x4x1, ...) against the serial layer
# (`gpulab.engine.gpt.layers.linear_forward/backward`) in float64 and names
# the rank, its grid coordinate, which output or gradient differs and by how
# much. Background: notebook 04 (tensor parallel 3D).

# %% tags=["parameters"] nbgrader={"grade": false, "grade_id": "parameters", "locked": true, "schema_version": 3, "solution": false}
N_ENGINES = 4

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import os

import numpy as np

from gpulab.cluster import start_engines
from gpulab.exercises import check_tp3d, on_engines, timing_tp3d

GRADING = os.environ.get("GPULAB_GRADING") == "1"  # the grader skips the timing
engines = start_engines(N_ENGINES)

# %% nbgrader={"grade": false, "grade_id": "tp_forward", "locked": false, "schema_version": 3, "solution": true}
def tp_forward(x, W, mesh):
    """y [M, n/R] = this rank's rows of X W^T, for its depth slice of tokens."""
    ### BEGIN SOLUTION
    partial = x @ W.T
    y = np.empty_like(partial)
    mesh.col_comm.Allreduce(partial, y)
    return y
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "tp_backward", "locked": false, "schema_version": 3, "solution": true}
def tp_backward(dy, x, W, mesh):
    """(dx [M, k/C], dW [n/R, k/C] summed over all depth slices)."""
    ### BEGIN SOLUTION
    partial = dy @ W
    dx = np.empty_like(partial)
    mesh.row_comm.Allreduce(partial, dx)
    mine = dy.T @ x
    dW = np.empty_like(mine)
    mesh.depth_comm.Allreduce(mine, dW)
    return dx, dW
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "check_tp3d", "locked": true, "points": 5, "schema_version": 3, "solution": false}
print(on_engines(engines, check_tp3d, (tp_forward, tp_backward)))

# %% [markdown] nbgrader={"grade": false, "grade_id": "timing_statement", "locked": true, "schema_version": 3, "solution": false}
# ## Yours beside the engine's `Linear3D`
#
# Milliseconds per forward + backward of a [1024, 1024] layer on 512 tokens,
# on a 2 x 2 x 1 mesh. The engine's layer gathers W over depth and
# reduce-scatters dW instead (and can overlap them with the matmuls).

# %% nbgrader={"grade": false, "grade_id": "timing", "locked": true, "schema_version": 3, "solution": false}
if not GRADING:
    print(on_engines(engines, timing_tp3d, (tp_forward, tp_backward)))

# %% nbgrader={"grade": false, "grade_id": "stop", "locked": true, "schema_version": 3, "solution": false}
engines.stop()
