"""Slurm's daemons and commands on this machine: Debian's slurm-wlm and munge, installed when missing."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.testbeds.apt import apt_install

PACKAGES = ["slurm-wlm", "slurm-client", "munge"]
BINARIES = ["slurmctld", "slurmd", "munged", "sbatch", "srun", "squeue", "scancel", "sinfo"]


class SlurmUnavailable(RuntimeError):
    """Slurm is not installed and cannot be installed here (needs root and apt-get)."""


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if not (shutil.which(b) or Path("/usr/sbin", b).exists())]


def ensure_slurm(timeout: float = 600) -> None:
    """Install Debian's slurm-wlm and munge when missing; SlurmUnavailable says why not."""
    if not missing_binaries():
        return
    if why := apt_install(PACKAGES, timeout):
        raise SlurmUnavailable(f"missing {missing_binaries()} and cannot install them here: {why}")
    if missing_binaries():
        raise SlurmUnavailable(f"still missing after apt-get install: {missing_binaries()}")


def sbin(name: str) -> str:
    """The path of a daemon (slurmctld, slurmd, munged): /usr/sbin is not on every PATH."""
    return shutil.which(name) or f"/usr/sbin/{name}"
