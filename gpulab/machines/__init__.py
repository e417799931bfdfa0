"""Machines: one description of a machine, one loader, the profiles, at the bottom of the package.

- ``description``: ``Description`` (what a profile or a machine file says:
  name, ranks per node, link levels, compute and memory, fitted collectives
  and probes, sources, ``schema_version``), ``LinkLevel`` (alpha, beta: the
  one link-level type) and ``Link`` (one level, or two protocol regimes);
- ``loader``: ``load(name_or_path)``, the one way from a name or a file to
  a description ($GPULAB_MACHINE when no name is given);
- ``profiles``: ``links.json`` and ``gpus.json``, clusters a learner cannot
  access, every number beside its source;
- ``interface``: what each model reads of the machines it builds;
- ``linefit``: the straight line both fits of a machine use.

The models build what they price from a description
(``gpulab.bcast.cost.hockney.Machine.from_description``,
``gpulab.engine.perf.machines.machine``); this package imports nothing of
theirs (docs/machines.md).
"""

from __future__ import annotations

from gpulab.machines.description import SCHEMA_VERSION, Description, Link, LinkLevel, SchemaError
from gpulab.machines.loader import ENV, load
from gpulab.machines.profiles import ALIASES, names

__all__ = ["ALIASES", "ENV", "SCHEMA_VERSION", "Description", "Link", "LinkLevel", "SchemaError", "load", "names"]
