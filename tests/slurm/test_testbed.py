"""The emulated testbed leaves nothing behind even when the process that started it is killed with SIGKILL:
its daemons (munged and slurmctld in the login node, the slurmd's in theirs) and a running job's tasks are
all inside the emulated cluster's namespaces, which the cluster's keeper empties and takes down when its
creator is gone. Only the testbed's directory stays (as on the loopback testbed); the test removes it."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from gpulab.procfs import pids_inside
from tests.emulated.util import leftovers, reap_orphans
from tests.mpi_harness import ROOT
from tests.slurm.conftest import order_of_testbed

STARTER = r"""
import json, subprocess, sys, time
from tests.testbeds.slurm import Node, SlurmTestbed
slurm = SlurmTestbed([Node("n1"), Node("n2")], cpus=1, gpus=0, emulated=True).start()
subprocess.run(["sbatch", "-N", "2", "--output=/dev/null", "--wrap", "srun sleep 300"], env=slurm.env(),
               check=True, capture_output=True)
print(json.dumps({"dir": str(slurm.dir), "cluster": slurm.emulated.state}), flush=True)
time.sleep(300)
"""
PR_SET_CHILD_SUBREAPER = 36


def names_inside(nodes: set[int]) -> set[str]:
    """The names of the processes in these network namespaces; one that ends while it is read is left out
    (a process listed can be gone a moment later)."""
    names = set()
    for pid in pids_inside(nodes):
        try:
            names.add(psutil.Process(pid).name())
        except psutil.NoSuchProcess:
            pass
    return names


@pytest.fixture
def subreaper():
    """Orphans (the keeper, the daemons) come to this process, which reaps them: no zombies kept."""
    libc = ctypes.CDLL(None)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
    yield
    reap_orphans()
    libc.prctl(PR_SET_CHILD_SUBREAPER, 0)


@pytest.mark.parametrize("slurm", ["emulated"], indirect=True)  # where the emulated testbed can run at all
def test_a_killed_creator_leaves_no_daemon_job_or_namespace(slurm, subreaper):
    starter = subprocess.Popen([sys.executable, "-c", STARTER], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    state = None
    try:
        state = json.loads(starter.stdout.readline())
        nodes = set(state["cluster"]["inodes"][:2])
        deadline = time.monotonic() + 30
        while "sleep" not in names_inside(nodes):
            assert time.monotonic() < deadline, "the job's tasks did not start within 30 s"
            time.sleep(0.2)
        starter.send_signal(signal.SIGKILL)
        starter.wait(timeout=10)
        deadline = time.monotonic() + 30
        while leftovers(state["cluster"]) and time.monotonic() < deadline:
            reap_orphans()
            time.sleep(0.1)
        assert leftovers(state["cluster"]) == []
        named = [p.pid for p in psutil.process_iter(["cmdline", "status"])
                 if state["dir"] in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE]
        assert named == [], "processes of the killed testbed are still running"
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()
        starter.stdout.close()
        if state is not None:
            shutil.rmtree(state["dir"], ignore_errors=True)


def test_all_of_one_testbeds_tests_run_before_the_others(request):
    # conftest.py orders them so: interleaved, each testbed would be started several times, and with the
    # loopback one the time-limit job of test_engines.py, which waits out a 1-minute limit
    ranks = [order_of_testbed(item) for item in request.session.items if item.nodeid.startswith("tests/slurm/")]
    assert ranks == sorted(ranks), [item.nodeid for item in request.session.items]


def test_not_slurm_deselects_them_all():
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                           "-m", "not slurm", "tests/slurm"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "no tests collected" in done.stdout and " deselected" in done.stdout, done.stdout[-2000:]
