"""The broadcast entry in C (gpulab/bcast/fastpath.c): built where an MPI compiler wrapper is found, linked
to no MPI library, refused when mpi4py's MPI has other handle sizes, and off with GPULAB_FASTPATH=python.
What it does on every call is checked beside the Python entry in tests/bcast/test_fast_path.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.bcast import algorithms, fastpath
from tests.mpi_harness import ROOT, run_mpi

needs_mpicc = pytest.mark.skipif(fastpath.mpicc() is None, reason="no mpicc: no C entry")


@needs_mpicc
def test_it_builds_links_no_mpi_and_is_the_entry():
    status = fastpath.status()
    assert status["active"], status
    assert b"libmpi" not in Path(status["module"]).read_bytes()  # mpi4py's MPI is the only one loaded
    assert algorithms.bcast is algorithms._c.bcast is not algorithms.bcast_in_python
    assert algorithms.ALGORITHMS["binomial"].func is algorithms.bcast


@needs_mpicc
def test_an_mpi_with_other_handle_sizes_is_refused():
    with pytest.raises(ValueError, match="built with another MPI's mpi.h"):
        algorithms._c.configure({}, {}, None, RuntimeError, {}, (0, 0, 0, (1, 1, 1)))


def test_gpulab_fastpath_python_keeps_the_python_entry():
    code = ("import gpulab.bcast as b; from gpulab.bcast import algorithms, fastpath; "
            "assert b.bcast is algorithms.bcast_in_python, b.bcast; print(fastpath.status()['reason'])")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "GPULAB_FASTPATH": "python"}, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "GPULAB_FASTPATH=python"


@needs_mpicc
def test_a_plan_made_by_the_python_entry_runs_in_c():
    assert run_mpi(3, "tests.bcast.fast_path_cases:plans_carry_their_c_copy", timeout=60) == [[True, True]] * 3
