"""FittedMachine: this computer as the performance model sees it, fitted from measurements on p ranks.

    mpiexec -n 4 python -m gpulab.engine.perfmodel_fit --out results/engine_machine_p4.json
    m = load("results/engine_machine_p4.json")       # then perfmodel.predict(..., machine=m)

- compute: rank 0 alone (the others sleep) times matmuls of several sizes
  (t = a + FLOPs / rate), elementwise numpy steps (t = a + values / rate)
  and tiny array operations (the fixed cost of one kernel, Python's and
  numpy's dispatch included). In training the ranks share the cores with
  each other (p ranks on fewer cores; a rank waiting in MPI spins) and with
  whatever else runs: ``share`` = (a compute loop on all ranks at once) /
  (the same loop on one rank alone), measured (pairs taken back to
  back, the best of several), multiplies every compute time;
- collectives: for each op and each group size g dividing p, the ranks form
  p/g groups that all run the collective together, each call right after a
  short compute kernel, as in training: its cost is the time it adds to the
  kernel (on shared cores that includes waiting for the peers to be
  scheduled, which back-to-back collectives never see). t = alpha + beta n
  is fitted per (op, g) over 1 KiB .. 4 MiB (least squares, relative error).
  Other jobs share these cores in bursts: each number is the best of its
  repetitions, as the benchmarks keep their best round;
- overlap efficiency, per progress mode: a 1 MiB all-reduce over all ranks
  in flight while each rank runs matmuls (MPI_Test between them for "poll",
  the progress thread for "thread"), against the two one after the other:
  eta = time saved / the shorter of the two.

No term is tuned on engine iterations: the model's check against measured
iterations (docs/engine_perfmodel.md) is out of sample.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from gpulab.engine.bench import alone, peak_matmul

OPS = ("all_reduce", "all_gather", "reduce_scatter")
SIZES = [1 << k for k in (10, 14, 18, 20, 22)]  # 1 KiB .. 4 MiB


@dataclass(frozen=True)
class FittedMachine:
    name: str
    ranks: int  # the job size the fit ran at (its ranks share this machine's cores)
    cores: int
    collectives: dict  # "op/g" -> [alpha_s, beta_s_per_byte]
    matmul_rate: float  # FLOP/s of one rank alone
    elementwise_rate: float  # values/s of one rank alone
    kernel_overhead: float  # s per array operation
    share: float  # compute slowdown when all ranks (and whatever else runs) compute at once
    machine_peak: float  # FLOP/s of the whole machine (best matmul, all cores, one process)
    overlap: dict  # progress mode -> eta
    memory_bytes: float  # per rank
    value_bytes: int = 4  # the engine trains float32
    state_bytes_per_param: int = 16  # float32 weight, gradient, AdamW m and v
    usable_memory: float = 0.9
    host_progress: bool = True
    sources: dict = field(default_factory=dict)

    @property
    def ranks_per_node(self) -> int:
        return self.ranks

    @property
    def overlap_efficiency(self) -> float:
        return self.overlap.get("poll", 0.0)

    def overlap_efficiency_for(self, progress: str) -> float:
        return self.overlap.get(progress, 0.0)

    @property
    def peak(self) -> float:
        """Per-rank share of the machine's peak (the ranks share the cores)."""
        return self.machine_peak / self.ranks

    def collective_s(self, op: str, size: int, stride: int, nbytes: float) -> float:
        if size <= 1:
            return 0.0
        key = f"{op}/{size}"
        if key not in self.collectives:  # a size not fitted (another job size): the nearest one
            sizes = sorted(int(k.split("/")[1]) for k in self.collectives if k.startswith(op + "/"))
            key = f"{op}/{min(sizes, key=lambda s: abs(np.log2(s / size)))}"
        alpha, beta = self.collectives[key]
        return alpha + beta * nbytes

    def compute_s(self, work: dict) -> float:
        return self.share * (work["matmul_flops"] / self.matmul_rate
                             + work["elementwise"] / self.elementwise_rate
                             + work["kernels"] * self.kernel_overhead)

    def assumptions(self) -> list[str]:
        return [f"{k}: {v}" for k, v in self.sources.items()]

    @classmethod
    def mean(cls, fits: list["FittedMachine"]) -> "FittedMachine":
        """The average of fits of one machine (e.g. before and after a benchmark, as the load moves)."""
        first, n = fits[0], len(fits)
        avg = {k: sum(getattr(f, k) for f in fits) / n
               for k in ("matmul_rate", "elementwise_rate", "kernel_overhead", "share", "machine_peak")}
        coll = {k: [sum(f.collectives[k][i] for f in fits) / n for i in (0, 1)] for k in first.collectives}
        overlap = {k: sum(f.overlap[k] for f in fits) / n for k in first.overlap}
        return cls(**{**asdict(first), **avg, "collectives": coll, "overlap": overlap,
                      "sources": {**first.sources, "measured": " | ".join(f.sources["measured"] for f in fits),
                                  "averaged": f"mean of {n} fits"}})

    def save(self, path) -> None:
        with open(path, "w") as f:
            json.dump(asdict(self), f, indent=1)


