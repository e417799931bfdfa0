"""Rank-side checks of reduce + broadcast gradient synchronisation (run by test_reduce_bcast_training.py)."""

from __future__ import annotations

import hashlib

import numpy as np
from mpi4py import MPI

from gpulab.engine.gpt.model import loss_and_grads
from gpulab.workloads import reduce_bcast_training

# (algorithm, options) every check runs: MPI_Bcast, auto and what the tuner picks from (hierarchical
# with two emulated nodes of 2 ranks, so both its levels run on one machine)
BROADCASTS = [("mpi", {}), ("auto", {}), ("binomial", {}), ("scatter_allgather_ring", {}),
              ("chain", {"chunk_bytes": 4096}),
              ("hierarchical", {"inter": "chain", "intra": "binomial", "ranks_per_node": 2})]


def _all_equal(comm, array: np.ndarray) -> bool:
    """Is ``array`` bit-identical on every rank?"""
    digest = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()
    return len(set(comm.allgather(digest))) == 1


def check_sync_equals_allreduce(comm) -> dict:
    """Reduce + bcast of per-rank random gradients against MPI's Allreduce (the oracle).

    Integer-valued float64 gradients sum exactly, so they must match bit for bit; random float32
    ones may be summed in another order than Allreduce's, so they match to rtol 1e-6 (a few ulps
    of p terms), and every rank must hold the same bits.
    """
    rng = np.random.default_rng(comm.rank)
    results = {}
    for algorithm, options in BROADCASTS:
        exact = {"w": rng.integers(-1000, 1000, (300, 7)).astype(np.float64), "b": rng.integers(-9, 9, 5) * 1.0}
        noisy = {"w": rng.standard_normal((257, 33)).astype(np.float32), "b": rng.standard_normal(3).astype(np.float32)}
        worst = 0.0
        for grads, rtol in ((exact, 0.0), (noisy, 1e-6)):
            flat, _, _ = reduce_bcast_training.sync_gradients(grads, comm, algorithm, **options)
            local = np.concatenate([g.ravel() for g in grads.values()])
            oracle = np.empty_like(local)
            comm.Allreduce(local, oracle, op=MPI.SUM)
            assert flat.dtype == local.dtype, f"{algorithm}: {flat.dtype} instead of {local.dtype}"
            np.testing.assert_allclose(flat, oracle, rtol=rtol, atol=0, err_msg=f"{algorithm} on rank {comm.rank}")
            assert _all_equal(comm, flat), f"{algorithm}: ranks hold different sums"
            worst = max(worst, float(np.max(np.abs(flat - oracle) / np.maximum(np.abs(oracle), 1e-30))))
        results[algorithm] = worst
    return results


TINY = dict(n_layer=1, n_head=2, n_embd=16, block_size=8)


def check_training_identical(comm, steps: int = 3) -> dict:
    """Training with each broadcast gives the same parameters bit for bit, on every rank; the first
    step's synchronised gradient equals the serial model's full-batch gradient (rtol 1e-4, float32)."""
    digests = {}
    for algorithm, options in BROADCASTS:
        # barriers (timing only) must not change the result: on for one of the broadcasts
        params, records = reduce_bcast_training.train(comm, steps, algorithm, shape=TINY, barriers=algorithm == "chain",
                                             **options)
        flat = np.concatenate([p.ravel() for p in params.values()])
        assert _all_equal(comm, flat), f"{algorithm}: parameters differ between ranks"
        digests[algorithm] = hashlib.sha256(flat.tobytes()).hexdigest()
        assert len(records) == steps and all(r["bcast_s"] >= 0 for r in records)
    assert len(set(digests.values())) == 1, f"parameters differ between broadcasts: {digests}"
    return {"digest": digests["mpi"], "serial_rel_error": _first_step_against_serial(comm)}


def _first_step_against_serial(comm) -> float:
    from gpulab.engine.gpt.config import GPTConfig
    from gpulab.engine.gpt.corpus import CharTokenizer, get_batch, load_text
    from gpulab.engine.gpt.model import init_params

    text = load_text()
    tok = CharTokenizer.from_text(text)
    config = GPTConfig(vocab_size=tok.size, dtype="float32", **TINY)
    params = init_params(config, 0)
    x, y = get_batch(tok.encode(text), 4 * comm.size, TINY["block_size"], np.random.default_rng([0, 0]))
    _, shard = loss_and_grads(params, x[comm.rank::comm.size], y[comm.rank::comm.size], config)
    flat, _, _ = reduce_bcast_training.sync_gradients(shard, comm, "chain", chunk_bytes=4096)
    _, full = loss_and_grads(params, x, y, config)
    serial = np.concatenate([full[name].ravel() for name in shard])
    np.testing.assert_allclose(flat / comm.size, serial, rtol=1e-4, atol=1e-6)
    return float(np.max(np.abs(flat / comm.size - serial)) / np.max(np.abs(serial)))


def train_with(comm, algorithm: str) -> None:
    reduce_bcast_training.train(comm, 1, algorithm, shape=TINY)
