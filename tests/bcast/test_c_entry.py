"""The broadcast entry in C (gpulab/bcast/fastpath.c): built where an MPI compiler wrapper is found, linked
to no MPI library, refused when mpi4py's MPI has other handle sizes, and off with GPULAB_FASTPATH=python;
on Open MPI too. What it does on every call is checked beside the Python entry in
tests/bcast/test_fast_path.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.bcast import algorithms, fastpath
from tests.bcast.openmpi import require_openmpi
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


@pytest.fixture(scope="module")
def openmpi() -> Path:
    """Debian's Open MPI (installed when missing): its libmpi."""
    require_openmpi()
    libdirs = subprocess.run(["mpicc.openmpi", "--showme:libdirs"], capture_output=True, text=True, check=True,
                             timeout=60).stdout.split()
    return next(Path(d, "libmpi.so").resolve() for d in libdirs if Path(d, "libmpi.so").exists())


def _on_openmpi(libmpi: Path, cache: Path, mpicc: str | None) -> list[dict]:
    """Each rank's report (fast_path_cases.report_entry_on_this_mpi) of a 2-rank Open MPI job whose mpi4py
    runs on ``libmpi``, the C entry built with ``mpicc`` (None: the one beside Python, the mpich wheel's)."""
    env = {**os.environ, "MPI4PY_LIBMPI": str(libmpi), "GPULAB_CACHE": str(cache), "PYTHONPATH": str(ROOT),
           "GPULAB_TUNING_TABLE": str(cache / "absent.json")}
    env.pop("MPICC", None)
    if mpicc:
        env["MPICC"] = mpicc
    exported = [flag for name in ("MPI4PY_LIBMPI", "GPULAB_CACHE", "PYTHONPATH", "GPULAB_TUNING_TABLE", "PATH",
                                  *(["MPICC"] if mpicc else [])) for flag in ("-x", name)]
    out = cache / "reports"
    out.mkdir(parents=True)
    code = f"from tests.bcast.fast_path_cases import report_entry_on_this_mpi as report; report({str(out)!r})"
    run = subprocess.run(["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", *exported, "-n", "2",
                          sys.executable, "-c", code],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]


def test_on_open_mpi_it_runs_when_built_with_open_mpi_and_stays_off_when_built_with_mpich(openmpi, tmp_path):
    own = _on_openmpi(openmpi, tmp_path / "own", "mpicc.openmpi")
    assert [r["rank"] for r in own] == [0, 1], own
    for r in own:
        assert r["library"].startswith("Open MPI") and r["entry"] == "c" and r["correct"], r
        assert r["objects"] == "TypeError" and r["c_plans"] == [True], r  # the binomial plan, in C
    wheel = _on_openmpi(openmpi, tmp_path / "wheel", None)  # mpi.h of MPICH: other handle sizes
    for r in wheel:
        assert r["entry"] == "python" and r["correct"] and r["objects"] == "TypeError", r
        assert "built with another MPI's mpi.h" in r["reason"], r
