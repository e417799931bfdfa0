"""AxoNN's 3D tensor-parallel Linear (plain and transposed), as a forward/backward pair.

Plain layer, W [n, k] on an R x C x D grid (M tokens on this rank)::

    forward   W  = all_gather(w, depth)          [n/R, k/C]  from the 1-D shard w
              Y  = X @ W^T                       X [M, k/C] -> Y [M, n/R], partial over col
              Y  = all_reduce(Y, col) + b
    backward  W  = all_gather(w, depth)          gathered again, unless cached from forward
              dX = dY @ W                        [M, k/C], partial over row
              dX = all_reduce(dX, row)
              dW = dY^T @ X                      [n/R, k/C], partial over depth (other sequences)
              dw = reduce_scatter(dW, depth)     this rank's 1-D shard of the gradient

With ``oar`` (AxoNN's OAR, ``gpulab.engine.parallel.overlap``) the dX all-reduce is
non-blocking, with ``ors`` (ORS) the dW reduce-scatter, in AxoNN's order::

              h  = iall_reduce(dY @ W, row)      oar: in flight while dW is computed
              dW = dY^T @ X
              dw = ireduce_scatter(dW, depth)    ors: handed back in flight (a Handle), waited
              dX = h.wait()                      for when the optimizer or a bucket needs it

and with ``ors`` where dX needs no all-reduce (out-split of one), dW goes first so
that its reduce-scatter runs during the dX matmul.
The gathered block W can come from outside (``W=``: prefetched or cached by
``gpulab.engine.parallel.overlap_weights``); each matmul is a ``timeline.kernel``.

The transposed layer swaps the roles of row and col (X [M, k/R] -> Y [M, n/C],
forward all-reduce over row, dX all-reduce over col). A plain layer's output
(split over row) is exactly a transposed layer's input and vice versa, so
QKV (plain) -> attention out (transposed) -> FC1 (plain) -> FC2 (transposed)
needs no re-layout. With ``sequence_parallel`` the row group's two sums (a
plain layer's dX, a transposed layer's Y) are reduce-scatters along the
sequence, and the inputs that need every position (a plain layer's X, a
transposed layer's dY) are all-gathered along it first (``sequence``): the
activations between the layers are (b, T/R, C/col). Every collective of the layer is in this file, in the
order above; biases are summed over depth x data later, with the other
copied parameters (``ParallelGPT.reduce_grads``).
"""

from __future__ import annotations

from gpulab.backend import array_module
from gpulab.engine.parallel import collectives as coll
from gpulab.engine.parallel.sequence import all_gather_seq, reduce_scatter_seq
from gpulab.engine.parallel.shards import block_slices, shard_numel, split_counts
from gpulab.engine.parallel.timeline import kernel


