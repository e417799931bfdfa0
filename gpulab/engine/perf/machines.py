"""The machines the performance model prices, built from a machine's description (``gpulab.machines``).

    from gpulab.engine.perf.machines import MACHINES, machine
    m = machine("perlmutter")                  # or "frontier", "dgx-h100", or a fitted machine's file
    m.collective_s("all_reduce", size=4, stride=1, nbytes=64 << 20)
    m.compute_s({"matmul_flops": 1e12, "elementwise": 1e9, "kernels": 500})
    m.sources                                  # every number's source, printed beside predictions

``machine`` loads a name or a file through ``gpulab.machines.load`` and builds
a ``GPUMachine`` from a profile's GPU numbers, or a ``FittedMachine``
(``gpulab.engine.perf.fitted_machine``) from a fit's probes; both offer what
the model reads (``gpulab.machines.interface.ComputeMachine``).

A profile's links (latency, bandwidth, GPUs per node) are the same numbers
the broadcast's cost model reads. Where the AxoNN authors measured collective
bandwidth per (inner group product, group size) on a machine
(Megatron-AxoNN's ``comm_model.get_bw``), that table replaces the link
bandwidth: it is a measurement, the links are datasheet numbers.

A collective over a group of ``size`` ranks whose members sit ``stride``
ranks apart (col: 1, row: col, depth: row*col, data: row*col*depth) is a
ring (``gpulab.engine.perf.rings``). Its link is the node's if the group fits
in one node (stride * size <= GPUs per node), else the network's. Concurrent
groups are assumed not to share links (each GPU has its own NIC on these machines).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from gpulab import machines as descriptions
from gpulab.engine.perf.fitted_machine import FittedMachine
from gpulab.engine.perf.rings import ring
from gpulab.machines import Description, LinkLevel
from gpulab.machines.description import LINK_SOURCES


@dataclass(frozen=True)
class GPUMachine:
    name: str
    description: str
    ranks_per_node: int
    intra: LinkLevel
    inter: LinkLevel
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

    def level(self, size: int, stride: int) -> LinkLevel:
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

    @classmethod
    def from_description(cls, d: Description) -> GPUMachine:
        """A profile with GPU numbers; its link numbers' sources say which profile they came from."""
        sources = {}
        for key, text in d.sources.items():
            if key in LINK_SOURCES:
                key, text = f"links ({key})", f"link profile {d.name!r}: {text}"
            sources[key] = text
        gpu = {**d.gpu, "measured_GBps": tuple(tuple(row) for row in d.gpu["measured_GBps"])}
        return cls(name=d.name, description=d.about, ranks_per_node=d.ranks_per_node, intra=d.intra.small,
                   inter=d.inter.small, sources=sources, **gpu)


def machine(name_or_path: str | os.PathLike | None = None, *, default: str | None = None):
    """The engine's machine for a profile name (see ``MACHINES``; ``gpulab.machines.ALIASES`` too) or a
    fitted machine's file: ``gpulab.machines.load`` describes it ($GPULAB_MACHINE, then ``default``,
    when no name is given). A description with neither GPU numbers nor a fit is refused."""
    d = descriptions.load(name_or_path, default=default)
    if d.probes is not None:
        return FittedMachine.from_description(d)
    if d.gpu is not None:
        return GPUMachine.from_description(d)
    aliases = ", ".join(f"{a} = {n}" for a, n in descriptions.ALIASES.items() if n in MACHINES)
    raise KeyError(f"machine {d.name!r} has no GPU numbers or fit for the engine's model: name one of "
                   f"{sorted(MACHINES)} (aliases: {aliases}) or a fitted machine's file")


MACHINES = descriptions.names(gpu=True)
