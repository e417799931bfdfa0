"""Fixtures for executing notebooks: a private IPYTHONDIR per test, and a cleanup that proves no engine is left."""

import pytest

from tests.notebooks.nbrun import cluster_processes, stop_leftovers


@pytest.fixture
def ipython_dir(tmp_path):
    """A fresh IPYTHONDIR; afterwards stop any cluster under it and assert none of its processes remain."""
    path = tmp_path / "ipython"
    path.mkdir()
    yield path
    stop_leftovers(path)
    remaining = [" ".join(p.cmdline()[:4]) for p in cluster_processes(path)]
    assert not remaining, f"processes survived the cleanup: {remaining}"
