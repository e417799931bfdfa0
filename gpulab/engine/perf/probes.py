"""The microbenchmarks ``fitted_machine.fit`` makes this computer's model from, each with its arrays where the
runs it will price keep them (``device``: host numpy, CuPy on each rank's GPU, or the fake device).

- compute: rank 0 alone (the others sleep) times matmuls of several sizes
  (t = a + FLOPs / rate), elementwise numpy steps (t = a + values / rate)
  and tiny array operations (the fixed cost of one kernel, Python's and
  numpy's dispatch included), then the engine's own serial training step
  at a few batch sizes on every rank at once, which sets how much slower
  than those rates the engine's work runs (``scale``) and its fixed cost
  per array operation (``engine_profile``), the sharing of the cores
  included: in training the ranks share the cores with each other (p ranks
  on fewer cores; a rank waiting in MPI spins) and with whatever else runs.
  ``share`` = (a compute loop on all ranks at once) / (the same loop on one
  rank alone), the best of several pairs, says how much the sharing costs
  (``perf.compare`` reads it in the matmul efficiency; the profiled scale
  already holds it);
- collectives: for each op and each group size g dividing p, the ranks form
  p/g groups that all run the collective together, each call right after a
  short compute kernel, as in training: its cost is the time it adds to the
  kernel (on shared cores that includes waiting for the peers to be
  scheduled, which back-to-back collectives never see), timed per (op, g)
  at 1 KiB .. 4 MiB. The model interpolates these points (``fitted_machine``);
  each also as its non-blocking twin started and waited for at once (key "iop/g[@s]": the
  MPI_Iallreduce, MPI_Iallgather and MPI_Ireduce_scatter_block the engine issues when it overlaps),
  because MPICH selects those algorithms apart from the blocking ones: on the emulated clusters a large
  MPI_Iallreduce over all ranks is slower than MPI_Allreduce on one placement and faster on another
  (docs/engine_model_accuracy.md);
  With ``strided`` also per stride s > 1 (members s ranks apart, key
  "op/g@s"): on a cluster of nodes these groups cross the links while the
  contiguous ones stay inside a node, and the engine's groups have strides
  (``terms.stride``);
  Other jobs share these cores in bursts and only ever add time: each number
  is the best of its repetitions, the cost without them;
- overlap efficiency, per progress mode: a 1 MiB all-reduce over all ranks
  in flight while each rank runs matmuls (MPI_Test between them for "poll",
  the progress thread for "thread"), against the two one after the other:
  eta = time saved / the shorter of the two.
"""

from __future__ import annotations

import os
import time

import numpy as np

from gpulab.backend import module_for, synchronize
from gpulab.engine.parallel import collectives as coll
from gpulab.engine.perf.rings import NONBLOCKING
from gpulab.engine.perf.timing import alone
from gpulab.lazy_mpi import lazy_mpi
from gpulab.machines.linefit import relative_line

MPI = lazy_mpi(globals())

OPS = tuple(NONBLOCKING)  # all_reduce, all_gather, reduce_scatter
TIMED_OPS = OPS + tuple(NONBLOCKING.values())  # and their non-blocking twins
SIZES = [1 << k for k in (10, 14, 16, 18, 20, 22)]  # 1 KiB .. 4 MiB


def fit_line(x, t) -> tuple[float, float]:
    """t = a + b x, least squares on relative error; a >= 0 and b > 0 (callers divide by it)."""
    a, b = relative_line(x, t)
    return max(a, 0.0), max(b, 1e-30)


