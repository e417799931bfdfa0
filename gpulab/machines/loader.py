"""The one way from a machine's name or file to its description: ``load(name_or_path)``.

    load("perlmutter")                          # a profile (or an alias: "h100")
    load("results/engine_machine_p4.json")      # a machine file: `gpulab model fit`'s, a dumped broadcast fit
    load("bcast_tuning.json", p=4)              # a tuning file: its fit for 4 ranks (the nearest if none)
    load(default="perlmutter")                  # $GPULAB_MACHINE, else the default

With no name, the site's choice in the environment variable ``GPULAB_MACHINE``
(a profile name or a file) is used, then the caller's ``default``; a name
given always wins. The models build what they price from the description.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpulab.machines import profiles
from gpulab.machines.description import Description

ENV = "GPULAB_MACHINE"


def is_file(name) -> bool:
    """Whether ``name`` names a file (a .json path, or any existing path) rather than a profile."""
    return str(name).endswith(".json") or os.path.exists(name)


def load(name_or_path: str | os.PathLike | None = None, *, p: int | None = None,
         default: str | os.PathLike | None = None) -> Description:
    """The description ``name_or_path`` names: a profile or an alias of one, else a machine file (a
    tuning file: its fit for ``p`` ranks). Without a name: $GPULAB_MACHINE, then ``default``.

    An unknown name raises a KeyError listing the profiles; a file of another schema version a
    ``SchemaError`` naming the command that writes a current one.
    """
    if name_or_path is None and os.environ.get(ENV):
        try:
            return load(os.environ[ENV], p=p)
        except (KeyError, OSError, ValueError) as err:
            raise type(err)(f"{ENV}={os.environ[ENV]}: {err.args[0] if err.args else err}") from err
    name = name_or_path if name_or_path is not None else default
    if name is None:
        raise ValueError(f"no machine named: give a profile name or a machine file, or set {ENV}")
    return read(Path(name), p) if is_file(name) else profiles.describe(str(name))


def read(path: Path, p: int | None = None) -> Description:
    """The description a machine file holds; of a tuning file (``gpulab tune``'s), its fit for ``p`` ranks."""
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict) and "models" in data:
        models = data["models"]
        if not models:
            raise FileNotFoundError(f"no fitted model in {path}: run `gpulab tune fit` first")
        key = nearest(models, p)
        return Description.from_dict(models[key], f"{path}, its fit for {key} ranks")
    return Description.from_dict(data, str(path))


def nearest(models: dict, p: int | None) -> str:
    """The key of a tuning file's fit for ``p`` ranks, else the nearest (the smaller on a tie; the smallest
    without ``p``): fits differ with the ranks that share the cores."""
    return min(models, key=lambda k: (abs(int(k) - p) if p is not None else 0, int(k)))
