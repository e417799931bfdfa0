"""Find and stop the processes of ipyparallel clusters started under one IPYTHONDIR (for tests).

Tests give every cluster a private IPYTHONDIR, so its mpiexec, proxies, engines,
controller and reaper can be told apart from other MPI jobs on the machine.
Stopping and killing is gpulab.cluster.processes' own, as used by the reaper.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from gpulab.cluster.processes import alive, kill_all, stop_cluster


def cluster_processes(ipython_dir) -> list[psutil.Process]:
    """Processes whose command line or environment names this IPYTHONDIR."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.pid == os.getpid() or not alive(proc):
                continue
            if str(ipython_dir) in " ".join(proc.info["cmdline"] or []) or \
                    proc.environ().get("IPYTHONDIR") == str(ipython_dir):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def stop_leftovers(ipython_dir, grace: float = 10) -> list[str]:
    """Wait up to grace s for this IPYTHONDIR's cluster processes to exit; stop and kill the rest.

    Returns the command lines of the processes still there after the grace time
    (an empty list means everything shut down by itself).
    """
    deadline = time.monotonic() + grace
    while cluster_processes(ipython_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [" ".join(p.cmdline()[:3]) for p in cluster_processes(ipython_dir)]
    for cluster_file in Path(ipython_dir).glob("profile_*/security/cluster-*.json"):
        stop_cluster(cluster_file)
    kill_all(cluster_processes(ipython_dir), timeout=10)
    return left


def heartbeat_check_ms() -> int:
    """(Run on an engine.) How often it checks the controller's pings: the period the controller told it, + 500 ms."""
    from ipyparallel.engine.app import IPEngine

    return IPEngine.instance().hb_check_period
