"""One way from a machine's name or file to the machine a model reads: ``resolve(name_or_path, kind=...)``.

    from gpulab.machines.resolver import resolve
    resolve("perlmutter", kind="engine")        # a GPUMachine (gpulab.engine.perf.machines)
    resolve("dgx-h100", kind="bcast")           # a Hockney Machine (gpulab.bcast.cost.profiles)
    resolve("results/engine_machine_p4.json", kind="engine")   # a FittedMachine
    resolve(kind="bcast", p=4)                  # $GPULAB_MACHINE, else the fit in the tuning file

With no name, the site's choice in the environment variable ``GPULAB_MACHINE``
(a profile name or a file) is used, then the caller's ``default``.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpulab.bcast.selection import machine_loader
from gpulab.engine.perf.fitted_machine import load as load_fitted
from gpulab.engine.perf.machines import machine as gpu_machine

ENV = "GPULAB_MACHINE"
KINDS = ("bcast", "engine")


def resolve(name_or_path: str | os.PathLike | None = None, *, kind: str, p: int | None = None,
            default: str | None = None):
    """The ``kind`` ("bcast" or "engine") machine that ``name_or_path`` names.

    A name is a profile of ``gpulab.machines`` or an alias of one; a path
    (ending in .json, or an existing file) is a fitted machine: for "engine"
    ``gpulab model fit``'s file, for "bcast" a tuning file (its fit for ``p``
    ranks, the nearest if none) or one dumped ``Machine``. Without a name:
    $GPULAB_MACHINE, then ``default``, then (for "bcast") the fit in the
    default tuning file. An unknown name raises a KeyError listing the known ones.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    if name_or_path is None and os.environ.get(ENV):
        try:
            return resolve(os.environ[ENV], kind=kind, p=p)
        except (KeyError, OSError, ValueError) as err:
            raise type(err)(f"{ENV}={os.environ[ENV]}: {err.args[0] if err.args else err}") from err
    name = name_or_path if name_or_path is not None else default
    if kind == "bcast":
        return machine_loader.load(name, p)
    if name is None:
        raise ValueError(f"no machine named: give a profile name or a fitted machine's file, or set {ENV}")
    return load_fitted(Path(name)) if machine_loader.is_file(name) else gpu_machine(str(name))
