"""Faults on the emulated cluster: a link cut mid-broadcast or a rank killed ends the job within a
bounded time, with an error that names what failed, and nothing is left behind."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from gpulab.emulated import ClusterJobFailed, EmulatedCluster
from tests.emulated.util import leftovers, require_cluster
from tests.mpi_harness import ROOT

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def _cluster_possible():
    require_cluster()


def _when_running(ready: Path, ranks: int, action) -> threading.Thread:
    def wait_then_act():
        deadline = time.monotonic() + 60
        while not all(Path(f"{ready}.{r}").exists() for r in range(ranks)) and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = [int(Path(f"{ready}.{r}").read_text()) for r in range(ranks)]
        action(pids)

    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    return thread


def _run_broadcasts(cluster: EmulatedCluster, ready: Path, tmp_path: Path, nbytes: int):
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GPULAB_TEST_READY": str(ready)}
    return cluster.run(3, ["-m", "tests.mpi_worker", str(out), "tests.emulated.cases:bcast_forever",
                           f'{{"nbytes": {nbytes}}}'], timeout=90, env=env, cwd=ROOT)


def test_a_link_cut_mid_broadcast_ends_the_job_naming_the_node(tmp_path):
    ready = tmp_path / "ready"
    with EmulatedCluster(nodes=3, ranks_per_node=1, link="100mbit", fault_grace=3.0) as cluster:
        state = dict(cluster.state)
        cut = {}
        _when_running(ready, 3, lambda pids: (cut.setdefault("t", time.monotonic()), cluster.link_down(2)))
        with pytest.raises(ClusterJobFailed) as failure:
            _run_broadcasts(cluster, ready, tmp_path, 2 << 20)
        ended_after = time.monotonic() - cut["t"]
        assert cluster.links_down() == [2]
        assert cluster.pids_on_node(1) == cluster.pids_on_node(2) == cluster.pids_on_node(3) == []
    message = str(failure.value)
    assert "node 2 (10.77.0.2): link down" in message, message
    assert ended_after < 3.0 + 10, ended_after  # the grace period plus a little
    assert leftovers(state) == []


def test_a_killed_rank_ends_the_job_naming_the_rank(tmp_path):
    ready = tmp_path / "ready"
    with EmulatedCluster(nodes=3, ranks_per_node=1, link="1gbit") as cluster:
        state = dict(cluster.state)
        killed = {}

        def kill_rank_1(pids):
            time.sleep(0.5)  # the cluster has found every rank by now (it checks every 0.05 s)
            killed["t"] = time.monotonic()
            os.kill(pids[1], signal.SIGKILL)

        _when_running(ready, 3, kill_rank_1)
        with pytest.raises(ClusterJobFailed) as failure:
            _run_broadcasts(cluster, ready, tmp_path, 1 << 20)
        ended_after = time.monotonic() - killed["t"]
    message = str(failure.value)
    # hydra reports the first death it sees (sometimes a peer crashing on the broken connection);
    # the cluster lists the ranks in the order they ended, the killed one among the first
    assert "ranks in the order they ended: " in message, message
    assert "rank 1 (pid" in message and "node 2, 10.77.0.2)" in message, message
    assert ended_after < 15, ended_after
    assert leftovers(state) == []


def test_a_job_past_its_timeout_is_ended(tmp_path):
    with EmulatedCluster(nodes=2, ranks_per_node=2, link="1gbit") as cluster:
        state = dict(cluster.state)
        out = tmp_path / "out"
        out.mkdir()
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
               "GPULAB_TEST_READY": str(tmp_path / "ready")}
        # 12 s: room for the ranks to start on busy cores; every second past that is the suite's idle time
        with pytest.raises(ClusterJobFailed, match="timed out after 12 s"):
            cluster.run(4, ["-m", "tests.mpi_worker", str(out), "tests.emulated.cases:sleep_forever", "{}"],
                        timeout=12, env=env, cwd=ROOT)
        assert all((tmp_path / f"ready.{r}").exists() for r in range(4))  # it was running, not starting
        assert cluster.pids_on_node(1) == cluster.pids_on_node(2) == []
    assert leftovers(state) == []
