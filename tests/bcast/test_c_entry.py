"""The broadcast entry in C (gpulab/bcast/runtime/fastpath.c): built at install time where an MPI compiler
wrapper is found, never at import; linked to no MPI library; loaded at the first broadcast only where its
build fits the environment; refused when mpi4py's MPI has other handle sizes; off with GPULAB_FASTPATH=python;
on Open MPI too. What it does on every call is checked beside the Python entry in tests/bcast/test_fast_path.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpulab.bcast.runtime import build
from tests.bcast.openmpi import require_openmpi
from tests.mpi_harness import ROOT, run_mpi

pytestmark = pytest.mark.timeout(300)
needs_mpicc = pytest.mark.skipif(build.mpicc() is None, reason="no mpicc: no C entry")
CASES = "tests.bcast.fast_path_cases"


@pytest.fixture
def home(tmp_path) -> dict:
    """An environment whose home and caches are ``tmp_path``'s: nothing is written into the real home."""
    return {"HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "GPULAB_TUNING_TABLE": str(tmp_path / "absent.json")}


def _python(code: str, env: dict, **run) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, check=False, **run)


@needs_mpicc
def test_the_installed_build_links_no_mpi_and_becomes_every_name_of_the_entry(home):
    for rank, out in enumerate(run_mpi(2, f"{CASES}:entry_after_broadcasts", env=home, timeout=60)):
        assert out["status"]["active"] and out["entry"] == out["bcast_entry"] == "c", f"rank {rank}: {out}"
        assert out["c_everywhere"], f"rank {rank}: gpulab.bcast.bcast, entry.bcast or ALGORITHMS is not the C one"
        module = Path(out["status"]["module"])
        assert module == build.default_target(), f"rank {rank}: {module}"
        assert b"libmpi" not in module.read_bytes()  # mpi4py's MPI is the only one loaded


def test_nothing_is_compiled_or_loaded_on_import_or_on_gpulab_help(tmp_path, home):
    """MPICC and PATH's mpicc are a script that records being run; importing the broadcast and its entry,
    and ``gpulab --help``, must neither run it nor load the C module."""
    called = tmp_path / "compiler-was-called"
    recorder = tmp_path / "bin" / "mpicc"
    recorder.parent.mkdir()
    recorder.write_text(f"#!/bin/sh\ntouch {called}\nexit 1\n")
    recorder.chmod(0o755)
    env = {**home, "MPICC": str(recorder), "PATH": f"{recorder.parent}:{os.environ['PATH']}"}
    loaded = "print(sorted(m for m in sys.modules if m.endswith('_fastpath') or m == 'mpi4py.MPI'))"
    imported = _python(f"import sys, gpulab.bcast, gpulab.bcast.entry, gpulab.bcast.measurement.measure\n{loaded}",
                       env)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == "[]"
    helped = _python("import sys\nfrom gpulab.cli import main\nsys.argv = ['gpulab', '--help']\n"
                     f"try:\n    main()\nexcept SystemExit:\n    pass\n{loaded}", env)
    assert helped.returncode == 0, helped.stderr
    assert "usage: gpulab" in helped.stdout and helped.stdout.strip().endswith("[]"), helped.stdout[-500:]
    assert not called.exists(), "a compiler ran"


@needs_mpicc
def test_two_builds_into_one_place_at_once_leave_one_working_module(tmp_path, home):
    target = tmp_path / "c" / build.module_name()
    command = [sys.executable, "-m", "gpulab.bcast.runtime.build", "--target", str(target)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), **home}
    builds = [subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True) for _ in range(2)]
    done = [(b.wait(timeout=240), b.stdout.read(), b.stderr.read()) for b in builds]
    assert [rc for rc, _, _ in done] == [0, 0], done
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name, build.record_of(target).name]
    for rank, out in enumerate(run_mpi(2, f"{CASES}:entry_after_broadcasts", timeout=60,
                                       env={**home, "GPULAB_FASTPATH_MODULE": str(target)})):
        assert out["entry"] == "c" and out["status"]["module"] == str(target), f"rank {rank}: {out}"


@pytest.fixture
def readonly():
    """A read-only directory in /tmp (which anyone may cross, unlike pytest's own temporary folders)."""
    path = Path(tempfile.mkdtemp(prefix="gpulab-readonly-"))
    path.chmod(0o555)
    yield path
    path.chmod(0o755)
    shutil.rmtree(path)


def test_a_read_only_directory_fails_clearly_and_the_python_entry_runs(readonly, home):
    target = readonly / build.module_name()
    # root writes anywhere: the build then runs as nobody, for whom the mode is what it says
    as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    if as_user and not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: no directory is read-only here")
    done = subprocess.run([*as_user, sys.executable, "-m", "gpulab.bcast.runtime.build", "--target", str(target)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **home})
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"cannot write into {readonly}" in done.stderr and "GPULAB_FASTPATH_MODULE" in done.stderr, done.stderr
    assert list(readonly.iterdir()) == []
    for rank, out in enumerate(run_mpi(2, f"{CASES}:entry_after_broadcasts", timeout=60,
                                       env={**home, "GPULAB_FASTPATH_MODULE": str(target)})):
        assert out["entry"] == "python" and out["python_everywhere"], f"rank {rank}: {out}"
        assert out["bcast_entry_reason"].startswith(f"not built: no {target}"), f"rank {rank}: {out}"


