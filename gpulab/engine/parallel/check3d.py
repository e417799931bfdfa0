"""One AxoNN 3D tensor-parallel Linear on live ranks, checked against the serial layer.

Run on every rank (notebook 04 does it through ``%%px``)::

    report = check_linear3d(Mesh(2, 1, 2, 1), n_out=8, k_in=6, tokens=8)

Every rank builds the same full X, W, b and dY from one seed, computes the
serial ``linear_forward``/``linear_backward`` as the reference, takes its own
pieces (its tokens, its feature blocks, its 1-D depth shard of W), runs
``Linear3D.forward``/``backward``, and compares its pieces of Y, dX and the
reduce-scattered dW shard with the same pieces of the reference.
"""

from __future__ import annotations

import numpy as np

from gpulab.engine.gpt.layers import linear_backward, linear_forward
from gpulab.engine.parallel import collectives as coll
from gpulab.engine.parallel.mesh import Mesh
from gpulab.engine.parallel.shards import ParamSpec, block_slices, local_piece, split_counts
from gpulab.engine.parallel.tp3d import Linear3D


def check_linear3d(mesh, n_out: int, k_in: int, tokens: int, transposed: bool = False, seed: int = 0) -> dict:
    """Max abs error of this rank's Y, dX and dW shard against the serial layer, plus what it held and sent."""
    R, C, D, P = mesh.shape
    if tokens % (D * P):
        raise ValueError(f"tokens ({tokens}) must be divisible by depth*data ({D * P}): each of those ranks "
                         "computes its own slice of the tokens")
    rng = np.random.default_rng(seed)  # the same full tensors on every rank
    X = rng.standard_normal((tokens, k_in))
    W = rng.standard_normal((n_out, k_in))
    b = rng.standard_normal(n_out)
    dY = rng.standard_normal((tokens, n_out))
    Y_ref, cache_ref = linear_forward(X, W, b)
    dX_ref, grads_ref = linear_backward(dY, cache_ref)

    layer = Linear3D(n_out, k_in, mesh, transposed, name="demo")
    spec = ParamSpec("demo.weight", "weight", (n_out, k_in), transposed)
    w_shard = local_piece(spec, W, mesh.shape, mesh.coord)
    rows_of_W, cols_of_W = block_slices(n_out, k_in, mesh.shape, mesh.coord.row, mesh.coord.col, transposed)
    m = tokens // (D * P)
    mine = slice(mesh.batch_shard * m, (mesh.batch_shard + 1) * m)  # this rank's tokens

    with coll.trace() as calls:
        y, cache = layer.forward(X[mine, cols_of_W], w_shard, b[rows_of_W])
        dx, grads = layer.backward(dY[mine, rows_of_W], cache)
    # the depth reduce-scatter sums dW over this data replica's tokens only
    replica = slice(mesh.coord.data * D * m, (mesh.coord.data + 1) * D * m)
    dW_replica = linear_backward(dY[replica], linear_forward(X[replica], W, b)[1])[1]["weight"]
    dw_ref = local_piece(spec, dW_replica, mesh.shape, mesh.coord)
    n_parts, k_parts = split_counts(transposed, mesh.shape)
    return {
        "rank": mesh.rank, "coords": mesh.coord._asdict(),
        "x_shape": list(X[mine, cols_of_W].shape), "w_shard_values": int(w_shard.size),
        "block": [n_out // n_parts, k_in // k_parts],
        "y_error": float(np.abs(y - Y_ref[mine, rows_of_W]).max()),
        "dx_error": float(np.abs(dx - dX_ref[mine, cols_of_W]).max()),
        "dw_error": float(np.abs(grads["weight"] - dw_ref).max()),
        "db_partial_error": float(np.abs(grads["bias"] - dY[mine, rows_of_W].sum(axis=0)).max()),
        "collectives": [{k: c[k] for k in ("op", "group", "nbytes")} for c in calls],
        "full_grad_norm": float(np.linalg.norm(grads_ref["weight"])),
    }


def check_on_world(shape, n_out: int, k_in: int, tokens: int, transposed: bool = False, seed: int = 0) -> dict:
    """``check_linear3d`` on a Mesh of COMM_WORLD (what an engine runs for notebook 04)."""
    mesh = Mesh(*shape)
    try:
        return check_linear3d(mesh, n_out, k_in, tokens, transposed, seed)
    finally:
        mesh.free()
