"""Shared fixtures: no test may leave MPI scratch files behind; clusters get a private IPYTHONDIR."""

import pytest

from tests.cluster.procs import cluster_processes, stop_leftovers
from tests.mpi_harness import remove_leaked_scratch, scratch_on_disk


@pytest.fixture(autouse=True)
def no_mpi_scratch_left():
    """Fails a test after which hydra's /tmp/hydra_hwloc_xmlfile_* or MPICH's /dev/shm/mpich_shm_* files of a
    killed or aborted job remain (and removes them): SIGKILL and MPI_Abort leave them, so whatever kills
    a job must remove them too (gpulab.cluster.processes.kill_all, tests.mpi_harness.run_mpi)."""
    before = scratch_on_disk()
    yield
    leaked = remove_leaked_scratch(before)
    assert not leaked, (f"MPI scratch files of a killed or aborted job appeared during the test and remain (removed now; "
                        f"a job killed meanwhile by another run on this machine would leave them too): {sorted(leaked)}")


@pytest.fixture
def ipython_dir(tmp_path, monkeypatch):
    """A fresh IPYTHONDIR (also set in os.environ); afterwards no process of its clusters may remain.

    Processes still there 10 s after the test (its cluster was not stopped, and
    no reaper ended it) are killed, and the test fails naming them.
    """
    yield from private_ipython_dir(tmp_path / "ipython", monkeypatch)


@pytest.fixture(scope="module")
def module_ipython_dir(tmp_path_factory):
    """ipython_dir for a module's shared cluster."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield from private_ipython_dir(tmp_path_factory.mktemp("ipython"), monkeypatch)


def private_ipython_dir(path, monkeypatch):
    path.mkdir(exist_ok=True)
    monkeypatch.setenv("IPYTHONDIR", str(path))
    monkeypatch.setenv("IPP_NONINTERACTIVE", "1")
    yield path
    leaked = stop_leftovers(path)
    remaining = [" ".join(p.cmdline()[:4]) for p in cluster_processes(path)]
    assert not remaining, f"processes survived the cleanup: {remaining}"
    assert not leaked, f"the test left cluster processes running (killed now): {leaked}"
