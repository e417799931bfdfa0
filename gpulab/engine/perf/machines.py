"""Machine profiles for the performance model: what one GPU computes, holds and sends, with sources.

    from gpulab.engine.perf.machines import MACHINES, machine
    m = machine("perlmutter")                  # or "frontier", "dgx-h100"
    m.collective_s("all_reduce", size=4, stride=1, nbytes=64 << 20)
    m.compute_s({"matmul_flops": 1e12, "elementwise": 1e9, "kernels": 500})
    m.sources                                  # every number's source, printed beside predictions

The numbers live in ``gpulab.machines`` (the one home of machine profiles):
a machine's links (latency, bandwidth, GPUs per node) are the same entry the
broadcast's cost model reads, its GPU numbers sit beside them. Where the AxoNN authors measured collective
bandwidth per (inner group product, group size) on a machine
(Megatron-AxoNN's ``comm_model.get_bw``), that table replaces the link
bandwidth: it is a measurement, the links are datasheet numbers.

A collective over a group of ``size`` ranks whose members sit ``stride``
ranks apart (col: 1, row: col, depth: row*col, data: row*col*depth) is a
ring: all-reduce 2(g-1) steps and 2(g-1)/g n bytes per rank, all-gather and
reduce-scatter half that. Its link is the node's if the group fits in one
node (stride * size <= GPUs per node), else the network's. Concurrent groups
are assumed not to share links (each GPU has its own NIC on these machines).
The machine fitted on this computer by measurement is
``gpulab.engine.perf.fitted_machine.FittedMachine``; both offer what the model reads
(``gpulab.machines.interface.ComputeMachine``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpulab import machines as profiles

# each collective's non-blocking twin (MPI_Iallreduce...), which the engine issues where it overlaps: a
# fitted machine times both (MPICH selects their algorithms apart); a profile here prices both as one ring
NONBLOCKING = {op: "i" + op for op in ("all_reduce", "all_gather", "reduce_scatter")}
BLOCKING_OF = {twin: op for op, twin in NONBLOCKING.items()}


def ring(op: str, size: int) -> tuple[int, float]:
    """(latency steps, bytes factor on the full buffer) of a ring collective over ``size`` ranks."""
    if size <= 1:
        return 0, 0.0
    op = BLOCKING_OF.get(op, op)
    if op == "all_reduce":
        return 2 * (size - 1), 2 * (size - 1) / size
    return size - 1, (size - 1) / size  # all_gather, reduce_scatter


@dataclass(frozen=True)
class Level:
    alpha: float  # seconds per ring step
    bandwidth: float  # bytes per second per rank


@dataclass(frozen=True)
class GPUMachine:
    name: str
    description: str
    ranks_per_node: int
    intra: Level
    inter: Level
    peak_flops: float  # per GPU, dense bf16
    matmul_efficiency: float
    mem_bandwidth: float  # bytes/s
    kernel_overhead: float  # seconds per kernel
    memory_bytes: float
    usable_memory: float = 0.9
    value_bytes: int = 2
    state_bytes_per_param: int = 16
    overlap_efficiency: float = 1.0
    measured_GBps: tuple = ()  # AxoNN's table: (inner_lo, inner_hi, size_lo, size_hi, GB/s)
    sources: dict = field(default_factory=dict, compare=False, hash=False)

    def bandwidth(self, size: int, stride: int) -> float:
        for lo, hi, s_lo, s_hi, gbps in self.measured_GBps:
            if lo <= stride <= hi and s_lo <= size <= s_hi:
                return gbps * 1e9
        return self.level(size, stride).bandwidth

    def level(self, size: int, stride: int) -> Level:
        return self.intra if stride * size <= self.ranks_per_node else self.inter

    def collective_s(self, op: str, size: int, stride: int, nbytes: float) -> float:
        steps, factor = ring(op, size)
        if steps == 0:
            return 0.0
        return steps * self.level(size, stride).alpha + factor * nbytes / self.bandwidth(size, stride)

    def compute_s(self, work: dict) -> float:
        return (work["matmul_flops"] / (self.peak_flops * self.matmul_efficiency)
                + 2 * self.value_bytes * work["elementwise"] / self.mem_bandwidth  # read + write
                + work["kernels"] * self.kernel_overhead)

    @property
    def peak(self) -> float:
        return self.peak_flops

    def overlap_efficiency_for(self, progress: str) -> float:
        """NCCL/RCCL progress on their own: the host's progress mode does not matter."""
        return self.overlap_efficiency

    def assumptions(self) -> list[str]:
        return [f"{key}: {text}" for key, text in self.sources.items()]


def _links(name: str) -> tuple[int, Level, Level, dict]:
    """GPUs per node, the two link levels and their sources, from the link profile ``name``."""
    spec = profiles.link_profile(name)
    intra, inter = (Level(level.alpha, level.bandwidth) for level in (spec.intra, spec.inter))
    return spec.ranks_per_node, intra, inter, {f"links ({k})": f"link profile {spec.name!r}: {v}"
                                               for k, v in spec.sources.items()}


def machine(name: str) -> GPUMachine:
    """A named GPU profile (see ``MACHINES``; ``gpulab.machines.ALIASES`` are accepted too)."""
    raw = profiles.gpus()
    name = profiles.canonical(name, raw)
    spec, common = raw[name], profiles.gpu_assumptions()
    rpn, intra, inter, sources = _links(spec["links"])
    for key in ("peak_flops", "memory_GB", "mem_bandwidth_GBps", "measured_GBps"):
        if key in spec:
            sources[key] = spec[f"{key}_source"]
    for key in ("matmul_efficiency", "kernel_overhead_us", "overlap_efficiency", "value_bytes",
                "state_bytes_per_param", "usable_memory"):
        sources[key] = common[f"{key}_source"]
    return GPUMachine(
        name=name, description=spec["description"], ranks_per_node=rpn, intra=intra, inter=inter,
        peak_flops=spec["peak_flops"], matmul_efficiency=common["matmul_efficiency"],
        mem_bandwidth=spec["mem_bandwidth_GBps"] * 1e9, kernel_overhead=common["kernel_overhead_us"] * 1e-6,
        memory_bytes=spec["memory_GB"] * 1e9, usable_memory=common["usable_memory"],
        value_bytes=common["value_bytes"], state_bytes_per_param=common["state_bytes_per_param"],
        overlap_efficiency=common["overlap_efficiency"],
        measured_GBps=tuple(tuple(e) for e in spec.get("measured_GBps", ())), sources=sources)


MACHINES = tuple(profiles.gpus())
