"""binder/ holds what repo2docker needs: a Python version and requirements that install gpulab
with the notebook tools; MPI must come from PyPI wheels (no apt, no conda)."""

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_binder_installs_gpulab_with_notebooks_and_mpi_wheels():
    lines = [ln.strip() for ln in (ROOT / "binder/requirements.txt").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines == ["-e .[notebooks]"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = " ".join(project["dependencies"])
    assert "mpich" in deps and "mpi4py" in deps  # MPI from the wheel
    extra = " ".join(project["optional-dependencies"]["notebooks"])
    for tool in ("jupyterlab", "ipywidgets", "ipyparallel", "jupytext"):
        assert tool in extra
    assert not (ROOT / "binder/apt.txt").exists() and not (ROOT / "binder/environment.yml").exists()


def test_binder_python_satisfies_requires_python():
    runtime = (ROOT / "binder/runtime.txt").read_text().strip()
    major, minor = map(int, re.fullmatch(r"python-(\d+)\.(\d+)", runtime).groups())
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    low = tuple(map(int, re.fullmatch(r">=(\d+)\.(\d+)", requires).groups()))
    assert (major, minor) >= low
