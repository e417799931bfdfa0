"""The one description of a machine, whatever made it: a profile, a ping-pong fit or the engine's fit.

A description says what is known of a machine and nothing about how a model
prices it: the models build their own machines from it
(``gpulab.bcast.cost.hockney.Machine.from_description``,
``gpulab.engine.perf.machines.machine``). Its parts, each ``None`` where
nothing made it:

- ``intra``, ``inter``: the link between ranks on one node and between nodes,
  each a ``Link`` of one ``LinkLevel`` (alpha, beta), or two protocol regimes
  split at ``switch`` bytes (a ping-pong fit of MPICH's eager and
  single-copy protocols);
- ``gpu``: what one GPU computes, holds and streams (``GPU_KEYS``, SI units);
- ``pingpong``: what the broadcast's ping-pong fit adds to its links: seconds
  of Python per message and per broadcast call (``PINGPONG_KEYS``);
- ``probes``: what the engine's fit measured on this computer (``PROBE_KEYS``:
  compute rates, collectives, overlap, the ranks' waits, memory).

A file holds one description as JSON (``to_dict``) with its
``schema_version``; ``from_dict`` refuses any other version, or none, with the
command that writes a current file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SCHEMA_VERSION = 1
REFIT = ("refit with `gpulab model fit` (the engine's machine) or `gpulab tune fit` (the broadcast's), "
         "or name a profile (docs/machines.md)")

GPU_KEYS = ("peak_flops", "matmul_efficiency", "mem_bandwidth", "kernel_overhead", "memory_bytes", "usable_memory",
            "value_bytes", "state_bytes_per_param", "overlap_efficiency", "measured_GBps")
PINGPONG_KEYS = ("overhead", "call")
PROBE_KEYS = ("collectives", "collective_points", "matmul_rate", "elementwise_rate", "kernel_overhead", "scale",
              "share", "machine_peak", "overlap", "overlap_probe", "memory_bytes", "value_bytes",
              "state_bytes_per_param", "usable_memory", "trust", "node_ranks", "node_cores", "device", "call_wait",
              "row_wait", "data_wait")
PARTS = {"gpu": GPU_KEYS, "pingpong": PINGPONG_KEYS, "probes": PROBE_KEYS}
# the sources of a description's link numbers (its other sources are its GPU's)
LINK_SOURCES = ("ranks_per_node", "intra.alpha", "intra.bandwidth", "inter.alpha", "inter.bandwidth")


class SchemaError(ValueError):
    """A machine file this kit does not read: another schema version, or a part that is not the schema's."""


@dataclass(frozen=True)
class LinkLevel:
    """One kind of connection: a message of n bytes costs ``alpha + n * beta`` (Hockney)."""
    alpha: float  # seconds per message
    beta: float  # seconds per byte, one direction

    @property
    def bandwidth(self) -> float:
        """Bytes per second, one direction."""
        return 1 / self.beta

    @classmethod
    def of_bandwidth(cls, alpha: float, bandwidth: float) -> LinkLevel:
        return cls(alpha, 1 / bandwidth)

    def time(self, nbytes: float) -> float:
        return self.alpha + nbytes * self.beta


@dataclass(frozen=True)
class Link:
    """The cost of one message over one kind of connection: ``small`` below ``switch`` bytes, ``large`` from it."""
    small: LinkLevel
    large: LinkLevel | None = None
    switch: int | None = None  # bytes where the protocol changes (None: one regime)
    receiver_copies: bool = False  # in the large regime the receiver copies, so concurrent sends overlap

    def regime(self, nbytes: float) -> LinkLevel:
        return self.large if self.switch is not None and nbytes >= self.switch else self.small

    def serial(self, nbytes: float) -> bool:
        """Do one rank's concurrent sends of this size queue (single-port Hockney)?"""
        return not (self.receiver_copies and self.switch is not None and nbytes >= self.switch)

    @classmethod
    def plain(cls, alpha: float, beta: float) -> Link:
        return cls(LinkLevel(alpha, beta))

    def to_dict(self) -> dict:
        return {"small": _level(self.small), "large": _level(self.large), "switch": self.switch,
                "receiver_copies": self.receiver_copies}

    @classmethod
    def from_dict(cls, d: dict) -> Link:
        return cls(LinkLevel(**d["small"]), LinkLevel(**d["large"]) if d["large"] else None, d["switch"],
                   d["receiver_copies"])


def _level(level: LinkLevel | None) -> dict | None:
    return None if level is None else {"alpha": level.alpha, "beta": level.beta}


def _link(link: Link | None) -> dict | None:
    return None if link is None else link.to_dict()


@dataclass(frozen=True)
class Description:
    """What a machine file or a profile says of one machine (the parts: this module's docstring)."""
    name: str
    about: str = ""  # one line: what machine this is
    ranks_per_node: int | None = None  # None: every rank on one node
    cores: int | None = None  # cores the ranks of a node share (a fit's); None: not a limit
    fitted_ranks: int | None = None  # ranks the fit ran on; None: not fitted
    intra: Link | None = None
    inter: Link | None = None
    gpu: dict | None = None
    pingpong: dict | None = None
    probes: dict | None = None
    sources: dict = field(default_factory=dict)  # what each number's source is ("intra.alpha": "NCCL ...")
    notes: dict = field(default_factory=dict)  # what else a fit kept: its lines, samples, residuals
    schema_version: int = SCHEMA_VERSION

    def link_sources(self) -> dict:
        return {k: v for k, v in self.sources.items() if k in LINK_SOURCES}

    def to_dict(self) -> dict:
        return {"schema_version": self.schema_version, "name": self.name, "about": self.about,
                "ranks_per_node": self.ranks_per_node, "cores": self.cores, "fitted_ranks": self.fitted_ranks,
                "intra": _link(self.intra), "inter": _link(self.inter),
                "gpu": self.gpu, "pingpong": self.pingpong, "probes": self.probes, "sources": self.sources,
                "notes": self.notes}

    @classmethod
    def from_dict(cls, d, where: str = "a machine") -> Description:
        """The description ``to_dict`` wrote; a SchemaError naming the fix for anything else (``where``: the
        file or record it came from, for the message)."""
        if not isinstance(d, dict):
            raise SchemaError(f"{where}: not a machine description (a JSON object); {REFIT}")
        version = d.get("schema_version")
        if version != SCHEMA_VERSION:
            said = "no schema_version" if version is None else f"schema_version {version!r}"
            raise SchemaError(f"{where}: {said}, this kit reads machine files of schema {SCHEMA_VERSION}; {REFIT}")
        keys = set(cls.__dataclass_fields__)
        wrong = sorted(set(d) ^ keys)
        wrong += [f"{part}: {sorted(set(d[part]) ^ set(PARTS[part]))}" for part in PARTS
                  if d.get(part) is not None and set(d[part]) != set(PARTS[part])]
        if wrong:
            raise SchemaError(f"{where}: not schema {SCHEMA_VERSION}, keys missing or unknown: {wrong}; {REFIT}")
        links = {k: None if d[k] is None else Link.from_dict(d[k]) for k in ("intra", "inter")}
        return cls(**{**d, **links})
