"""The profiles: machines a learner cannot access, every number beside its source.

- ``links.json``: per machine, GPUs per node and the latency (alpha) and
  bandwidth of its two link levels, inside a node and between nodes;
- ``gpus.json``: per machine, what one GPU computes and holds, and measured
  collective bandwidths where published, under the machine's name in
  ``links.json``; ``_common`` holds the assumptions every GPU shares.

A machine has one name in both files; ``ALIASES`` maps other accepted names
to it. Keys starting with "_" are notes and shared assumptions, not machines.
``describe`` turns an entry into the one ``Description`` (SI units).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from gpulab.machines.description import Description, Link, LinkLevel

_HERE = Path(__file__).parent
# `gpulab model --machine h100` is documented for the DGX H100 node, so that name stays accepted
ALIASES = {"h100": "dgx-h100"}
LEVELS = ("intra", "inter")


@functools.cache
def _read(name: str) -> dict:
    return json.loads((_HERE / name).read_text())


def links() -> dict:
    """name -> {"ranks_per_node", "intra": {...}, "inter": {...}, sources}, as ``links.json`` has them."""
    return {k: v for k, v in _read("links.json").items() if not k.startswith("_")}


def gpus() -> dict:
    """name -> the GPU entry of ``gpus.json`` (compute, memory, measured bandwidths, each with its source)."""
    return {k: v for k, v in _read("gpus.json").items() if not k.startswith("_")}


def gpu_assumptions() -> dict:
    """The assumptions every GPU profile shares (efficiencies, bytes per value), with their sources."""
    return _read("gpus.json")["_common"]


def names(gpu: bool = False) -> tuple[str, ...]:
    """Every profile's name; with ``gpu``, those with GPU numbers (what the engine's model prices)."""
    return tuple(gpus() if gpu else links())


def canonical(name: str) -> str:
    """``name``, or the machine an alias names; a KeyError listing the profiles if it is neither."""
    name = ALIASES.get(name, name)
    if name not in links():
        aliases = ", ".join(f"{a} = {n}" for a, n in ALIASES.items())
        raise KeyError(f"unknown machine {name!r}; known profiles: {sorted(links())} (aliases: {aliases}), "
                       "or a machine file (.json)")
    return name


def describe(name: str) -> Description:
    """The profile ``name`` (or an alias of it) as a ``Description``, every number with its source."""
    name = canonical(name)
    spec = links()[name]
    levels = {k: Link(LinkLevel.of_bandwidth(spec[k]["alpha_us"] * 1e-6, spec[k]["bandwidth_GBps"] * 1e9))
              for k in LEVELS}
    sources = {"ranks_per_node": spec["ranks_per_node_source"],
               **{f"{k}.{q}": spec[k][f"{q}_source"] for k in LEVELS for q in ("alpha", "bandwidth")}}
    gpu = None
    if name in gpus():
        gpu, gpu_sources = _gpu(gpus()[name], gpu_assumptions())
        sources.update(gpu_sources)
    return Description(name, spec["description"], spec["ranks_per_node"], intra=levels["intra"],
                       inter=levels["inter"], gpu=gpu, sources=sources)


def _gpu(spec: dict, common: dict) -> tuple[dict, dict]:
    """(the ``gpu`` part in SI units, the sources of its numbers) of one entry of ``gpus.json``."""
    gpu = {"peak_flops": spec["peak_flops"], "matmul_efficiency": common["matmul_efficiency"],
           "mem_bandwidth": spec["mem_bandwidth_GBps"] * 1e9, "kernel_overhead": common["kernel_overhead_us"] * 1e-6,
           "memory_bytes": spec["memory_GB"] * 1e9, "usable_memory": common["usable_memory"],
           "value_bytes": common["value_bytes"], "state_bytes_per_param": common["state_bytes_per_param"],
           "overlap_efficiency": common["overlap_efficiency"],
           "measured_GBps": [list(row) for row in spec.get("measured_GBps", ())]}
    sources = {key: spec[f"{key}_source"] for key in ("peak_flops", "memory_GB", "mem_bandwidth_GBps", "measured_GBps")
               if key in spec}
    sources.update({key: common[f"{key}_source"] for key in ("matmul_efficiency", "kernel_overhead_us",
                                                             "overlap_efficiency", "value_bytes",
                                                             "state_bytes_per_param", "usable_memory")})
    return gpu, sources
