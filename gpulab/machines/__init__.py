"""Machine profiles: the numbers of GPU clusters a learner cannot access, each beside its source.

Both models read them here, and only here:

- ``links.json``: per machine, GPUs per node and the latency (alpha) and
  bandwidth of its two link levels, inside a node and between nodes, read by
  ``link_profile``. The broadcast's alpha-beta model makes a ``Machine`` of
  them (``gpulab.bcast.cost.profiles``).
- ``gpus.json``: per machine, what one GPU computes and holds, and measured
  collective bandwidths where published; its ``links`` name the entry of
  ``links.json`` the machine's network is. The engine's performance model
  makes a ``GPUMachine`` of them (``gpulab.engine.perf.machines``).

A machine has one name in both files; ``ALIASES`` maps other accepted names
to it. Keys starting with "_" are notes and shared assumptions, not machines.
What the models read of a machine is written down in ``interface``; a name or
a file becomes a machine in ``resolver`` (docs/machines.md).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

_HERE = Path(__file__).parent
# `gpulab model --machine h100` is documented for the DGX H100 node, so that name stays accepted
ALIASES = {"h100": "dgx-h100"}


@functools.cache
def _read(name: str) -> dict:
    return json.loads((_HERE / name).read_text())


def links() -> dict:
    """name -> {"ranks_per_node", "intra": {...}, "inter": {...}, sources}: the link profiles."""
    return {k: v for k, v in _read("links.json").items() if not k.startswith("_")}


def gpus() -> dict:
    """name -> the GPU profile (compute, memory, measured bandwidths, and which link profile it uses)."""
    return {k: v for k, v in _read("gpus.json").items() if not k.startswith("_")}


def gpu_assumptions() -> dict:
    """The assumptions every GPU profile shares (efficiencies, bytes per value), with their sources."""
    return _read("gpus.json")["_common"]


def canonical(name: str, known) -> str:
    """``name`` (or the machine an alias names) if it is in ``known``; else a KeyError listing ``known``."""
    name = ALIASES.get(name, name)
    if name not in known:
        raise unknown_machine(name, known)
    return name


def unknown_machine(name: str, known) -> KeyError:
    aliases = ", ".join(f"{a} = {n}" for a, n in ALIASES.items() if n in known)
    return KeyError(f"unknown machine {name!r}; known profiles: {sorted(known)}"
                    + (f" (aliases: {aliases})" if aliases else "") + ", or a fitted machine's JSON file")


@dataclass(frozen=True)
class LinkLevel:
    alpha: float  # seconds per message
    bandwidth: float  # bytes per second per direction


@dataclass(frozen=True)
class LinkProfile:
    """One entry of ``links.json`` in SI units; ``sources`` keys: "ranks_per_node", "intra.alpha", ..."""
    name: str
    description: str
    ranks_per_node: int
    intra: LinkLevel
    inter: LinkLevel
    sources: dict = field(default_factory=dict, compare=False, hash=False)


def link_profile(name: str) -> LinkProfile:
    """The link profile ``name`` (or an alias of it), every number with its source."""
    raw = links()
    spec = raw[canonical(name, raw)]
    levels = {k: LinkLevel(spec[k]["alpha_us"] * 1e-6, spec[k]["bandwidth_GBps"] * 1e9) for k in ("intra", "inter")}
    sources = {"ranks_per_node": spec["ranks_per_node_source"],
               **{f"{k}.{q}": spec[k][f"{q}_source"] for k in ("intra", "inter") for q in ("alpha", "bandwidth")}}
    return LinkProfile(ALIASES.get(name, name), spec["description"], spec["ranks_per_node"], levels["intra"],
                       levels["inter"], sources)