class Linear3D:
    """Geometry and communicators of one tensor-parallel weight [n_out, k_in]."""

    def __init__(self, n_out: int, k_in: int, mesh, transposed: bool = False, name: str = "linear",
                 sequence_parallel: bool = False):
        self.mesh, self.transposed, self.name = mesh, transposed, name
        # the row group's sums become reduce-scatter + all-gather along T (``sequence``)
        self.seq_comm = mesh.row_comm if sequence_parallel else None
        self.n, self.k = n_out, k_in
        n_parts, k_parts = split_counts(transposed, mesh.shape)
        self.n_local, self.k_local = n_out // n_parts, k_in // k_parts  # block [n/R, k/C]
        self.shard_numel = shard_numel(n_out, k_in, mesh.shape, transposed)
        # in_comm: where the input features are split (forward sums over it);
        # out_comm: where the output features are split (backward sums dX over it)
        self.in_comm, self.out_comm = (mesh.row_comm, mesh.col_comm) if transposed else (mesh.col_comm, mesh.row_comm)
        self.out_index = mesh.coord.col if transposed else mesh.coord.row  # which out-feature block is ours

    def block_slices(self):
        return block_slices(self.n, self.k, self.mesh.shape, self.mesh.coord.row, self.mesh.coord.col,
                            self.transposed)

    def block(self, flat):
        """The local block [n_local, k_local] from the gathered (padded) 1-D buffer."""
        return flat[:self.n_local * self.k_local].reshape(self.n_local, self.k_local)

    def gather(self, w_shard):
        """The full local block [n_local, k_local] from the depth group's 1-D shards."""
        return self.block(coll.all_gather(w_shard, self.mesh.depth_comm))  # [D * shard_numel], padded

    def start_gather(self, w_shard) -> coll.Handle:
        """Non-blocking ``gather``: ``self.block(handle.wait())`` is the block."""
        return coll.iall_gather(w_shard, self.mesh.depth_comm)

    def _padded(self, dW):
        xp = array_module(dW)
        flat = xp.zeros(self.shard_numel * self.mesh.shape.depth, dtype=dW.dtype)
        flat[:dW.size] = dW.reshape(-1)
        return flat

    def scatter_grad(self, dW, wait: bool = True):
        """Sum a block gradient over depth and keep this rank's 1-D shard (padded like w);
        ``wait=False``: a ``Handle`` whose ``wait()`` gives the shard."""
        if wait:
            return coll.reduce_scatter(self._padded(dW), self.mesh.depth_comm)
        return coll.ireduce_scatter(self._padded(dW), self.mesh.depth_comm)

    def forward(self, x, w_shard, b=None, W=None):
        W = self.gather(w_shard) if W is None else W  # [n/R, k/C]
        x_in = x
        if self.seq_comm is not None and not self.transposed:
            x = all_gather_seq(x, self.seq_comm)  # (b, T/R, k/C) -> every position
        with kernel(f"{self.name} fwd"):
            # one GEMM over all tokens: numpy would loop over the leading (b, T) axes otherwise
            y = (x.reshape(-1, self.k_local) @ W.T).reshape(*x.shape[:-1], self.n_local)  # partial
        if self.seq_comm is not None and self.transposed:
            y = reduce_scatter_seq(y, self.seq_comm)  # summed over row, this rank's positions
        else:
            y = coll.all_reduce(y, self.in_comm)
        if b is not None:
            y = y + b  # added once, after the sum
        return y, (x_in, w_shard, b is not None)  # sequence parallel: the T/R positions only

    def backward(self, dy, cache, scatter: bool = True, W=None, oar: bool = False, ors: bool = False):
        """(dx, {"weight": dw shard (or the block dW if not scatter), "bias": db (partial)}).

        ``oar``: the dX all-reduce runs behind the dW matmul; ``ors``: the weight entry
        is a ``Handle`` still in flight."""
        x, w_shard, has_bias = cache
        W = self.gather(w_shard) if W is None else W
        seq = self.seq_comm
        if seq is not None:  # every position again: dy of a transposed layer, x of a plain one
            dy, x = (all_gather_seq(dy, seq), x) if self.transposed else (dy, all_gather_seq(x, seq))
        dy2 = dy.reshape(-1, self.n_local)  # [M, n/R]

        def weight_grad():
            with kernel(f"{self.name} dW"):
                dW = dy2.T @ x.reshape(-1, self.k_local)  # [n/R, k/C], this rank's tokens only
            return self.scatter_grad(dW, wait=not ors) if scatter else dW

        def input_grad():
            with kernel(f"{self.name} dX"):
                return (dy2 @ W).reshape(*dy.shape[:-1], self.k_local)  # (..., k/C), partial over out-split

        summed = self.out_comm.Get_size() > 1
        if seq is not None and not self.transposed and summed:  # dX summed over row: reduce-scatter
            dx = reduce_scatter_seq(input_grad(), seq)
            dw = weight_grad()
        elif ors and not summed:
            dw = weight_grad()  # its reduce-scatter runs while dX is computed
            dx = input_grad()
        elif oar and summed:
            pending = coll.iall_reduce(input_grad(), self.out_comm)
            dw = weight_grad()  # the dX all-reduce runs meanwhile
            dx = pending.wait()
        else:
            dx = coll.all_reduce(input_grad(), self.out_comm)
            dw = weight_grad()
        grads = {"weight": dw}
        if has_bias:
            grads["bias"] = dy2.sum(axis=0)  # [n/R]; summed over depth x data later
        return dx, grads
