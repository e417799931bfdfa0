"""Shared fixture for tests that start ipyparallel clusters (tests/cluster, tests/notebooks)."""

import pytest

from tests.cluster.procs import cluster_processes, stop_leftovers


@pytest.fixture
def ipython_dir(tmp_path, monkeypatch):
    """A fresh IPYTHONDIR (also set in os.environ); afterwards no process of its clusters may remain.

    Processes still there 10 s after the test (its cluster was not stopped, and
    no reaper ended it) are killed, and the test fails naming them.
    """
    path = tmp_path / "ipython"
    path.mkdir()
    monkeypatch.setenv("IPYTHONDIR", str(path))
    monkeypatch.setenv("IPP_NONINTERACTIVE", "1")
    yield path
    leaked = stop_leftovers(path)
    remaining = [" ".join(p.cmdline()[:4]) for p in cluster_processes(path)]
    assert not remaining, f"processes survived the cleanup: {remaining}"
    assert not leaked, f"the test left cluster processes running (killed now): {leaked}"
