"""Machine profiles: the numbers of GPU clusters a learner cannot access, each beside its source.

Both models read them here, and only here:

- ``links.json``: per machine, GPUs per node and the latency (alpha) and
  bandwidth of its two link levels, inside a node and between nodes. The
  broadcast's alpha-beta model makes a ``Machine`` of them
  (``gpulab.bcast.profiles``).
- ``gpus.json``: per machine, what one GPU computes and holds, and measured
  collective bandwidths where published; its ``links`` name the entry of
  ``links.json`` the machine's network is. The engine's performance model
  makes a ``GPUMachine`` of them (``gpulab.engine.perf.machines``).

Keys starting with "_" are notes and shared assumptions, not machines.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

_HERE = Path(__file__).parent


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
