"""AxoNN's 3D tensor-parallel Linear (plain and transposed), as a forward/backward pair.

Plain layer, W [n, k] on an R x C x D grid (M tokens on this rank)::

    forward   W  = all_gather(w, depth)          [n/R, k/C]  from the 1-D shard w
              Y  = X @ W^T                       X [M, k/C] -> Y [M, n/R], partial over col
              Y  = all_reduce(Y, col) + b
    backward  W  = all_gather(w, depth)          gathered again, not kept from forward
              dX = dY @ W                        [M, k/C], partial over row
              h  = iall_reduce(dX, row)          in flight while dW is computed
              dW = dY^T @ X                      [n/R, k/C], partial over depth (other sequences)
              dw = reduce_scatter(dW, depth)     this rank's 1-D shard of the gradient
              dX = h.wait()

The transposed layer swaps the roles of row and col (X [M, k/R] -> Y [M, n/C],
forward all-reduce over row, dX all-reduce over col). A plain layer's output
(split over row) is exactly a transposed layer's input and vice versa, so
QKV (plain) -> attention out (transposed) -> FC1 (plain) -> FC2 (transposed)
needs no re-layout. Every collective of the layer is in this file, in the
order above; biases are summed over depth x data later, with the other
copied parameters (``ParallelGPT.reduce_grads``).
"""

from __future__ import annotations

from gpulab.backend import array_module
from gpulab.engine import collectives as coll
from gpulab.engine.layout import block_slices, shard_numel, split_counts


class Linear3D:
    """Geometry and communicators of one tensor-parallel weight [n_out, k_in]."""

    def __init__(self, n_out: int, k_in: int, mesh, transposed: bool = False):
        self.mesh, self.transposed = mesh, transposed
        self.n, self.k = n_out, k_in
        n_parts, k_parts = split_counts(transposed, mesh.shape)
        self.n_local, self.k_local = n_out // n_parts, k_in // k_parts  # block [n/R, k/C]
        self.shard_numel = shard_numel(n_out, k_in, mesh.shape, transposed)
        # in_comm: where the input features are split (forward sums over it);
        # out_comm: where the output features are split (backward sums dX over it)
        self.in_comm, self.out_comm = (mesh.row, mesh.col) if transposed else (mesh.col, mesh.row)
        self.out_index = mesh.c if transposed else mesh.r  # which out-feature block is ours

    def block_slices(self):
        return block_slices(self.n, self.k, self.mesh.shape, self.mesh.r, self.mesh.c, self.transposed)

    def gather(self, w_shard):
        """The full local block [n_local, k_local] from the depth group's 1-D shards."""
        flat = coll.all_gather(w_shard, self.mesh.depth)  # [D * shard_numel], padded
        return flat[:self.n_local * self.k_local].reshape(self.n_local, self.k_local)

    def scatter_grad(self, dW):
        """Sum a block gradient over depth and keep this rank's 1-D shard (padded like w)."""
        xp = array_module(dW)
        flat = xp.zeros(self.shard_numel * self.mesh.shape[2], dtype=dW.dtype)
        flat[:dW.size] = dW.reshape(-1)
        return coll.reduce_scatter(flat, self.mesh.depth)

    def forward(self, x, w_shard, b=None):
        W = self.gather(w_shard)  # [n/R, k/C]
        y = x @ W.T  # (..., k/C) -> (..., n/R), partial sum over the in-split
        y = coll.all_reduce(y, self.in_comm)
        if b is not None:
            y = y + b  # added once, after the sum
        return y, (x, w_shard, b is not None)

    def backward(self, dy, cache, scatter: bool = True):
        """(dx, {"weight": dw shard (or the block dW if not scatter), "bias": db (partial)})."""
        x, w_shard, has_bias = cache
        W = self.gather(w_shard)
        dx = dy @ W  # (..., n/R) -> (..., k/C), partial over the out-split
        pending = coll.iall_reduce(dx, self.out_comm)
        dy2 = dy.reshape(-1, self.n_local)  # [M, n/R]
        dW = dy2.T @ x.reshape(-1, self.k_local)  # [n/R, k/C], this rank's tokens only
        grads = {"weight": self.scatter_grad(dW) if scatter else dW}
        if has_bias:
            grads["bias"] = dy2.sum(axis=0)  # [n/R]; summed over depth x data later
        return pending.wait(), grads
