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

import os

from gpulab import machines
from gpulab.bcast.cost.hockney import Machine
from gpulab.machines import profiles


def profile(name_or_path: str | os.PathLike, p: int | None = None) -> Machine:
    """The ``Machine`` that ``gpulab.machines.load`` describes for a profile name (or an alias), or a machine
    file (a tuning file: its fit for ``p`` ranks); a profile's ``notes`` carry every number's source."""
    return Machine.from_description(machines.load(name_or_path, p=p))


PROFILES = machines.names()


def table() -> list[dict]:
    """One row per profile with alpha, bandwidth and sources: for a notebook table."""
    rows = []
    for name, spec in profiles.links().items():
        for level in profiles.LEVELS:
            rows.append({"profile": name, "level": level, "ranks_per_node": spec["ranks_per_node"],
                         "alpha_us": spec[level]["alpha_us"], "bandwidth_GBps": spec[level]["bandwidth_GBps"],
                         "alpha_source": spec[level]["alpha_source"],
                         "bandwidth_source": spec[level]["bandwidth_source"]})
    return rows
