"""ParallelGPT: the serial GPT of ``gpulab.engine.gpt.model`` on a 4D (row, col, depth, data) mesh,
optionally cut into pipeline stages.

    mesh = Mesh(2, 2, 1, 1)                       # inside an MPI job of 4 ranks
    gpt = ParallelGPT(cfg, mesh)
    gpt = ParallelGPT(cfg, Mesh(2, 1, 1, 1, pipe=2), micro_batches=4, schedule="1f1b")  # 2 stages
    gpt.load_params(init_params(cfg))             # every rank keeps only its pieces
    loss = gpt.forward_backward(idx, targets)     # the global batch, on every rank
    grads = gpt.full_grads()                      # full shapes, serial names

Where things live (b = B/(depth*data) sequences per rank, see ``shards``):
residual stream x (b, T, C/col), copied over row; QKV and FC1 are plain 3D
layers (out split over row), attention-out and FC2 transposed ones (back to
C/col); attention runs on the row's n_head/row heads; the tied wte is a plain
layer [V/row, C/col] used twice (vocab-parallel lookup, LM head). Backward
mirrors forward call by call (one pipeline stage's both: ``stage``; one
transformer block's: ``block``). Gradients go to a ``GradSync``
(``overlap_grads``), which sums weight shards over data and every copied
parameter (biases, LayerNorm, wpe) over depth x data: after backward, or in
buckets during it. ``overlap`` (``gpulab.engine.parallel.overlap.Overlap``) switches
each kind of communication/computation overlap on or off; the numbers are the
same either way. Weights reach each layer through a ``WeightFetcher``
(``overlap_weights``: OAG's prefetch, cache). Every matmul, attention and GELU is a
``timeline.kernel``, so ``gpulab.engine.parallel.timeline.record()`` sees the compute.

With ``mesh.pipe`` > 1 each stage holds and computes only its blocks
(``pipeline``: the first stage the embeddings, the last ln_f and the LM head);
the local batch is cut into ``micro_batches`` (default: one per stage) that
run in the stage's ``schedule`` ("1f1b" or "gpipe"), the residual stream
(b/m, T, C/col) and its gradient going between stages by ``p2p`` sends on
``mesh.pipe_comm`` (``pipeline_step`` runs them). Each micro-batch's forward
and backward is a timeline phase with its ``micro`` index. Gradients are
summed over micro-batches before the data-parallel sync
(``pipeline_step.GradAccumulator``); the tied wte's gradient is summed over
the first and last stage (``mesh.embed_comm``). With one stage and one
micro-batch this is the plain 4D step, call for call.

Megatron-LM's options (each off by default; the numbers stay the serial model's):

- ``recompute="full"``: each block keeps only its input; backward runs the
  block's forward again (a "recompute" timeline phase, its collectives
  included) before its backward. ``"selective"`` (Korthikanti et al.):
  attention keeps its QKV output instead of the T x T probabilities and
  rebuilds them in backward (an "attn recompute" kernel).
- ``schedule="interleaved", virtual_stages=V``: the model is cut into
  pipe x V chunks, stage s holding chunks s, s + pipe, ... (``pipeline.chunk_layers``);
  a micro-batch goes round the stages V times; bubble (p-1)/(V m) of the ideal time.
- ``sequence_parallel=True``: the row group's all-reduces (a transposed
  layer's output, a plain layer's dX, the embedding's lookup) become a
  reduce-scatter along the sequence, and the inputs that need every position
  (a plain layer's X, a transposed layer's dY, the embedding's gradient) an
  all-gather (``sequence``): between them each row rank holds T/row positions
  of the residual stream, so LayerNorm, the residual adds (and dropout, which
  this model has not) work on 1/row of the activations; LayerNorm's and wpe's
  gradients are then summed over row. On Megatron-LM's grid (R, 1, 1, P) that
  is Megatron-LM's sequence parallelism; on any 3D grid it applies to the row
  group alone: the residual stream is copied over row (so splitting it there
  saves memory) but split over col by features, and what the col group sums
  feeds attention (every position's keys and values) or a weight block that
  multiplies every token, so a reduce-scatter over col would be all-gathered
  again at once. Depth and data hold other sequences: nothing to split.
- ``distributed_optimizer=True`` (ZeRO-1, Megatron-LM's distributed optimizer, with
  ``gpulab.engine.training.zero1.DistributedAdamW``): each gradient bucket is reduce-scattered over
  its group instead of all-reduced (``overlap_grads.BucketLayout``), so a rank holds the sums of its
  slice only (``grad_layout.owned_part``); ``grad_norm`` counts the slices and the optimizer
  updates them and all-gathers the parameters. ``full_grads`` all-gathers the slices first.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

from gpulab.backend import array_module, to_device, to_host
from gpulab.engine.gpt.config import accum_dtype, squared_sum
from gpulab.engine.gpt.model import WPE, WTE
from gpulab.engine.parallel import block as one_block
from gpulab.engine.parallel import collectives as coll
from gpulab.engine.parallel import p2p, stage
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.parallel.overlap_grads import BucketLayout, GradSync, grad_order
from gpulab.engine.parallel.overlap_weights import WeightFetcher, backward_uses, forward_uses
from gpulab.engine.parallel.pipeline import check_pipeline, chunk_layers, schedule, stage_params, stage_uses
from gpulab.engine.parallel.pipeline_step import GradAccumulator, neighbours, run_micro_batches
from gpulab.engine.parallel.shards import assemble, local_piece, owns, param_specs
from gpulab.engine.parallel.timeline import phase
from gpulab.engine.parallel.tp3d import Linear3D

RECOMPUTE = (None, "selective", "full")


def check_divisibility(config, shape, batch_size: int | None = None) -> None:
    """Raise ValueError naming every size that the grid ``shape`` (R, C, D, P) cannot split."""
    R, C, D, P = shape
    problems = []
    if config.n_embd % C:
        problems.append(f"n_embd ({config.n_embd}) must be divisible by col ({C}): the residual "
                        "stream's features are split over columns")
    if config.n_head % R:
        problems.append(f"n_head ({config.n_head}) must be divisible by row ({R}): each grid row "
                        "computes n_head/row attention heads")
    if config.vocab_size % R:
        problems.append(f"vocab_size ({config.vocab_size}) must be divisible by row ({R}): the tied "
                        "embedding / LM head splits the vocabulary over rows (pad the vocabulary)")
    if batch_size is not None and batch_size % (D * P):
        problems.append(f"batch size ({batch_size}) must be divisible by depth*data ({D}*{P} = "
                        f"{D * P}): each depth x data slice computes whole sequences")
    if problems:
        raise ValueError("; ".join(problems))


class ParallelGPT:
    def __init__(self, config, mesh, overlap: Overlap | None = None, micro_batches: int | None = None,
                 schedule: str = "1f1b", recompute: str | None = None, sequence_parallel: bool = False,
                 virtual_stages: int = 1, distributed_optimizer: bool = False):
        check_divisibility(config, mesh.shape)
        if recompute not in RECOMPUTE:
            raise ValueError(f"unknown recompute {recompute!r}; choose from {RECOMPUTE}")
        self.recompute = recompute
        self.sequence_parallel = sequence_parallel and mesh.shape.row > 1  # nothing to split on one row
        self.micro_batches = mesh.pipe if micro_batches is None else micro_batches
        check_pipeline(config.n_layer, mesh.pipe, self.micro_batches, schedule, virtual=virtual_stages)
        self.virtual_stages = virtual_stages
        self.config, self.mesh, self.schedule = config, mesh, schedule
        self.overlap = overlap or Overlap()
        self.all_specs = param_specs(config)
        self.chunks = chunk_layers(config.n_layer, mesh.pipe, mesh.stage, virtual_stages)
        self.layers = [i for chunk in self.chunks for i in chunk]
        self.specs = {n: self.all_specs[n] for n in stage_params(config, mesh.pipe, mesh.stage, virtual_stages)}
        self.distributed_optimizer = distributed_optimizer
        self.grad_layout = BucketLayout(mesh, self.specs, config, self.overlap.bucket_bytes
                                        if self.overlap.buckets else None, shard=distributed_optimizer)
        C, V = config.n_embd, config.vocab_size
        self.linears = {}
        if WTE in self.specs:
            self.linears[WTE] = Linear3D(V, C, mesh, name="lm_head",  # tied: LM head [V, C], plain
                                         sequence_parallel=self.sequence_parallel)
        for i in self.layers:
            for part, n, k, transposed in (("attn.c_attn", 3 * C, C, False), ("attn.c_proj", C, C, True),
                                           ("mlp.c_fc", 4 * C, C, False), ("mlp.c_proj", C, 4 * C, True)):
                self.linears[f"transformer.h.{i}.{part}.weight"] = Linear3D(
                    n, k, mesh, transposed=transposed, name=f"h.{i}.{part}",
                    sequence_parallel=self.sequence_parallel)
        self.vocab_lo = mesh.coord.row * (V // mesh.shape.row)  # first token id of this row's vocab slice
        self.params: dict = {}
        self.grads: dict = {}
        self.memory: dict = {}  # bytes measured in the last forward_backward (``memory_report``)
        self.rebuilt_block: dict | None = None  # full recompute: sizes of the block caches backward rebuilds
        # collective (Dup): every rank builds its ParallelGPT together
        self._thread = coll.ProgressThread(mesh.comm) if self.overlap.threaded else None

    @contextmanager
    def _progress(self):
        """MPI progress while computing, as ``overlap.progress`` says (poll, thread, or neither)."""
        with coll.polling(self.overlap.polls):
            if self._thread is None:
                yield
            else:
                with self._thread.running():
                    yield

    def free(self) -> None:
        """Release the progress thread's communicator (the mesh is the caller's)."""
        if self._thread is not None:
            self._thread.free()
            self._thread = None

    # --- parameters in and out --------------------------------------------------------------------

    def local_pieces(self, full: dict, dtype: str | None = None, device: str | None = None) -> dict:
        """This rank's pieces of a full-shaped dict (parameters, or optimizer moments), as ``dtype``
        (default: the model's), cut where ``full`` lives and then moved to ``device`` ("host",
        "cupy", "fake"; default: stay): a GPU receives only its rank's pieces, never the whole model.
        Only the parameters of this rank's pipeline stage are kept."""
        missing = [n for n in self.specs if n not in full]
        if missing:
            raise KeyError(f"missing parameters: {missing}")
        out = {}
        for name, spec in self.specs.items():
            value = full[name]
            if tuple(value.shape) != spec.shape:
                raise ValueError(f"{name}: shape {tuple(value.shape)} != expected {spec.shape}")
            value = array_module(value).asarray(value, dtype=dtype or self.config.dtype)
            piece = local_piece(spec, value, self.mesh.shape, self.mesh.coord)
            out[name] = piece if device is None else to_device(piece, device)
        return out

    def load_params(self, full_params: dict, device: str | None = None) -> None:
        self.params = self.local_pieces(full_params, device=device)
        self.grads = {}

    @property
    def _any_param(self):
        """One of this stage's parameters: where arrays live (every stage holds some)."""
        return next(iter(self.params.values()))

    def _counted(self, name: str) -> bool:
        """Is this stage's copy the one to collect and count? (the tied wte: the first stage's)"""
        return name != WTE or self.mesh.first_stage

    def gather_full(self, local: dict, root: int | None = None):
        """Assemble full arrays (numpy) from every rank's pieces, every stage's; on ``root`` only,
        or on all."""
        r, c, d, p = self.mesh.coord
        mine = {n: to_host(local[n]) for n, s in self.specs.items()
                if p == 0 and owns(s, self.mesh.coord) and self._counted(n)}
        record = ((r, c, d), mine)
        comm = self.mesh.comm
        records = comm.allgather(record) if root is None else comm.gather(record, root=root)
        if records is None:
            return None
        pieces = {n: {} for n in self.all_specs}
        for where, named in records:
            for n, piece in named.items():
                pieces[n][where] = piece
        return {n: assemble(s, pieces[n], self.mesh.shape) for n, s in self.all_specs.items()}

    def full_params(self, root: int | None = None):
        return self.gather_full(self.params, root)

    def full_grads(self, root: int | None = None):
        if not self.distributed_optimizer:
            return self.gather_full(self.grads, root)
        whole = {n: g.copy() for n, g in self.grads.items()}  # the slices reduce-scattered to the others
        self.grad_layout.gather({n: self._owned(self.grads, n) for n in whole}, whole)
        return self.gather_full(whole, root)

    def _owned(self, pieces: dict, name: str):
        """The values of ``pieces[name]`` this rank holds summed (all, or its slice), flat: a view."""
        a, b = self.grad_layout.owned_part(name)
        return pieces[name].reshape(-1)[a:b]

    # --- training step --------------------------------------------------------------------------

    def _local_batch(self, idx, targets):
        xp = array_module(self._any_param)
        idx = xp.asarray(idx)
        if idx.ndim != 2 or idx.shape[1] > self.config.block_size:
            raise ValueError(f"idx must be (B, T) with T <= {self.config.block_size}, got {idx.shape}")
        check_divisibility(self.config, self.mesh.shape, batch_size=idx.shape[0])
        if self.sequence_parallel and idx.shape[1] % self.mesh.shape.row:
            raise ValueError(f"sequence length ({idx.shape[1]}) must be divisible by row "
                             f"({self.mesh.shape.row}) with sequence parallelism: each row rank "
                             "holds T/row positions")
        b = idx.shape[0] // (self.mesh.shape.depth * self.mesh.shape.data)
        s = slice(self.mesh.batch_shard * b, (self.mesh.batch_shard + 1) * b)
        return idx[s], (None if targets is None else xp.asarray(targets)[s])

    def _fetcher(self, uses) -> WeightFetcher:
        ov = self.overlap
        fetch = WeightFetcher(self.linears, self.params, prefetch=ov.oag, cache=ov.cache,
                              depth=self.mesh.shape.depth)
        fetch.start(uses)
        return fetch

    def _starts(self, chunk: int) -> bool:
        """Does this chunk begin the model (token and position embeddings)?"""
        return self.mesh.first_stage and chunk == 0

    def _ends(self, chunk: int) -> bool:
        """Does this chunk end the model (final LayerNorm, LM head, loss)?"""
        return self.mesh.last_stage and chunk == self.virtual_stages - 1

    def _uses(self, ops) -> list:
        """The weight uses of running ``ops`` (("F" | "B", micro-batch[, chunk]), ...) here, in order."""
        fwd_all = forward_uses(self.config)
        bwd_all = backward_uses(self.config, recompute=self.recompute == "full")
        per_chunk = [stage_uses(fwd_all, bwd_all, layers, self._starts(v), self._ends(v))
                     for v, layers in enumerate(self.chunks)]
        return [u for op, _, *rest in ops for u in per_chunk[rest[0] if rest else 0][op == "B"]]

    # one pipeline stage on one micro-batch (``stage``), and one transformer block inside it (``block``)
    stage_forward, stage_loss, stage_backward = stage.forward, stage.loss, stage.backward
    _block_forward, _block_backward = one_block.forward, one_block.backward

    def _global_loss(self, loss_sum, n_tokens):
        xp = array_module(self._any_param)
        # a 1-element array made from the (0-d, maybe device) sum: CuPy takes no list of device arrays
        total = coll.all_reduce(xp.asarray(loss_sum, dtype=accum_dtype(self.config.dtype)).reshape(1),
                                self.mesh.batch_comm)
        total = coll.all_reduce(total, self.mesh.pipe_comm)  # only the last stage has a loss
        return float(total[0]) / n_tokens

    def loss(self, idx, targets) -> float:
        """Mean cross-entropy of the global batch, forward only."""
        idx_l, tgt_l = self._local_batch(idx, targets)
        m, V = self.mesh, self.virtual_stages
        fetch = self._fetcher(self._uses([("F", 0, v) for v in range(V)]))
        loss_sum = 0.0
        with self._progress():
            for v in range(V):  # one micro-batch round the stages, once per chunk
                before, after = neighbours(m.stage, v, m.pipe, V)
                x = None if before is None else self.recv_stream(*idx_l.shape, before[0], v)
                out, _ = self.stage_forward(idx_l, fetch, x, chunk=v)
                if after is not None:
                    p2p.isend(out, m.pipe_comm, dest=after[0], tag=after[1]).wait()
        fetch.end()
        if self._ends(V - 1):
            loss_sum, _ = self.stage_loss(out, tgt_l)
        return self._global_loss(loss_sum, idx.shape[0] * idx.shape[1])

    def recv_stream(self, b: int, T: int, source: int, tag: int):
        """The residual stream (b, T, C/col), or its gradient, from stage ``source``."""
        like = self._any_param
        t = T // self.mesh.shape.row if self.sequence_parallel else T
        return p2p.recv((b, t, self.config.n_embd // self.mesh.shape.col), like.dtype, like=like,
                        comm=self.mesh.pipe_comm, source=source, tag=tag)

    def forward_backward(self, idx, targets, loss_scale: float = 1.0) -> float:
        """Mean loss of the global batch; leaves this rank's gradient pieces in ``self.grads``.

        The gradients are those of ``loss_scale`` times the loss (float16 loss scaling,
        ``gpulab.engine.training.optim.LossScaler``); the loss returned is not scaled.
        Each micro-batch's loss is summed over its tokens and scaled by 1/(B*T) of the global
        batch, so the micro-batches' gradients add up to the serial model's exactly.
        """
        idx_l, tgt_l = self._local_batch(idx, targets)
        m, n_micro = self.mesh, self.micro_batches
        check_pipeline(self.config.n_layer, m.pipe, n_micro, self.schedule, local_batch=idx_l.shape[0],
                       virtual=self.virtual_stages)
        n_tokens = idx.shape[0] * idx.shape[1]
        ops = schedule(self.schedule, m.pipe, m.stage, n_micro, self.virtual_stages)
        fetch = self._fetcher(self._uses(ops))
        sync = GradSync(self.specs, self.grad_layout, self.overlap.buckets)
        acc = GradAccumulator(sync) if n_micro > 1 else sync  # one micro-batch: straight to sync
        with self._progress():
            run = run_micro_batches(self, ops, idx_l, tgt_l, fetch, acc, loss_scale / n_tokens)
            fetch.end()
            self.memory["activations"] = run.activation_bytes
            self.memory["weight_cache"] = fetch.peak_bytes
            self.memory["working_set"] = run.working_set_bytes
            with phase("grad-sync"):
                for h in run.sends:
                    h.wait()
                if acc is not sync:
                    acc.flush(grad_order(self.config))
                if run.wte_block is not None:
                    # tied: the embedding (first stage) and the LM head (last) both add to wte
                    wte_block = coll.all_reduce(run.wte_block, m.embed_comm)
                    sync.add(WTE, self.linears[WTE].scatter_grad(wte_block, wait=not self.overlap.ors))
                self.grads = sync.finish()
                if self.sequence_parallel:
                    self._sum_over_sequence()
                loss = self._global_loss(run.loss_sum, n_tokens)
        return loss

    def _sum_over_sequence(self) -> None:
        """With SP, LayerNorm and wpe saw only this rank's positions: sum them over row, one buffer
        (sharded, the slices this rank holds: the row's ranks hold the same slices of the same layout)."""
        names = [n for n in self.specs if n == WPE or ".ln_" in n]
        if not names:
            return
        xp = array_module(self._any_param)
        parts = [self._owned(self.grads, n) for n in names]
        flat = coll.all_reduce(xp.concatenate(parts), self.mesh.row_comm)
        offset = 0
        for n, part in zip(names, parts):
            summed = flat[offset:offset + part.size]
            if self.distributed_optimizer and n in self.grad_layout.bucket_of:
                part[...] = summed  # a view of the bucket's buffer: the slice the optimizer reads
            else:
                self.grads[n] = summed.reshape(self.grads[n].shape)
            offset += part.size

    def grad_norm(self) -> float:
        """Global L2 norm of the full gradient, each value counted once across the grid."""
        xp = array_module(self._any_param)
        r, c, _, p = self.mesh.coord
        sq = 0.0
        for n, s in self.specs.items():
            # a sharded gradient's depth copies hold different slices: every member counts its own
            sharded = self.distributed_optimizer and n in self.grad_layout.bucket_of
            if self._counted(n) and owns(s, (r, c, 0, p) if sharded else self.mesh.coord):
                sq += squared_sum(self._owned(self.grads, n))
        total = coll.all_reduce(xp.asarray([sq], dtype="float64"), self.mesh.tensor_comm)
        if self.distributed_optimizer:  # the data replicas hold other slices
            total = coll.all_reduce(total, self.mesh.data_comm)
        total = coll.all_reduce(total, self.mesh.pipe_comm)  # each stage holds other parameters
        return math.sqrt(float(total[0]))

