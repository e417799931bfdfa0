"""The broadcast's machine that a name or a file names, read without the engine's machines.

    load("dgx-h100")                          # a profile (gpulab.bcast.cost.profiles)
    load("results/bcast_tuning.json", p=4)    # a tuning file's fit for 4 ranks (the nearest if none)
    load("machine.json")                      # one dumped Machine (gpulab.bcast.cost.hockney.dumps)
    load(p=4)                                 # the default tuning file's fit

``select`` reads $GPULAB_MACHINE through it, and ``gpulab.machines.resolver.resolve(kind="bcast")``
hands its names here: the broadcast needs none of the engine's machines to decide.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpulab.bcast.cost.hockney import Machine
from gpulab.bcast.cost.profiles import profile
from gpulab.bcast.selection.tuning import load_machine


def is_file(name) -> bool:
    """Whether ``name`` names a file (a .json path, or any existing path) rather than a profile."""
    return str(name).endswith(".json") or os.path.exists(name)


def load(name_or_path: str | os.PathLike | None = None, p: int | None = None) -> Machine:
    """The ``Machine`` a profile name or a file names; without one, the default tuning file's fit for ``p``.

    An unknown profile name raises a KeyError listing the known ones.
    """
    if name_or_path is None:
        return load_machine(p=p)
    if is_file(name_or_path):
        data = json.loads(Path(name_or_path).read_text())
        return load_machine(name_or_path, p) if "models" in data else Machine.from_dict(data)
    return profile(str(name_or_path))
