"""A real two-node Slurm for the tests in this directory, shared by all of them (seconds to start).

Two of them, one after the other: ``loopback`` (both slurmd's on 127.0.0.1) and
``emulated`` (each slurmd in a node of an emulated cluster, slurmctld and
Slurm's commands in its login node; see tests/testbeds/slurm). Tests
run on both unless they ask for one (``@pytest.mark.parametrize("slurm",
["loopback"], indirect=True)``); all of one testbed's tests run before the
other's, so that each testbed starts once.

Debian's slurm-wlm and munge are installed when missing (root and apt-get);
where that is impossible (or, for the emulated testbed, where no network
namespaces can be made) the tests skip, except under CI=true where they
must run. Afterwards every job is cancelled, the daemons are stopped and
their directory is removed; a test that leaves a job in the queue fails.

    python -m pytest -m "not slurm"      # deselect them
"""

from __future__ import annotations

import os
import time

import pytest

from gpulab.emulated import ClusterUnavailable
from tests.slurm.time_limit import TimeLimitJob
from tests.testbeds.slurm import Node, SlurmTestbed, SlurmUnavailable, ensure_slurm

NODES = ("n1", "n2")
# declared, whatever the machine has: 2 engines per node, the JupyterLab job's 2 (docs/cluster.md's
# req_nprocs) and 1 for the time-limit job running alongside (time_limit.py; with 4 the hub test's
# engines waited for that job to end), and 2 more: three learners' servers and their engines' jobs at
# once (test_class.py)
CPUS_PER_NODE = 7
GPUS_PER_NODE = 2  # fake GPUs: Slurm sets CUDA_VISIBLE_DEVICES in jobs, pin_gpu picks one per engine
EMULATED_LINK = "1gbit"


TESTBEDS = ("loopback", "emulated")


def pytest_itemcollected(item):
    item.add_marker(pytest.mark.slurm)  # here, before -m "not slurm" selects (pytest_collection_modifyitems)


@pytest.hookimpl(trylast=True)  # after pytest's own reordering, which left the two testbeds interleaved
def pytest_collection_modifyitems(items):
    """All of one testbed's tests, then all of the other's, so that each testbed starts once (interleaved,
    both were started twice)."""
    here = os.path.dirname(__file__)
    places = [i for i, item in enumerate(items) if str(item.fspath).startswith(here)]
    # the test that reads the time-limit job's outcome last, the job running meanwhile (time_limit.py)
    ordered = sorted((items[i] for i in places), key=lambda item: (order_of_testbed(item),
                                                                   "time_limit_job" in item.fixturenames))
    for i, item in zip(places, ordered):
        items[i] = item


def testbed_of(item) -> str | None:
    return getattr(item, "callspec", None) and item.callspec.params.get("slurm")


def order_of_testbed(item) -> int:
    """0 for a test that uses no testbed, then 1, 2 in the order of TESTBEDS."""
    testbed = testbed_of(item)
    return TESTBEDS.index(testbed) + 1 if testbed else 0


@pytest.fixture(scope="session", params=TESTBEDS)
def slurm(request):
    """The running SlurmTestbed (``slurm.env()``, ``slurm.jobs()``, ``slurm.run("sinfo")``)."""
    try:
        ensure_slurm()
    except SlurmUnavailable as err:
        if os.environ.get("CI"):
            pytest.fail(f"Slurm must run in CI: {err}")
        pytest.skip(str(err))
    if os.geteuid() != 0:  # munged and slurmd's as root; the hub test makes a user
        if os.environ.get("CI"):
            pytest.fail("the Slurm tests must run as root in CI")
        pytest.skip("the Slurm testbed needs root (it starts slurmctld, slurmd's and munged)")
    testbed = SlurmTestbed([Node(name) for name in NODES], cpus=CPUS_PER_NODE, gpus=GPUS_PER_NODE,
                           emulated=request.param == "emulated", link=EMULATED_LINK)
    try:
        testbed.start()
    except ClusterUnavailable as err:  # no network namespaces here (a container without CAP_NET_ADMIN)
        if os.environ.get("CI"):
            pytest.fail(f"the emulated Slurm must run in CI: {err}")
        pytest.skip(str(err))
    try:
        yield testbed
    finally:
        problems = testbed.stop()
        assert not problems, f"Slurm did not stop cleanly: {problems}"


@pytest.fixture
def slurm_env(slurm, monkeypatch):
    """SLURM_CONF (and PATH) in os.environ for this test (sbatch, squeue and scancel find the test cluster);
    afterwards the queue must be empty."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    monkeypatch.setenv("PATH", slurm.env()["PATH"])  # emulated: the wrappers that reach its login node
    for name in [k for k in os.environ if k.startswith(("SLURM_JOB", "SLURM_NTASKS", "SBATCH_", "SRUN_"))]:
        monkeypatch.delenv(name)  # a developer running the tests inside an allocation
    before = set(slurm.jobs())  # jobs of module-wide fixtures are theirs to clean up
    yield slurm
    deadline = time.monotonic() + 20  # finished jobs are COMPLETING for a moment
    while set(slurm.jobs()) - before and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [line for line in slurm.run("squeue", "-h", "-o", "%i %T %j", check=False).stdout.splitlines()
            if line.split()[0] not in before]
    if left:
        slurm.cancel_all()
    assert not left, f"the test left Slurm jobs behind: {left}"


@pytest.fixture(scope="session")
def time_limit_jobs():
    """The background time-limit job of each testbed that has one (tests/slurm/time_limit.py)."""
    jobs = {}
    yield jobs
    left = [proc for job in jobs.values() for proc in job.finish()]  # the test that reads one finishes it
    assert not left, f"the time-limit job left processes: {left}"


@pytest.fixture(autouse=True)
def time_limit_job_in_the_background(request, time_limit_jobs, tmp_path_factory):
    """Starts the time-limit job with the first test of its testbed, when a test of this run reads it."""
    testbed = testbed_of(request.node)
    if testbed and testbed not in time_limit_jobs and any(
            "time_limit_job" in item.fixturenames and testbed_of(item) == testbed for item in request.session.items):
        job = time_limit_jobs[testbed] = TimeLimitJob(request.getfixturevalue("slurm"),
                                                      tmp_path_factory.mktemp("ipython-timelimit"))
        job.start()
    yield


@pytest.fixture
def time_limit_job(request, time_limit_jobs, time_limit_job_in_the_background):
    """The testbed's time-limit job, running since its first test; afterwards stopped, leaving nothing."""
    job = time_limit_jobs[testbed_of(request.node)]
    yield job
    left = job.finish()
    assert not left, f"the time-limit job left processes: {left}"
