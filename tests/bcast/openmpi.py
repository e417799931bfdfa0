"""Debian's Open MPI for the tests that run on it (test_export.py, test_c_entry.py)."""

from __future__ import annotations

import os
import shutil

import pytest


def require_openmpi() -> None:
    """Install Debian's openmpi-bin and libopenmpi-dev when missing; skip if they cannot be (fail in CI)."""
    from tests.testbeds.apt import apt_install

    if not all(shutil.which(b) for b in ("mpirun.openmpi", "mpicc.openmpi")) and \
            (why := apt_install(["openmpi-bin", "libopenmpi-dev"])):
        if os.environ.get("CI"):
            pytest.fail(f"Open MPI could not be installed; its test must run in CI: {why}")
        pytest.skip(f"Open MPI (Debian's openmpi-bin, libopenmpi-dev) is not installed and cannot be: {why}")
