"""Local MPI engines: ids are ranks, the controller is local, and nothing survives a stop, an
exception, a hang, a dead engine or a killed kernel. Clusters are real (seconds to start): the tests
that leave it usable share one."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from gpulab import host
from gpulab.cluster import EngineDied, EngineFailed, EngineTimeout, start_engines, stop_stale_clusters
from gpulab.cluster.ipp_engines import HEARTBEAT_MS
from tests.cluster.procs import cluster_processes, heartbeat_check_ms, stop_leftovers


def rank_and_size():
    from mpi4py import MPI

    return MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size


def rank0_waits_alone():
    from mpi4py import MPI

    if MPI.COMM_WORLD.rank == 0:
        MPI.COMM_WORLD.barrier()  # the others never come


def rank1_exits():
    import time

    from mpi4py import MPI

    if MPI.COMM_WORLD.rank == 1:
        os._exit(3)
    time.sleep(60)


def rank1_raises():
    from mpi4py import MPI

    if MPI.COMM_WORLD.rank == 1:
        raise ValueError("bad input on rank 1")


@pytest.fixture(scope="module")
def shared_engines(module_ipython_dir):
    """One cluster for the tests below that leave it usable (one that ends its engines restarts them,
    as its check that restart recovers): two engines that see two GPUs, a 3 s %%px cell watchdog."""
    with pytest.MonkeyPatch.context() as gpus:
        gpus.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # pretend two GPUs: each local rank gets one
        engines = start_engines(2, cell_timeout=3)
    with engines:
        yield engines
    assert stop_leftovers(module_ipython_dir, grace=3) == []


@pytest.fixture
def engines(shared_engines):
    yield shared_engines
    try:
        shared_engines.run(rank_and_size, timeout=10)
    except Exception:  # a failed test left them broken: the next test gets fresh engines
        shared_engines.restart()


def test_engines_are_ranks_pin_gpus_and_listen_on_localhost(engines):
    assert engines.ids == [0, 1]
    assert engines.run(rank_and_size) == [(0, 2), (1, 2)]
    assert [(p["rank"], p["local_rank"], p["local_size"], p["gpu"]) for p in engines.placement] == \
        [(0, 0, 2, "3"), (1, 1, 2, "5")]
    controller = psutil.Process(engines.cluster.controller.pid)
    listening = {c.laddr.ip for c in controller.net_connections("inet") if c.status == psutil.CONN_LISTEN}
    assert listening == {"127.0.0.1"}
    engines.view.execute("x = 40 + 2")  # the view blocks and reaches every engine
    assert engines.view["x"] == [42, 42]


def test_the_controller_pings_every_half_second_so_engines_register_fast(engines):
    # the controller accepts an engine at its first answered ping: at ipyparallel's 3 s a start waits for it
    assert engines.run(heartbeat_check_ms) == [HEARTBEAT_MS + 500] * 2 == [1000] * 2


def test_an_error_is_reported_and_leaves_the_engines_usable(engines):
    with pytest.raises(EngineFailed, match="engine 1: ValueError: bad input on rank 1"):
        engines.run(rank1_raises)
    assert engines.run(rank_and_size) == [(0, 2), (1, 2)]


def idle_machine(monkeypatch, cores=2, load=0.0):
    """The machine as the limits read it at the start: ``cores`` cores at ``load``."""
    monkeypatch.setattr(host, "snapshot", lambda ranks=None: host.Snapshot(cores, load, ranks))


def test_a_hang_is_reported_in_bounded_time_with_where_each_engine_is(engines, monkeypatch):
    idle_machine(monkeypatch)  # a core per rank, nothing else: the limit as written
    start = time.monotonic()
    with pytest.raises(EngineTimeout) as hang:
        engines.run(rank0_waits_alone, timeout=3, what="a lonely barrier")
    assert time.monotonic() - start < 10
    message = str(hang.value)
    assert message.startswith("a lonely barrier on 2 engines did not finish within 3 s (at the start: 2 cores, "
                              "load 0.0, 2 ranks (1 per core)); now load 0.0.")
    assert "Engine 0 was at rank0_waits_alone (test_engines.py:" in message and "Engine 1 finished." in message
    assert "Try: the unfinished engines probably wait in a collective" in message
    engines.restart()
    assert engines.run(rank_and_size) == [(0, 2), (1, 2)]


def test_a_slow_job_gets_the_limit_stretched_for_a_busy_machine(engines, monkeypatch):
    idle_machine(monkeypatch, load=18.0)  # 2 ranks and 18 other runnable processes on 2 cores: 10x
    assert engines.run(time.sleep, 4, timeout=1, what="a 4 s sleep") == [None, None]
    idle_machine(monkeypatch)  # the same job on an idle machine passes its limit
    with pytest.raises(EngineTimeout, match=r"^a 4 s sleep on 2 engines did not finish within 1 s \(at the start"):
        engines.run(time.sleep, 4, timeout=1, what="a 4 s sleep")
    engines.restart()


def test_a_dead_engine_is_reported_at_once(engines):
    start = time.monotonic()
    with pytest.raises(EngineDied, match=r"engine\(s\) \[.*1.*\] died while running rank1_exits"):
        engines.run(rank1_exits, timeout=60)
    assert time.monotonic() - start < 10
    engines.restart()
    assert engines.run(rank_and_size) == [(0, 2), (1, 2)]


def test_cell_watchdog_ends_a_stuck_execute_and_restart_recovers(engines):
    import ipyparallel as ipp

    from gpulab.cluster.engine_side import stopped_cells

    start = time.monotonic()
    with pytest.raises(ipp.error.CompositeError, match="EngineError"):  # what %%px raises
        engines.view.execute("from mpi4py import MPI\nif MPI.COMM_WORLD.rank == 0:\n    MPI.COMM_WORLD.barrier()",
                             silent=False)  # as %%px sends it (silent cells are bounded too, without source)
    assert time.monotonic() - start < engines.cell_limit.seconds + 12  # 3 s, stretched as the engines started
    assert stopped_cells(engines.dump_dir) == {0: "cell line 3: MPI.COMM_WORLD.barrier()"}
    engines.restart()
    assert engines.run(rank_and_size) == [(0, 2), (1, 2)]
    engines.view.execute("y = 1")  # a quick cell is not touched by the watchdog
    assert engines.view["y"] == [1, 1]


def test_exception_in_with_block_stops_all_and_a_second_cluster_starts(ipython_dir):
    with pytest.raises(KeyError):
        with start_engines(2):
            raise KeyError("boom")
    assert stop_leftovers(ipython_dir, grace=3) == []
    with start_engines(2) as engines:
        assert engines.ids == [0, 1]
    assert stop_leftovers(ipython_dir, grace=3) == []


OWNER = """
from gpulab.cluster import start_engines
engines = start_engines(2)
print("ready", engines.cluster.cluster_id, flush=True)
import time; time.sleep(600)
"""


def test_engines_of_a_killed_kernel_are_stopped(ipython_dir):
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    try:
        ready, cluster_id = owner.stdout.readline().split()
        assert ready == "ready"
        assert any("mpiexec" in " ".join(p.cmdline()) for p in cluster_processes(ipython_dir))
    finally:
        owner.send_signal(signal.SIGKILL)  # no atexit, no finally: like a kernel killed at a timeout
        owner.wait()
    deadline = time.monotonic() + 10
    while cluster_processes(ipython_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert cluster_processes(ipython_dir) == []  # the reaper stopped mpiexec, engines and controller
    # its cluster file remains; the next start_engines in the profile removes it
    assert stop_stale_clusters(str(ipython_dir / "profile_gpulab")) == [cluster_id]


@pytest.mark.parametrize("n", [0, -2, 2.5, True])
def test_start_engines_refuses_a_count_that_is_not_a_positive_int(n, ipython_dir):
    with pytest.raises(ValueError, match="positive number of engines"):
        start_engines(n)
    assert cluster_processes(ipython_dir) == []


def test_a_launcher_that_fails_shows_its_output_within_seconds(ipython_dir, monkeypatch):
    monkeypatch.setenv("GPULAB_MPIEXEC_ARGS", "--no-such-flag")  # hydra refuses it and exits at once
    start = time.monotonic()
    with pytest.raises(EngineDied, match="the engines' mpiexec exited before all 2 engines connected") as died:
        start_engines(2, start_timeout=120)
    assert time.monotonic() - start < 60, "it waited for the start timeout instead"
    assert "no-such-flag" in str(died.value), str(died.value)  # the launcher's own complaint is shown
    assert stop_leftovers(ipython_dir, grace=3) == []