def median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def compute_rates(device: str = "host") -> dict:
    """Matmul and elementwise rates and the fixed cost of one array operation, with arrays on ``device``
    (on a GPU each timing ends when the kernels have, ``backend.synchronize``)."""
    xp, rng = module_for(device), np.random.default_rng(0)
    mm = []
    for m, k, n in ((64, 64, 64), (256, 64, 192), (512, 128, 384), (1024, 128, 512), (1024, 256, 256)):
        a, b = (xp.asarray(rng.random(shape, dtype=np.float32)) for shape in ((m, k), (k, n)))
        mm.append((2.0 * m * k * n, median_time(lambda: synchronize(a @ b), 15)))  # noqa: B023
    el = []
    for n in (1 << 10, 1 << 14, 1 << 18, 1 << 20):
        x = xp.asarray(rng.random(n, dtype=np.float32))
        # 3 passes: *, +, tanh; the closure is timed at once, within this iteration
        el.append((n, median_time(lambda: synchronize(xp.tanh(x * 0.5 + x)), 15) / 3))  # noqa: B023
    tiny = xp.ones(4, dtype=np.float32)
    overhead = median_time(lambda: synchronize([tiny + tiny for _ in range(100)][-1]), 15) / 100
    _, mm_slope = fit_line([f for f, _ in mm], [t for _, t in mm])
    _, el_slope = fit_line([n for n, _ in el], [t for _, t in el])
    return {"matmul_rate": 1 / mm_slope, "elementwise_rate": 1 / el_slope, "kernel_overhead": overhead}


def engine_profile(comm, rates: dict, batches=(1, 2, 4, 8), iters: int = 5, device: str = "host") -> dict | None:
    """The engine's own serial training step, timed on every rank of ``comm`` at once, against what
    ``rates`` predict for it; the profile on rank 0, None elsewhere.

    The rates come from kernels at their best (large matmuls, contiguous arrays, one rank alone); the
    engine's step also runs small matmuls, transposes and Python between them, and an optimizer step,
    which the rates do not see, so it takes a fixed cost and about twice the rates' time per sequence
    (docs/engine_model_accuracy.md). Simulators of training profile a model's own operations on one
    device for the same reason. Here every rank runs the serial step of the kit's reference GPT
    (``timing.bench_config``) at ``batches`` sequences at the same time, as in training, where the
    ranks compute on shared cores: timed that way the step repeats closely, where rank 0's step alone
    times the kernel loop's ``share`` moves a lot from run to run. The mean over
    ranks gives a line t = a + b x sequences: ``scale`` = b / the rates' time per sequence multiplies the
    work (matmuls, elementwise), ``kernel_overhead`` = a / the step's array operations is the fixed cost
    of each; both include the sharing of the cores."""
    from gpulab.engine.perf.flops import rank_work
    from gpulab.engine.perf.timing import bench_config, measure, sleeping_barrier

    cfg, times = bench_config(), []
    for b in batches:
        sleeping_barrier(comm)  # start together; the ranks that finish first do not spin on the cores
        own = measure(MPI.COMM_SELF, cfg, (1, 1, 1, 1), b, iters=iters, warmup=3, device=device)["iter_s"]
        times.append(comm.gather(own, root=0))
        sleeping_barrier(comm)
    if comm.rank != 0:
        return None
    mean = np.array([float(np.mean(t)) for t in times])
    a, slope = np.polyfit(np.array(batches, float), mean, 1)[::-1]
    work = rank_work(cfg, (1, 1, 1, 1), 1)
    per_sequence = work["matmul_flops"] / rates["matmul_rate"] + work["elementwise"] / rates["elementwise_rate"]
    return {"scale": max(float(slope), 1e-9) / per_sequence,
            "kernel_overhead": max(float(a) / work["kernels"], rates["kernel_overhead"]),
            # how evenly the cores were shared: the slowest rank over the mean, at the largest batch
            "profile_rank_spread": float(max(times[-1]) / mean[-1])}


def work_kernel(rank: int, device: str = "host"):
    """About a millisecond of the engine's kind of work on the host: small matmuls and an elementwise
    step (on a GPU, timed to the end of its kernels)."""
    xp, rng = module_for(device), np.random.default_rng(rank)
    a, x = xp.asarray(rng.random((128, 128), dtype=np.float32)), xp.asarray(rng.random(1 << 14, dtype=np.float32))

    def work():
        for _ in range(6):
            a @ a
        synchronize(xp.tanh(x))

    return work


