"""Shared fixtures: no test may leave MPI scratch files behind; clusters get a private IPYTHONDIR."""

import os
import warnings

import psutil
import pytest

from tests.cluster.procs import cluster_processes, stop_leftovers
from tests.mpi_harness import remove_leaked_scratch, scratch_on_disk

# The suite oversubscribes its cores (two pytest-xdist workers, MPI jobs of 2-12 ranks, engines beside
# notebook kernels), and an MPICH rank waiting for a message spins: three waiting ranks of a 4-rank job on
# 2 cores left the working one half a core. With heavy yield a waiting rank sleeps (nanosleep) between
# polls: the working rank gets a whole core, a wake-up costs about 90 us (Open MPI's mpirun likewise turns
# on mpi_yield_when_idle when it oversubscribes). The suite on 2 cores with -n 2: 848 s without, 713 s with.
# Subprocesses inherit it; tests/bcast/conftest.py turns it off again.
os.environ.setdefault("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")


# the folders whose tests take longest, run first: with pytest-xdist the last groups to start
# should be short ones, so that both workers finish together
LONGEST_FIRST = ("tests/slurm/", "tests/browser/", "tests/notebooks/", "tests/engine/", "tests/emulated/",
                 "tests/cluster/")


def pytest_itemcollected(item):
    """Groups for pytest-xdist (``--dist loadgroup``): a module whose tests share a module-scoped fixture
    (one batched MPI job for all its cases, one JupyterLab) stays on one worker, tests/slurm stays on one
    worker (its session-scoped Slurm testbeds bind fixed ports); any other test goes wherever a worker is free.

    Marked here, as each test is collected: xdist reads the marks in its own
    pytest_collection_modifyitems, which runs before a trylast one (marked there, the
    groups were ignored, and each worker ran its own copy of a shared job or testbed)."""
    module = item.nodeid.split("::")[0]
    slurm = module.startswith("tests/slurm/")
    shared = any(d.scope != "function" for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs
                 if d.baseid.split("/")[0] == "tests")  # ours, not pytest's or plugins' session fixtures
    if slurm or shared:
        item.add_marker(pytest.mark.xdist_group("slurm" if slurm else module))


@pytest.hookimpl(trylast=True)  # after the testbed order of tests/slurm/conftest.py, kept by a stable sort
def pytest_collection_modifyitems(items):
    """The longest folders first (LONGEST_FIRST); xdist sends its groups out largest first anyway."""
    rank = lambda item: next((i for i, folder in enumerate(LONGEST_FIRST) if item.nodeid.startswith(folder)),  # noqa: E731
                             len(LONGEST_FIRST))
    items.sort(key=rank)


def pytest_runtest_setup(item):
    """On a pytest-xdist worker, fails a grouped test that xdist did not group. xdist marks a grouped test
    by a suffix to its id, which pytest 9.2's ids ignore (pytest-xdist issue #1386; pyproject.toml keeps
    pytest below 9.2 until xdist handles them); the groups were lost without a word before."""
    if item.config.getoption("loadgroup", False) and item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
        pytest.fail("pytest-xdist ignored this test's xdist_group: each worker would run its own copy of the "
                    "shared job or testbed (tests/conftest.py)")


@pytest.fixture(autouse=True)
def no_mpi_scratch_left():
    """Fails a test after which hydra's /tmp/hydra_hwloc_xmlfile_* or MPICH's /dev/shm/mpich_shm_* files of a
    killed or aborted job remain (and removes them): SIGKILL and MPI_Abort leave them, so whatever kills
    a job must remove them too (gpulab.cluster.processes.kill_all and the notebook reaper, the emulated
    cluster's keeper and EmulatedCluster.run, tests.mpi_harness.run_mpi).

    The files do not say whose they are: while MPI jobs that are not this run's are running on the
    machine (another test run, a benchmark), a leak is only a warning, since theirs may be the files.
    """
    before, shared = scratch_on_disk(), bool(foreign_mpi_jobs())
    yield
    leaked = remove_leaked_scratch(before)
    if leaked and (shared or foreign_mpi_jobs()):
        warnings.warn(f"MPI scratch files of a killed or aborted job appeared during the test and remain (removed "
                      f"now); other MPI jobs ran on this machine meanwhile, so they may be theirs: {sorted(leaked)}",
                      stacklevel=1)
        return
    assert not leaked, f"the test left MPI scratch files of a killed or aborted job (removed now): {sorted(leaked)}"


def foreign_mpi_jobs() -> list[int]:
    """Pids of MPI launchers on this machine that this test run did not start (with pytest-xdist, the
    run is the controller and all its workers: a leak from the other worker's jobs fails too)."""
    run = psutil.Process().parent() if os.environ.get("PYTEST_XDIST_WORKER") else psutil.Process()
    ours = {proc.pid for proc in run.children(recursive=True)}
    return [proc.pid for proc in psutil.process_iter(["name"])
            if proc.info["name"] in ("mpiexec", "mpiexec.hydra", "hydra_pmi_proxy") and proc.pid not in ours]


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
