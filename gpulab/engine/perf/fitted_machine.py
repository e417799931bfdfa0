"""FittedMachine: this computer as the performance model sees it, fitted from measurements on p ranks.

    gpulab model fit -n 4 --out results/engine_machine_p4.json
    m = machine("results/engine_machine_p4.json")    # gpulab.engine.perf.machines; then predict(..., machine=m)

Compute rates (rank 0 alone), the slowdown when all ranks compute at once,
the cost of each collective per group size, and the overlap efficiency per
progress mode: how each is measured is in ``gpulab.engine.perf.probes``.
One term only is measured on the engine's parallel iterations (on one node and on several): the
ranks' wait at a row, col or data-parallel all-reduce, each calibrated on its own grid
(``perf.calibration``) that the model's check against measured iterations
(docs/engine_model_accuracy.md) then leaves out;
every other grid stays out of sample.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from gpulab.backend import gpu_of_this_rank, module_for
from gpulab.engine.perf.calibration import measure_grids, waits
from gpulab.engine.perf.probes import (
    collective_costs,
    collective_key,
    compute_rates,
    engine_profile,
    fit_line,
    node_ranks_and_cores,
    overlap_efficiency,
    overlap_used,
    share_slowdown,
)
from gpulab.engine.perf.rings import BLOCKING_OF
from gpulab.engine.perf.timing import alone, peak_matmul
from gpulab.engine.perf.trust import combine, conditions, cpu_ticks, fit_to_fit, stolen, verdict
from gpulab.machines import Description, LinkLevel


@dataclass(frozen=True)
class FittedMachine:
    name: str
    ranks: int  # the job size the fit ran at (its ranks share this machine's cores)
    cores: int
    collectives: dict  # "op/g" -> [alpha_s, beta_s_per_byte], the line through collective_points
    matmul_rate: float  # FLOP/s of one rank alone
    elementwise_rate: float  # values/s of one rank alone
    kernel_overhead: float  # s per array operation, every rank computing at once
    share: float  # compute slowdown when all ranks (and whatever else runs) compute at once
    machine_peak: float  # FLOP/s of the whole machine (best matmul, all cores, one process)
    overlap: dict  # progress mode -> eta
    memory_bytes: float  # per rank
    value_bytes: int = 4  # the engine trains float32
    state_bytes_per_param: int = 16  # float32 weight, gradient, AdamW m and v
    usable_memory: float = 0.9
    sources: dict = field(default_factory=dict)
    # "op/g" -> [[bytes, s], ...] as timed; an op/g without points is priced by its line
    collective_points: dict = field(default_factory=dict)
    # how far to trust it (``perf.trust``): its timings' spread, the load they saw; {}: nothing known
    trust: dict = field(default_factory=dict)
    # how much slower than the rates the engine's work runs (``probes.engine_profile``), every rank computing at
    # once: the sharing of the cores included, so ``share`` does not multiply the compute again
    scale: float = 1.0
    # the overlap probe's efficiency per progress mode, as probed, ahead of ``probes.overlap_used``; {}: not kept
    overlap_probe: dict = field(default_factory=dict)
    # the node whose ranks most outnumber its cores (``probes.node_ranks_and_cores``): overlap hides
    # nothing where node_ranks > node_cores (``probes.overlap_used``); 0: not known
    node_ranks: int = 0
    node_cores: int = 0
    # where the arrays lived while it was measured ("host", "cupy", "fake"): it prices runs on that device
    device: str = "host"
    # s each col all-reduce over all ranks waits in training beyond its timed cost, calibrated on one
    # measured grid (``perf.calibration``); 0: not calibrated
    call_wait: float = 0.0
    # the same for a row all-reduce, and for the data group's gradient all-reduce (once an iteration),
    # each calibrated on its own grid
    row_wait: float = 0.0
    data_wait: float = 0.0

    def __post_init__(self):
        # The ops it timed, found once: collective_s asks on every call of a grid search's every row.
        object.__setattr__(self, "_timed_ops", frozenset(k.split("/")[0] for k in self.collectives))

    @property
    def ranks_per_node(self) -> int:
        return self.ranks

    @property
    def overlap_efficiency(self) -> float:
        return self.overlap.get("poll", 0.0)

    def overlap_efficiency_for(self, progress: str) -> float:
        return self.overlap.get(progress, 0.0)

    @property
    def inter(self):
        """The link between pipeline stages (``perf.pipeline.p2p_s``): a send of n bytes costs what a 2-rank
        all-gather of 2n bytes does here (one message each way)."""
        alpha, beta = self.collectives["all_gather/2"]
        return LinkLevel(alpha, 2 * beta)

    @property
    def matmul_efficiency(self) -> float:
        """The measured matmul rate of one rank against its share of the peak (``perf.compare``'s MFU/matmul)."""
        return self.matmul_rate / self.share / self.peak

    @property
    def peak(self) -> float:
        """Per-rank share of the machine's peak (the ranks share the cores)."""
        return self.machine_peak / self.ranks

    def collective_s(self, op: str, size: int, stride: int, nbytes: float) -> float:
        """One call of ``op`` ("all_reduce", or its non-blocking twin "iall_reduce"...) over ``size`` ranks
        ``stride`` apart on a buffer of ``nbytes``; a fit that timed no non-blocking twin prices it as the
        blocking call."""
        if size <= 1:
            return 0.0
        if op not in self._timed_ops and op in BLOCKING_OF:
            op = BLOCKING_OF[op]
        key = collective_key(op, size, stride)
        if key not in self.collectives:  # strides not fitted: as contiguous (the cost of one node)
            key = f"{op}/{size}"
        if key not in self.collectives:  # a size not fitted (another job size): the nearest one
            sizes = sorted(int(k.split("/")[1]) for k in self.collectives if k.startswith(op + "/") and "@" not in k)
            key = f"{op}/{min(sizes, key=lambda s: abs(np.log2(s / size)))}"
        alpha, beta = self.collectives[key]
        if key not in self.collective_points:
            return alpha + beta * nbytes
        # Between timed sizes: straight lines; past the largest, its last segment's slope. One line through
        # every size (fitted on relative error) cannot follow both regimes of a slow link: messages below
        # its burst and the sockets' buffers pass faster than the link's rate, and the line then comes out
        # faster than the link for the large ones (docs/emulated_engine.md).
        x, t = (np.array(v, float) for v in zip(*self.collective_points[key]))
        # More bytes never cost less: a point above a larger size's is a rank descheduled while it was
        # timed (where ranks outnumber cores a small all-gather can time several times a larger one), so
        # each point is held to the least at its size or above (its effect on the recorded runs:
        # docs/engine_model_accuracy.md).
        t = np.minimum.accumulate(t[::-1])[::-1]
        if nbytes <= x[-1] or len(x) < 2:
            return float(np.interp(nbytes, np.r_[0.0, x], np.r_[alpha, t]))
        return float(t[-1] + (nbytes - x[-1]) * max(t[-1] - t[-2], 0.0) / (x[-1] - x[-2]))

    def compute_s(self, work: dict) -> float:
        return (self.scale * (work["matmul_flops"] / self.matmul_rate + work["elementwise"] / self.elementwise_rate)
                + work["kernels"] * self.kernel_overhead)

    def assumptions(self) -> list[str]:
        return [f"{k}: {v}" for k, v in self.sources.items()] + self.trust_lines()

    def trust_lines(self) -> list[str]:
        """Whether the fit's own signs (``perf.trust``) say its predictions can be far off, and each sign."""
        ok, lines = verdict(self.trust)
        head = {True: "trust: nothing says otherwise", False: "trust: LOW, the predictions may be far off",
                None: "trust: unknown"}[ok]
        return [head] + [f"  {line}" for line in lines]

    @classmethod
    def mean(cls, fits: list[FittedMachine]) -> FittedMachine:
        """The average of fits of one machine (e.g. before and after a benchmark, as the load moves)."""
        first, n = fits[0], len(fits)
        avg = {k: sum(getattr(f, k) for f in fits) / n
               for k in ("matmul_rate", "elementwise_rate", "kernel_overhead", "share", "machine_peak", "scale",
                         "call_wait", "row_wait", "data_wait")}
        coll = {k: [sum(f.collectives[k][i] for f in fits) / n for i in (0, 1)] for k in first.collectives}
        points = {k: [[x, sum(f.collective_points[k][i][1] for f in fits) / n] for i, (x, _) in enumerate(v)]
                  for k, v in first.collective_points.items()}
        overlap = {k: sum(f.overlap[k] for f in fits) / n for k in first.overlap}
        probe = {k: sum(f.overlap_probe[k] for f in fits) / n for k in first.overlap_probe}
        trust = combine([f.trust for f in fits], fit_to_fit([f.collective_points for f in fits]))
        return cls(**{**asdict(first), **avg, "collectives": coll, "collective_points": points, "overlap": overlap,
                      "overlap_probe": probe, "trust": trust,
                      "sources": {**first.sources, **{k: " | ".join(f.sources.get(k, "-") for f in fits)
                                                      for k in ("measured", "call_wait") if k in first.sources},
                                  "averaged": f"mean of {n} fits"}})

    def describe(self) -> Description:
        """The machine file's description (``gpulab.machines``): its probes, and what they ran on."""
        fields = asdict(self)
        return Description(fields.pop("name"), cores=fields.pop("cores"), fitted_ranks=fields.pop("ranks"),
                           sources=fields.pop("sources"), probes=fields)

    @classmethod
    def from_description(cls, d: Description) -> FittedMachine:
        if d.probes is None:
            raise ValueError(f"machine {d.name!r} holds no engine fit (`gpulab model fit` writes one)")
        return cls(name=d.name, ranks=d.fitted_ranks, cores=d.cores, sources=d.sources, **d.probes)

    def save(self, path) -> None:
        with open(path, "w") as f:
            json.dump(self.describe().to_dict(), f, indent=1)

    @classmethod
    def from_dict(cls, d: dict) -> FittedMachine:
        """The machine an engine sent back as its fields (``asdict``); a file: ``gpulab.engine.perf.machines``."""
        return cls(**d)


def memory_per_rank(comm, device: str) -> tuple[float, str]:
    """Collective: the memory one rank may use, and how it was found. On a GPU its device's memory over
    the ranks that share that device; elsewhere its node's physical memory over the node's ranks."""
    if device == "cupy":
        mine = gpu_of_this_rank()
        sharing = comm.allgather(mine).count(mine)
        return module_for("cupy").cuda.runtime.memGetInfo()[1] / sharing, "GPU memory / ranks sharing the GPU"
    mine = socket.gethostname()
    sharing = comm.allgather(mine).count(mine)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / sharing, "the node's memory / its ranks"


def fit(comm, reps: int = 5, name: str | None = None, strided: bool = False,
        max_bytes: int = 4 << 20, device: str = "host") -> FittedMachine | None:
    """Measure and fit on every rank of ``comm``; the machine on rank 0 (None elsewhere). ``strided``:
    fit every group stride too (``probes.collective_costs``), for ranks on several nodes; ``max_bytes``:
    the largest collective timed (smaller on slow links, where 4 MiB takes seconds per call); ``device``:
    where the arrays live ("cupy": each rank's GPU, pinned before, as ``gpulab.launch.pin_gpu`` does),
    as in the runs the machine will price: the compute rates, the engine's step and the collectives
    (staged through host memory unless the MPI is CUDA-aware) are all timed on it."""

    # deferred: every gpulab command imports this module (gpulab model) to build its parser
    from threadpoolctl import threadpool_limits

    ticks = cpu_ticks()
    compute = comm.bcast(alone(comm, lambda: compute_rates(device)), root=0)
    compute.update(comm.bcast(engine_profile(comm, compute, device=device), root=0))
    profile_spread = compute.pop("profile_rank_spread")
    node_ranks, node_cores = node_ranks_and_cores(comm)
    calibration = [measure_grids(comm, device)]
    compute["share"] = share_slowdown(comm, reps)
    points, spreads = collective_costs(comm, reps, strided=strided, max_bytes=max_bytes, device=device)
    measured = {mode: overlap_efficiency(comm, mode, device=device) for mode in ("poll", "thread")}
    overlap, overlap_note = overlap_used(measured, node_ranks, node_cores)
    overlap["none"] = 0.0  # by definition: nothing moves while the host computes
    with threadpool_limits(os.cpu_count() or 1):  # the whole machine, one process
        peak = alone(comm, lambda: peak_matmul(None if device == "cupy" else 512, repeats=15, device=device))
    memory, memory_source = memory_per_rank(comm, device)
    calibration.append(measure_grids(comm, device))
    if comm.rank != 0:
        return None
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0]
    machine = FittedMachine(
        name=name or f"this machine, {comm.size} ranks" + ("" if device == "host" else f", arrays on {device}"),
        ranks=comm.size, cores=cores, device=device,
        collectives={k: list(fit_line(*zip(*v))) for k, v in points.items()}, collective_points=points,
        machine_peak=peak, overlap=overlap, overlap_probe=measured, node_ranks=node_ranks, node_cores=node_cores,
        trust=conditions(spreads, comm.size, cores, stolen(ticks), reps),
        memory_bytes=memory, **compute,
        sources={"measured": f"{time.strftime('%Y-%m-%d %H:%M')} on {comm.size} ranks, {cores} cores, "
                             f"load average {load:.1f} at the end",
                 "compute": "matmul/elementwise timings on rank 0 alone, scaled to the engine's serial step "
                            f"on every rank at once (x{compute['scale']:.2f}; {compute['kernel_overhead'] * 1e6:.1f}"
                            f" us per array operation; slowest rank {profile_spread:.2f}x the mean)",
                 "collectives": "time each call (and its non-blocking twin, started and waited for) adds "
                                f"after a ~1 ms kernel, all groups at once, 1 KiB..{max_bytes >> 10} KiB"
                                + (", every stride" if strided else "")
                                + "; interpolated between the timed sizes, each held to the least time at its"
                                  " size or above",
                 "overlap": f"1 MiB all-reduce behind 20 matmuls of {2048 if device == 'cupy' else 256}^3, "
                            "per progress mode"
                            + (f"; {overlap_note}" if overlap_note else ""),
                 "memory_bytes": memory_source})
    wait, wait_source = waits(machine, calibration)
    return replace(machine, **wait, sources={**machine.sources, "call_wait": wait_source})
