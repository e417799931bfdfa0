"""Machine profiles: alpha-beta ``Machine``s of GPU clusters a learner cannot access.

The numbers live in ``gpulab.machines`` (``links.json``), each with the source
it came from (vendor specifications, NCCL's own cost-model constants); the
engine's performance model reads the same entries. They let the broadcast
model draw predictions at hundreds or thousands of GPUs:

    from gpulab.bcast.cost.profiles import PROFILES, profile
    from gpulab.bcast.cost.hockney import predict
    predict("hierarchical", 512 << 20, 1024, machine=profile("dgx-h100"), inter="chain", intra="chain",
            inter_options={"chunk_bytes": 4 << 20}, intra_options={"chunk_bytes": 4 << 20})

A profile models GPU-resident data moved by a C/CUDA library: no Python
overhead and no CPU-core limit, plain single-port Hockney on each link.
"""

from __future__ import annotations

from gpulab import machines
from gpulab.bcast.cost.hockney import Link, Machine


def _link(level: machines.LinkLevel) -> Link:
    return Link.plain(level.alpha, 1 / level.bandwidth)


def profile(name: str) -> Machine:
    """The ``Machine`` of a named profile (or an alias of one); its ``notes`` carry every number's source."""
    spec = machines.link_profile(name)
    return Machine(spec.name, _link(spec.intra), _link(spec.inter), spec.ranks_per_node,
                   notes={"description": spec.description, "sources": dict(spec.sources)})


PROFILES = tuple(machines.links())


def table() -> list[dict]:
    """One row per profile with alpha, bandwidth and sources: for a notebook table."""
    rows = []
    for name, spec in machines.links().items():
        for level in ("intra", "inter"):
            rows.append({"profile": name, "level": level, "ranks_per_node": spec["ranks_per_node"],
                         "alpha_us": spec[level]["alpha_us"], "bandwidth_GBps": spec[level]["bandwidth_GBps"],
                         "alpha_source": spec[level]["alpha_source"],
                         "bandwidth_source": spec[level]["bandwidth_source"]})
    return rows
