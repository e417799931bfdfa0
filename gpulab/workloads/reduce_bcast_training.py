"""Data-parallel training whose gradient synchronisation is a reduce followed by a broadcast.

This is how the CNTK set-up measured by the broadcast paper (Awan et al. 2018)
synchronised gradients: the summed gradient is reduced to one root and
broadcast back, so a better broadcast shortens every iteration. Every rank
holds the full serial GPT (``gpulab.engine.gpt.model``) and computes the loss
and gradient of its own shard of the global batch; the gradients are packed
into ONE flat buffer, ``comm.Reduce``d to the root and broadcast with
gpulab's ``bcast`` (``algorithm="mpi"`` is MPI_Bcast itself). One flat buffer
rather than CNTK's per-layer buffers: one message of a few MB is where the
broadcast algorithm matters, and per-layer messages on an emulated link would
measure Python's per-call overhead more than the broadcast. The cost model's
price of the same synchronisation at scale is ``gpulab.workloads.gradient_sync``.

    from gpulab.workloads.reduce_bcast_training import train
    params, steps = train(comm, steps=5, algorithm="mpi")   # steps: [{"loss", "compute_s", "reduce_s", "bcast_s"}]
"""

from __future__ import annotations

import time

import numpy as np

from gpulab.bcast import bcast
from gpulab.engine.gpt.config import GPTConfig
from gpulab.engine.gpt.corpus import CharTokenizer, get_batch, load_text
from gpulab.engine.gpt.model import init_params, loss_and_grads
from gpulab.engine.training.optim import AdamW
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())

ROOT = 0
# ~0.8 M float32 parameters = 3.2 MB of gradient: a few link transfers' worth at 100 Mbit/s
DEFAULT_SHAPE = dict(n_layer=4, n_head=4, n_embd=128, block_size=32)


def sync_gradients(grads: dict, comm, algorithm: str = "mpi", barriers: bool = False,
                   **options) -> tuple[np.ndarray, float, float]:
    """Sum ``grads`` over ``comm`` by Reduce to rank 0 then broadcast; return (flat sum, reduce s, bcast s).

    Every rank gets the same flat buffer (arrays in ``grads``' order);
    ``unflatten`` turns it back into named arrays. ``barriers`` separates the
    phases for timing: without them a leaf of the reduce returns early and its
    broadcast time includes waiting for the root's reduce to finish.
    """
    send = np.concatenate([g.ravel() for g in grads.values()])
    out = np.empty_like(send)
    if barriers:
        comm.Barrier()
    t0 = time.perf_counter()
    comm.Reduce(send, out if comm.rank == ROOT else None, op=MPI.SUM, root=ROOT)
    if barriers:
        comm.Barrier()
    t1 = time.perf_counter()
    bcast(out, ROOT, comm, algorithm, **options)
    return out, t1 - t0, time.perf_counter() - t1


def unflatten(flat: np.ndarray, like: dict) -> dict:
    """Named views into ``flat`` with the shapes of ``like``."""
    views, at = {}, 0
    for name, p in like.items():
        views[name] = flat[at:at + p.size].reshape(p.shape)
        at += p.size
    return views


def train(comm, steps: int, algorithm: str = "mpi", batch_size: int | None = None, seed: int = 0,
          lr: float = 1e-3, shape: dict | None = None, barriers: bool = False, **options) -> tuple[dict, list[dict]]:
    """``steps`` AdamW steps of data-parallel training; return (final parameters, per-step records).

    The global batch (``batch_size``, default 4 sequences per rank) is the same
    on every rank (seeded by step); rank r computes sequences r, r + p, ... so
    every rank does the same work. The loss is averaged over the global batch,
    so the reduced sum is divided by the number of sequences. ``barriers``: see
    ``sync_gradients`` (the compute time then includes waiting for the slowest rank).
    """
    p = comm.size
    batch_size = 4 * p if batch_size is None else batch_size
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if batch_size < p or batch_size % p:
        raise ValueError(f"batch_size ({batch_size}) must be a positive multiple of the {p} ranks")
    text = load_text()
    tok = CharTokenizer.from_text(text)
    ids = tok.encode(text)
    config = GPTConfig(vocab_size=tok.size, dtype="float32", **{**DEFAULT_SHAPE, **(shape or {})})
    params = init_params(config, seed)
    opt = AdamW(params, lr=lr)
    records = []
    for step in range(steps):
        x, y = get_batch(ids, batch_size, config.block_size, np.random.default_rng([seed, step]))
        t0 = time.perf_counter()
        loss, grads = loss_and_grads(params, x[comm.rank::p], y[comm.rank::p], config)
        compute = time.perf_counter() - t0
        flat, reduce_s, bcast_s = sync_gradients(grads, comm, algorithm, barriers, **options)
        flat *= np.float32(1 / p)  # each shard's loss is a mean over its batch_size / p sequences
        opt.step(unflatten(flat, grads))
        records.append({"loss": float(loss), "compute_s": compute, "reduce_s": reduce_s, "bcast_s": bcast_s})
    return params, records