def per_step(comm, fn, steps: int = 20) -> float:
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    return comm.allreduce(time.perf_counter() - start, op=_mpi_max()) / steps


def share_slowdown(comm, reps: int) -> float:
    """(the kernel loop on every rank at once) / (on rank 0 alone), each the best of ``reps``
    alternated runs, so that other jobs' load bursts do not decide the ratio."""
    work = work_kernel(comm.rank)
    solo, together = [], []
    for _ in range(reps):  # alternated; the least disturbed of each (other jobs only add time)
        solo.append(comm.bcast(alone(comm, lambda: median_time(lambda: [work() for _ in range(20)], 1)),
                               root=0))
        together.append(per_step(comm, work) * 20)
    return max(1.0, min(together) / min(solo))


def group_layouts(p: int, strided: bool) -> list[tuple[int, int]]:
    """(group size g, stride s) pairs to fit on p ranks: contiguous groups always; with ``strided`` also
    groups whose members sit s > 1 ranks apart (on several nodes these are the ones that cross links)."""
    sizes = [g for g in range(2, p + 1) if p % g == 0]
    return [(g, s) for g in sizes for s in range(1, p // g + 1) if (p // g) % s == 0 and (s == 1 or strided)]


def strided_group(rank: int, size: int, stride: int) -> int:
    """The group of ``rank`` when groups of ``size`` take every ``stride``-th rank within blocks of
    size * stride ranks (stride 1: contiguous), as the engine's mesh lays out its groups."""
    return (rank // (size * stride)) * stride + rank % stride


def collective_key(op: str, size: int, stride: int) -> str:
    """FittedMachine.collectives' key: "op/g" for contiguous groups, "op/g@s" for strided ones."""
    return f"{op}/{size}" if stride == 1 else f"{op}/{size}@{stride}"


def _collective_call(op: str, x, g: int, group):
    """The call collective_costs times: ``op`` on ``x`` over ``group`` (``g`` ranks); a non-blocking
    ``op`` ("iall_reduce"...) is started and waited for at once."""
    return {"all_reduce": lambda: coll.all_reduce(x, group),
            "all_gather": lambda: coll.all_gather(x[:len(x) // g], group),
            "reduce_scatter": lambda: coll.reduce_scatter(x, group),
            "iall_reduce": lambda: coll.iall_reduce(x, group).wait(),
            "iall_gather": lambda: coll.iall_gather(x[:len(x) // g], group).wait(),
            "ireduce_scatter": lambda: coll.ireduce_scatter(x, group).wait()}[op]


def added_by(comm, call, work, reps: int) -> tuple[float, float]:
    """The time ``call`` adds to ``work`` on every rank (the fit's way: 20 steps of both against 20 of
    ``work`` alone, alternated ``reps`` times, the least disturbed of each), and how much the median
    repetition's exceeds it (relative)."""
    with_call, without = [], []
    for _ in range(reps):
        with_call.append(per_step(comm, lambda: (work(), call())))
        without.append(per_step(comm, work))
    best = max(min(with_call) - min(without), 1e-6)
    return best, max(float(np.median(with_call) - np.median(without)) / best - 1, 0.0)


def collective_costs(comm, reps: int, strided: bool = False, max_bytes: int = SIZES[-1],
                     device: str = "host") -> tuple[dict, dict]:
    """"op/g[@s]" -> [[bytes, seconds], ...] for every size up to ``max_bytes``, on every rank, and
    "op/g[@s]" -> each size's spread: how much the median repetition's cost exceeds the best one's
    (relative; 0 with one repetition), which ``trust`` reads."""
    p, out, spread, xp = comm.size, {}, {}, module_for(device)
    work = work_kernel(comm.rank, device)
    for g, s in group_layouts(p, strided):
        group = comm.Split(strided_group(comm.rank, g, s), comm.rank)
        for op in TIMED_OPS:
            points, spreads = [], []
            for nbytes in (n for n in SIZES if n <= max_bytes):
                n = nbytes // 4
                n -= n % g
                x = xp.ones(n, dtype=np.float32)
                best, over = added_by(comm, _collective_call(op, x, g, group), work, reps)
                points.append([n * 4, best])
                spreads.append(over)
            out[collective_key(op, g, s)], spread[collective_key(op, g, s)] = points, spreads
        group.Free()
    return out, spread


def overlap_times(comm, progress: str, nbytes: int = 1 << 20, reps: int = 9,
                  device: str = "host") -> tuple[float, float, float]:
    """(compute, all-reduce, the all-reduce in flight behind the compute) in seconds: 20 matmuls of 256^3
    (2048^3 on a GPU; with MPI_Test between them for "poll", the progress thread running for "thread") and an all-reduce
    of ``nbytes`` over all ranks, each the least over ``reps`` of the slowest rank."""
    xp, rng = module_for(device), np.random.default_rng(comm.rank)
    n = 2048 if device == "cupy" else 256  # milliseconds of matmuls either way
    a = xp.asarray(rng.random((n, n), dtype=np.float32))
    x = xp.ones(nbytes // 4, dtype=np.float32)
    thread = coll.ProgressThread(comm) if progress == "thread" else None

    def compute():
        for _ in range(20):
            b = a @ a
            if progress == "poll":
                coll.progress()
        synchronize(b)

    def both():
        handle = coll.iall_reduce(x, comm)
        compute()
        handle.wait()

    def timed(fn):
        best = []
        for _ in range(reps):
            comm.Barrier()
            best.append(comm.allreduce(median_time(fn, 1), op=_mpi_max()))
        return min(best)

    t_comp, t_comm = timed(compute), timed(lambda: coll.all_reduce(x, comm))
    if thread is None:
        t_both = timed(both)
    else:
        with thread.running():
            t_both = timed(both)
        thread.free()
    return t_comp, t_comm, t_both


def overlap_efficiency(comm, progress: str, reps: int = 9, device: str = "host") -> float:
    """eta: how much of a 1 MiB all-reduce over all ranks hides behind 20 matmuls of 256^3 (time saved /
    the shorter of the two), in [0, 1]: where overlapping is slower than the two one after the other,
    as on ranks that share cores, it counts as hiding nothing (benchmarks/overlap_loss.py shows the loss)."""
    t_comp, t_comm, t_both = overlap_times(comm, progress, reps=reps, device=device)
    return float(np.clip((t_comp + t_comm - t_both) / min(t_comp, t_comm), 0.0, 1.0))


def node_ranks_and_cores(comm) -> tuple[int, int]:
    """Collective: (ranks, cores) of the node whose ranks most outnumber its cores. A node is what
    ``Split_type`` finds; its cores are those its ranks may run on together (the union of their
    affinities: the whole machine, a Slurm job's cores, or an emulated node's own share)."""
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    mine = (local.Get_size(), len(set().union(*local.allgather(os.sched_getaffinity(0)))))
    local.Free()
    return max(comm.allgather(mine), key=lambda node: node[0] / node[1])


def overlap_used(measured: dict, node_ranks: int, node_cores: int) -> tuple[dict, str]:
    """The overlap efficiency the model uses per progress mode, and why, from the probe's ``measured``.
    Where a node's ranks outnumber its cores, the copies, reductions and polling of a collective in
    flight run on the cores the compute needs: overlap hides nothing, 0 for every mode. So the runs
    show, on one machine whose ranks outnumber its cores and on emulated nodes of one core each: the
    probe moves from fit to fit, overlapping costs time of its own (benchmarks/overlap_loss.py), the
    engine's iterations take as long with overlap on as off, and a probe value above 0 predicts gains
    that do not come (docs/engine_model_accuracy.md has the numbers)."""
    if node_ranks > node_cores:
        text = ", ".join(f"{mode} {eta:.2f}" for mode, eta in measured.items())
        return ({mode: 0.0 for mode in measured},
                f"0 used (measured {text}): {node_ranks} ranks share the {node_cores} "
                f"core{'s' if node_cores > 1 else ''} of a node")
    return dict(measured), ""


def _mpi_max():
    return MPI.MAX