@needs_mpicc
def test_a_build_for_another_numpy_stays_off_and_says_how_to_rebuild(tmp_path, home):
    target = tmp_path / build.module_name()
    shutil.copy(build.default_target(), target)
    record = json.loads(build.record_of(build.default_target()).read_text())
    build.record_of(target).write_text(json.dumps({**record, "numpy": "0.0"}))
    for rank, out in enumerate(run_mpi(2, f"{CASES}:entry_after_broadcasts", timeout=60,
                                       env={**home, "GPULAB_FASTPATH_MODULE": str(target)})):
        assert out["entry"] == "python" and out["python_everywhere"], f"rank {rank}: {out}"
        reason = out["bcast_entry_reason"]
        assert "built for another environment (numpy '0.0', running" in reason, reason
        assert "python -m gpulab.bcast.runtime.build" in reason, reason


@needs_mpicc
def test_an_mpi_with_other_handle_sizes_is_refused():
    module = _loaded(build.default_target())
    with pytest.raises(ValueError, match="built with another MPI's mpi.h"):
        module.configure({}, {}, None, RuntimeError, {}, (0, 0, 0, (1, 1, 1)))


def _loaded(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpulab.bcast.runtime._fastpath", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpulab_fastpath_python_keeps_the_python_entry(home):
    for rank, out in enumerate(run_mpi(2, f"{CASES}:entry_after_broadcasts", timeout=60,
                                       env={**home, "GPULAB_FASTPATH": "python"})):
        assert out["python_everywhere"] and out["bcast_entry_reason"] == "GPULAB_FASTPATH=python", f"rank {rank}"


@needs_mpicc
def test_a_plan_made_by_the_python_entry_runs_in_c():
    assert run_mpi(3, f"{CASES}:plans_carry_their_c_copy", timeout=60) == [[True, True]] * 3


@pytest.fixture(scope="module")
def openmpi() -> Path:
    """Debian's Open MPI (installed when missing): its libmpi."""
    require_openmpi()
    libdirs = subprocess.run(["mpicc.openmpi", "--showme:libdirs"], capture_output=True, text=True, check=True,
                             timeout=60).stdout.split()
    return next(Path(d, "libmpi.so").resolve() for d in libdirs if Path(d, "libmpi.so").exists())


def _on_openmpi(libmpi: Path, place: Path, mpicc: str) -> list[dict]:
    """Each rank's report (fast_path_cases.report_entry_on_this_mpi) of a 2-rank Open MPI job whose mpi4py
    runs on ``libmpi``, the C entry built with ``mpicc`` into ``place``."""
    module = place / build.module_name()
    built = subprocess.run([sys.executable, "-m", "gpulab.bcast.runtime.build", "--target", str(module),
                            "--mpicc", mpicc], cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert built.returncode == 0, built.stderr
    env = {**os.environ, "MPI4PY_LIBMPI": str(libmpi), "GPULAB_FASTPATH_MODULE": str(module),
           "PYTHONPATH": str(ROOT), "GPULAB_TUNING_TABLE": str(place / "absent.json"), "HOME": str(place)}
    exported = [flag for name in ("MPI4PY_LIBMPI", "GPULAB_FASTPATH_MODULE", "PYTHONPATH", "GPULAB_TUNING_TABLE",
                                  "HOME", "PATH") for flag in ("-x", name)]
    out = place / "reports"
    out.mkdir(parents=True)
    code = f"from tests.bcast.fast_path_cases import report_entry_on_this_mpi as report; report({str(out)!r})"
    run = subprocess.run(["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", *exported, "-n", "2",
                          sys.executable, "-c", code],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]


@needs_mpicc
def test_on_open_mpi_it_runs_when_built_with_open_mpi_and_stays_off_when_built_with_mpich(openmpi, tmp_path):
    own = _on_openmpi(openmpi, tmp_path / "own", "mpicc.openmpi")
    assert [r["rank"] for r in own] == [0, 1], own
    for r in own:
        assert r["library"].startswith("Open MPI") and r["entry"] == "c" and r["correct"], r
        assert r["objects"] == "TypeError" and r["c_plans"] == [True], r  # the binomial plan, in C
    wheel = _on_openmpi(openmpi, tmp_path / "wheel", build.mpicc())  # mpi.h of MPICH: other handle sizes
    for r in wheel:
        assert r["entry"] == "python" and r["correct"] and r["objects"] == "TypeError", r
        assert "built with another MPI's mpi.h" in r["reason"], r