def load(path) -> FittedMachine:
    with open(path) as f:
        return FittedMachine(**json.load(f))


def _fit_line(x, t) -> tuple[float, float]:
    """t = a + b x, least squares on relative error; a, b >= 0."""
    x, t = np.asarray(x, float), np.asarray(t, float)
    A = np.stack([np.ones_like(x), x], axis=1) / t[:, None]
    (a, b), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    return max(float(a), 0.0), max(float(b), 1e-30)


def _median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _compute_fit() -> dict:
    rng = np.random.default_rng(0)
    mm = []
    for m, k, n in ((64, 64, 64), (256, 64, 192), (512, 128, 384), (1024, 128, 512), (1024, 256, 256)):
        a, b = rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)
        mm.append((2.0 * m * k * n, _median_time(lambda: a @ b, 15)))
    el = []
    for n in (1 << 10, 1 << 14, 1 << 18, 1 << 20):
        x = rng.random(n, dtype=np.float32)
        el.append((n, _median_time(lambda: np.tanh(x * 0.5 + x), 15) / 3))  # 3 passes: *, +, tanh
    tiny = np.ones(4, dtype=np.float32)
    overhead = _median_time(lambda: [tiny + tiny for _ in range(100)], 15) / 100
    _, mm_slope = _fit_line([f for f, _ in mm], [t for _, t in mm])
    _, el_slope = _fit_line([n for n, _ in el], [t for _, t in el])
    return {"matmul_rate": 1 / mm_slope, "elementwise_rate": 1 / el_slope, "kernel_overhead": overhead}


def _kernel(rank: int):
    """About a millisecond of the engine's kind of work: small matmuls and an elementwise step."""
    rng = np.random.default_rng(rank)
    a, x = rng.random((128, 128), dtype=np.float32), rng.random(1 << 14, dtype=np.float32)

    def work():
        for _ in range(6):
            a @ a
        np.tanh(x)

    return work


def _per_step(comm, fn, steps: int = 20) -> float:
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    return comm.allreduce(time.perf_counter() - start, op=_mpi_max()) / steps


def _share(comm, reps: int) -> float:
    """(the kernel loop on every rank at once) / (on rank 0 alone), each the best of ``reps``
    alternated runs, so that other jobs' load bursts do not decide the ratio."""
    work = _kernel(comm.rank)
    solo, together = [], []
    for _ in range(reps):  # alternated; the least disturbed of each (other jobs only add time)
        solo.append(comm.bcast(alone(comm, lambda: _median_time(lambda: [work() for _ in range(20)], 1)),
                               root=0))
        together.append(_per_step(comm, work) * 20)
    return max(1.0, min(together) / min(solo))


