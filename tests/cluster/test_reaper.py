"""The reaper (gpulab.cluster.processes.reap) without a cluster: ``sleep`` stands in for the engines.

Its poll here is 60 s, so each test shows a wake-up: what it checks happens within seconds only
because the reaper was woken (its stdin closed), not by its next look. Each waits 2 s first, so that
the reaper has looked once (a reaper starting late would pass for the wrong reason, never fail).
"""

import contextlib
import subprocess
import sys
import time

import psutil

from gpulab.cluster.processes import wake_reaper

REAPER = "from gpulab.cluster.processes import reap; reap(owner={owner}, pids=[{engine}], cancel=[], poll=60)"
# a kernel in miniature: starts the reaper of an "engine", says so, and waits to be killed
OWNER = f"""
import subprocess, sys, time
code = {REAPER!r}.format(owner=__import__("os").getpid(), engine=sys.argv[1])
reaper = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
print(reaper.pid, flush=True)
time.sleep(120)
"""


def test_stopping_the_cluster_wakes_the_reaper_which_exits_at_once():
    engine = subprocess.Popen(["sleep", "120"])
    reaper = subprocess.Popen([sys.executable, "-c", REAPER.format(owner=psutil.Process().pid, engine=engine.pid)],
                              stdin=subprocess.PIPE)
    time.sleep(2)
    engine.kill()
    engine.wait()
    wake_reaper(reaper, timeout=15)  # kills it if it has not exited by then
    assert reaper.returncode == 0, "the reaper did not exit by itself within 15 s of its wake-up"


def test_the_death_of_its_owner_wakes_the_reaper_which_kills_the_engines():
    engine = subprocess.Popen(["sleep", "120"])
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(engine.pid)], stdout=subprocess.PIPE, text=True)
    reaper = psutil.Process(int(owner.stdout.readline()))
    try:
        time.sleep(2)
        owner.kill()  # its end of the reaper's stdin closes with it
        owner.wait()
        engine.wait(timeout=15)  # the reaper killed it
        assert engine.returncode == -9
        reaper.wait(timeout=15)
    finally:
        engine.kill()
        with contextlib.suppress(psutil.NoSuchProcess):
            reaper.kill()
