"""What the models read of the machines they build: one protocol every machine offers, and one per model.

Each model builds its own machine from one ``Description`` (``gpulab.machines``):
the broadcast's Hockney machine (``gpulab.bcast.cost.hockney.Machine``: the
links of a profile or a ping-pong fit), and the engine's machines
(``gpulab.engine.perf.machines.GPUMachine`` from a profile's GPU numbers,
``gpulab.engine.perf.fitted_machine.FittedMachine`` from a fit's probes: compute,
memory and collectives). ``Profile`` is what all three offer; ``LinkMachine``
and ``ComputeMachine`` are everything the broadcast's and the engine's model
read, so a new kind of machine knows what it must provide. ``isinstance``
checks that the members exist, not their types.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Profile(Protocol):
    """Every machine: a name, how many ranks share a node, and where its numbers came from."""

    @property
    def name(self) -> str: ...

    @property
    def ranks_per_node(self) -> int | None: ...  # None: every rank on one node

    def assumptions(self) -> list[str]:
        """"what: source" lines, printed beside predictions."""
        ...


@runtime_checkable
class LinkMachine(Profile, Protocol):
    """What the broadcast's alpha-beta model reads (``gpulab.bcast.cost.hockney``, ``gpulab.bcast.cost.placement``)."""

    @property
    def intra(self): ...  # a gpulab.machines.Link: between ranks on one node

    @property
    def inter(self): ...  # a gpulab.machines.Link: between nodes

    @property
    def overhead(self) -> float: ...  # seconds of Python per message in gpulab's algorithms

    @property
    def call(self) -> float: ...  # seconds of Python per broadcast call

    @property
    def cores(self) -> int | None: ...  # cores the ranks of a node share (None: not a limit)

    @property
    def fitted_p(self) -> int | None: ...  # ranks of the fit, whose own core sharing is taken out

    @property
    def notes(self) -> dict: ...

    def link(self, p: int): ...  # the Link a flat broadcast over p ranks uses


@runtime_checkable
class ComputeMachine(Profile, Protocol):
    """What the engine's performance model reads (``gpulab.engine.perf``: terms, predict, pipeline, compare)."""

    @property
    def peak(self) -> float: ...  # FLOP/s of one rank

    @property
    def matmul_efficiency(self) -> float: ...

    @property
    def memory_bytes(self) -> float: ...  # per rank

    @property
    def usable_memory(self) -> float: ...  # the fraction of memory_bytes a model may fill

    @property
    def value_bytes(self) -> int: ...

    @property
    def state_bytes_per_param(self) -> int: ...

    @property
    def inter(self): ...  # a gpulab.machines.LinkLevel (alpha, beta): the link between pipeline stages

    def collective_s(self, op: str, size: int, stride: int, nbytes: float) -> float: ...

    def compute_s(self, work: dict) -> float: ...

    def overlap_efficiency_for(self, progress: str) -> float: ...