def _collective_fit(comm, reps: int) -> dict:
    from gpulab.engine import collectives as coll

    p, out = comm.size, {}
    work = _kernel(comm.rank)
    for g in (g for g in range(2, p + 1) if p % g == 0):
        group = comm.Split(comm.rank // g, comm.rank)
        for op in OPS:
            points = []
            for nbytes in SIZES:
                n = nbytes // 4
                n -= n % g
                x = np.ones(n, dtype=np.float32)
                call = {"all_reduce": lambda: coll.all_reduce(x, group),
                        "all_gather": lambda: coll.all_gather(x[:n // g], group),
                        "reduce_scatter": lambda: coll.reduce_scatter(x, group)}[op]
                with_call, without = [], []
                for _ in range(reps):  # alternated; the least disturbed of each
                    with_call.append(_per_step(comm, lambda: (work(), call())))
                    without.append(_per_step(comm, work))
                points.append((n * 4, max(min(with_call) - min(without), 1e-6)))
            out[f"{op}/{g}"] = list(_fit_line(*zip(*points)))
        group.Free()
    return out


def _overlap_fit(comm, progress: str, reps: int = 9) -> float:
    """eta: how much of a 1 MiB all-reduce over all ranks hides behind 20 matmuls of 256^3."""
    from gpulab.engine import collectives as coll

    rng = np.random.default_rng(comm.rank)
    a = rng.random((256, 256), dtype=np.float32)
    x = np.ones(1 << 18, dtype=np.float32)
    thread = coll.ProgressThread(comm) if progress == "thread" else None

    def compute():
        for _ in range(20):
            a @ a
            if progress == "poll":
                coll.progress()

    def both():
        handle = coll.iall_reduce(x, comm)
        compute()
        handle.wait()

    def timed(fn):
        best = []
        for _ in range(reps):
            comm.Barrier()
            best.append(comm.allreduce(_median_time(fn, 1), op=_mpi_max()))
        return min(best)

    t_comp, t_comm = timed(compute), timed(lambda: coll.all_reduce(x, comm))
    if thread is None:
        t_both = timed(both)
    else:
        with thread.running():
            t_both = timed(both)
        thread.free()
    return float(np.clip((t_comp + t_comm - t_both) / min(t_comp, t_comm), 0.0, 1.0))


def _mpi_max():
    from mpi4py import MPI

    return MPI.MAX


def fit(comm, reps: int = 5, name: str | None = None) -> FittedMachine | None:
    """Measure and fit on every rank of ``comm``; the machine on rank 0 (None elsewhere)."""

    from threadpoolctl import threadpool_limits

    compute = comm.bcast(alone(comm, _compute_fit), root=0)
    compute["share"] = _share(comm, reps)
    collectives = _collective_fit(comm, reps)
    overlap = {mode: _overlap_fit(comm, mode) for mode in ("poll", "thread")}
    overlap["none"] = 0.0  # by definition: nothing moves while the host computes
    with threadpool_limits(os.cpu_count() or 1):  # the whole machine, one process
        peak = alone(comm, lambda: peak_matmul(512, repeats=15))
    if comm.rank != 0:
        return None
    cores = os.cpu_count() or 1
    total_memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    load = os.getloadavg()[0]
    return FittedMachine(
        name=name or f"this machine, {comm.size} ranks", ranks=comm.size, cores=cores,
        collectives=collectives, machine_peak=peak, overlap=overlap,
        memory_bytes=total_memory / comm.size, **compute,
        sources={"measured": f"{time.strftime('%Y-%m-%d %H:%M')} on {comm.size} ranks, {cores} cores, "
                             f"load average {load:.1f} at the end",
                 "compute": "matmul/elementwise/tiny-op timings on rank 0 alone, times the measured share",
                 "collectives": "time each call adds after a ~1 ms kernel, all groups at once, 1 KiB..4 MiB",
                 "overlap": "1 MiB all-reduce behind 20 matmuls of 256^3, per progress mode",
                 "memory_bytes": "physical memory / ranks"})


def main(argv=None) -> None:
    from mpi4py import MPI
    from threadpoolctl import threadpool_limits

    parser = argparse.ArgumentParser(description="fit this machine for gpulab.engine.perfmodel (under mpiexec)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    comm = MPI.COMM_WORLD
    local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
    threadpool_limits(max(1, (os.cpu_count() or 1) // local))  # as gpulab train and the bench do
    machine = fit(comm, args.reps)
    if machine is not None:
        machine.save(args.out)
        print(json.dumps({k: v for k, v in asdict(machine).items() if k != "collectives"}, indent=1))


if __name__ == "__main__":
    main()
