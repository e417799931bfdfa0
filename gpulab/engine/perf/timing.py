"""Measure training iterations of ``ParallelGPT`` on a grid: time, timeline summary, throughput, MFU.

Inside an MPI job (every rank calls it; rank 0 gets the result, others None)::

    row = measure(comm, cfg, (2, 1, 2, 1), batch_size=16, overlap=Overlap.everything(), iters=5)
    row["iter_s"], row["tokens_per_s"], row["mfu"], row["summary"], row["memory"]

From the shell (one mpiexec job, every shape and overlap setting in turn)::

    gpulab bench engine -n 4 --shapes all --overlap "none;all" --out rows.json

An iteration is what ``gpulab train`` does per step: forward_backward, the
global gradient norm, clipping, an AdamW step. Ranks start each iteration
together (a barrier); its time is the slowest rank's, and the reported time
is the median over ``iters`` timed iterations after ``warmup`` untimed ones.
``--rounds`` repeats the whole sweep, interleaved, and ``over_rounds`` makes
one row of a setting's rounds: the median over rounds with its 95% interval.
The interval comes from rounds, not iterations: a round's iterations follow
each other and share whatever else the machine was doing then.
The timeline summary (``timeline.summarize``) is the mean over ranks of the
median iteration. MFU divides the model FLOPs per second (``flops``) by the
measured peak of the machine (``peak_matmul``), if given.
"""

from __future__ import annotations

import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from gpulab.backend import module_for, synchronize
from gpulab.engine.gpt.config import GPTConfig
from gpulab.engine.gpt.model import init_params
from gpulab.engine.parallel import collectives, timeline
from gpulab.engine.parallel.gpt import ParallelGPT
from gpulab.engine.parallel.memory import memory_report
from gpulab.engine.parallel.mesh import Mesh
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.perf.flops import model_flops
from gpulab.engine.training.optim import AdamW, train_step
from gpulab.lazy_mpi import lazy_mpi
from gpulab.stats import median_interval

MPI = lazy_mpi(globals())


def peak_matmul(n: int | None = None, dtype: str = "float32", repeats: int = 5, device: str = "host") -> float:
    """FLOP/s of the best of ``repeats`` n x n matmuls on ``device``: the denominator of MFU.

    On the host with the BLAS threads this process has; numpy has no BLAS for
    float16 and its own loop runs on one thread, so there one matmul per core
    runs at once (numpy lets go of the GIL). On a GPU, timed to the end of the
    kernel. Default n: 512 on the host (256 in float16), 8192 on a GPU.
    """
    n = n or (8192 if device == "cupy" else 256 if dtype == "float16" else 512)
    xp = module_for(device)
    rng = np.random.default_rng(0)
    a, b = (xp.asarray(rng.random((n, n)).astype(dtype)) for _ in range(2))
    threads = (os.cpu_count() or 1) if device != "cupy" and dtype == "float16" else 1

    def matmul():
        if threads == 1:
            synchronize(a @ b)
        else:
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(lambda _: a @ b, range(threads)))

    matmul()  # warm up (thread pool, caches, cuBLAS's choice of kernel)
    best = min(_timed(matmul) for _ in range(repeats))
    return 2.0 * n ** 3 * threads / best


def alone(comm, fn):
    """Run fn on rank 0 while the other ranks sleep (MPI ranks waiting in a barrier would spin on the
    cores fn is timed on); fn's result on rank 0, None elsewhere."""
    result = fn() if comm.rank == 0 else None
    sleeping_barrier(comm)
    return result


def sleeping_barrier(comm) -> None:
    """A barrier whose waiting ranks sleep between tests instead of spinning on the cores."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(1e-3)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _iteration(gpt, opt, batch, clip: float = 1.0) -> None:
    train_step(gpt, opt, batch, max_norm=clip)


def measure(comm, config, shape, batch_size: int, overlap=None, *, seq_len: int | None = None,
            iters: int = 5, warmup: int = 2, peak_flops: float | None = None, seed: int = 0,
            keep_events: bool = False, device: str = "host", pipe: int = 1, micro_batches: int | None = None,
            schedule: str = "1f1b", virtual_stages: int = 1):
    """Time ``iters`` iterations on grid ``shape`` (one stage's, ``pipe`` stages, ``virtual_stages`` model
    chunks each with the interleaved ``schedule``) with arrays on ``device``;
    the result dict on rank 0, None elsewhere. An iteration ends with a synchronizing read (the gradient
    norm), so GPU work is timed. ``bytes_by_group``: the buffers each group's calls worked on in the median
    iteration (``collectives.trace``, full buffers), per rank, mean over ranks; ``wire_by_group``: the bytes
    each rank sent in them (the trace's ``sent_bytes``), mean over ranks."""
    overlap = overlap or Overlap()
    T = seq_len or config.block_size
    mesh = Mesh(*shape, comm=comm, pipe=pipe)
    gpt = ParallelGPT(config, mesh, overlap=overlap, micro_batches=micro_batches, schedule=schedule,
                      virtual_stages=virtual_stages)
    gpt.load_params(init_params(config, seed=seed), device=device)
    opt = AdamW(gpt.params, lr=1e-4)
    rng = np.random.default_rng(seed)
    batch = (rng.integers(0, config.vocab_size, (batch_size, T)),
             rng.integers(0, config.vocab_size, (batch_size, T)))
    for _ in range(warmup):
        _iteration(gpt, opt, batch)
    times, summaries, events, traced = [], [], [], []
    for _ in range(iters):
        comm.Barrier()
        with timeline.record() as tl, collectives.trace() as calls:
            start = time.perf_counter()
            _iteration(gpt, opt, batch)
            end = time.perf_counter()
        times.append(comm.allreduce(end - start, op=_max()))
        summaries.append(timeline.summarize(tl.events, start, end))
        events.append(tl)
        traced.append(calls)
    median = sorted(range(iters), key=lambda i: times[i])[iters // 2]
    gathered = comm.gather(summaries[median], root=0)
    group_bytes = comm.gather(_bytes_by_group(traced[median]), root=0)
    group_wire = comm.gather(_bytes_by_group(traced[median], "sent_bytes"), root=0)
    memories = comm.gather(memory_report(gpt), root=0)
    timelines = timeline.gather(events[median], comm, root=0) if keep_events else None
    gpt.free()
    mesh.free()
    if comm.rank != 0:
        return None
    groups = sorted({g for b in group_bytes for g in b})
    row = {"shape": list(shape), "pipe": pipe, "micro_batches": gpt.micro_batches, "schedule": schedule,
           "virtual_stages": virtual_stages,
           "world": comm.size, "device": device, "overlap": overlap.to_dict(),
           "overlap_label": overlap.label(), "config": config.to_dict(), "batch_size": batch_size,
           "seq_len": T, "iters": iters, "iter_s_all": times, "model_flops": model_flops(config, batch_size, T),
           "peak_flops": peak_flops, "summary": timeline.mean_summary(gathered), "per_rank": gathered,
           "memory": {k: max(m[k] for m in memories) for k in memories[0]},
           "bytes_by_group": {g: sum(b.get(g, 0) for b in group_bytes) / comm.size for g in groups},
           "wire_by_group": {g: sum(b.get(g, 0) for b in group_wire) / comm.size for g in groups}}
    row.update(_rates(row, statistics.median(times)))
    if keep_events:
        row["events"] = timelines
    return row


def _rates(row: dict, iter_s: float) -> dict:
    """The iteration time and what follows from it: tokens and model FLOPs per second, MFU."""
    flops_per_s = row["model_flops"] / iter_s
    return {"iter_s": iter_s, "tokens_per_s": row["batch_size"] * row["seq_len"] / iter_s, "flops_per_s": flops_per_s,
            "mfu": flops_per_s / row["peak_flops"] if row["peak_flops"] else None}


def over_rounds(rounds: list[dict]) -> dict:
    """One setting from its rounds (``measure`` rows): ``iter_s`` is the median over rounds of each round's
    median iteration, with the rates that follow from it; ``iter_s_rounds`` keeps every round's and
    ``iter_s_interval`` the median's 95% interval (``gpulab.stats``); the timeline summary, memory, traffic
    and events are the median round's (the lower of the middle two with an even count)."""
    times = [r["iter_s"] for r in rounds]
    interval = median_interval(times)
    middle = sorted(rounds, key=lambda r: r["iter_s"])[(len(rounds) - 1) // 2]
    return {**middle, **_rates(middle, interval.median), "rounds": len(rounds), "iter_s_rounds": times,
            "iter_s_interval": interval.to_dict()}


def _bytes_by_group(calls, key: str = "nbytes") -> dict:
    """Per group, the calls' buffer sizes (``nbytes``) or the bytes this rank sent (``sent_bytes``)."""
    out = {}
    for call in calls:
        out[call["group"]] = out.get(call["group"], 0) + call[key]
    return out


def _max():
    return MPI.MAX


def bench_config(dtype: str = "float32"):
    """The model of the recorded benchmarks: every grid shape of up to 8 ranks can split it."""

    return GPTConfig(vocab_size=128, block_size=64, n_layer=2, n_head=8, n_embd=128, dtype=dtype)
