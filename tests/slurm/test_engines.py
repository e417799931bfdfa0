"""start_engines(launcher="slurm") against a real Slurm: one sbatch job, engines on both nodes in one MPI
world (srun --mpi=pmi2), node-local ranks and fake GPUs as Slurm sets them, a broadcast and a 4D engine
step through them, a clean stop, and a job killed by Slurm reported within a bounded time.

The engines run on both testbeds (conftest.py); on the emulated one each node is a network namespace
and the controller listens on unix sockets (ipc://), which the engines reach through the file system.
How Slurm reports a cancelled or timed-out job does not depend on where its nodes are: those two tests
run on the emulated testbed only, alongside the time-limit job's 60-90 s wait (tests/slurm/time_limit.py).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from gpulab.cluster import EngineDied, start_engines
from gpulab.cluster.ipp_engines import HEARTBEAT_MS
from tests.cluster.procs import cluster_processes, heartbeat_check_ms
from tests.slurm.time_limit import SLURM, controller_on_ipc, sleeper


def where_am_i():
    import os

    from mpi4py import MPI

    from gpulab.bcast.algorithms.hierarchical import node_of_rank

    world = MPI.COMM_WORLD
    return {"rank": world.rank, "size": world.size, "node": os.environ.get("SLURMD_NODENAME"),
            "network": os.readlink("/proc/self/ns/net"),
            "job": os.environ.get("SLURM_JOB_ID"), "hierarchical_node": node_of_rank(world, None)[world.rank]}


def engine_step():
    """One measured iteration of the 4D-parallel engine on a (row, col, depth, data) = (1, 2, 1, 2) grid."""
    from mpi4py import MPI

    from gpulab.engine.perf.timing import bench_config, measure

    row = measure(MPI.COMM_WORLD, bench_config(), (1, 2, 1, 2), 4, iters=1, warmup=1, seq_len=16, device="fake")
    return None if row is None else {"iter_s": row["iter_s"], "world": row["world"], "shape": row["shape"]}


def job_state(slurm, job_id):
    return slurm.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).stdout.strip()


@pytest.mark.parametrize("slurm", ["loopback"], indirect=True)
def test_engines_as_a_slurm_job_on_two_nodes(slurm_env, ipython_dir):
    check_engines_on_two_nodes(slurm_env, ipython_dir, SLURM)


@pytest.mark.parametrize("slurm", ["emulated"], indirect=True)
def test_engines_as_a_slurm_job_on_two_emulated_nodes(slurm_env, ipython_dir):
    check_engines_on_two_nodes(slurm_env, ipython_dir, controller_on_ipc(slurm_env, ipython_dir))


def check_engines_on_two_nodes(slurm, ipython_dir, options: dict) -> None:
    t0 = time.monotonic()
    with start_engines(4, **options) as engines:
        connected_s = time.monotonic() - t0
        assert engines.job_id and job_state(slurm, engines.job_id) == "RUNNING"
        where = engines.run(where_am_i, timeout=60)
        assert [w["rank"] for w in where] == [0, 1, 2, 3] and {w["size"] for w in where} == {4}  # one world
        assert [w["node"] for w in where] == ["n1", "n1", "n2", "n2"]
        assert {w["job"] for w in where} == {engines.job_id}
        assert [w["hierarchical_node"] for w in where] == [0, 0, 1, 1]  # hierarchical sees Slurm's nodes
        assert engines.run(heartbeat_check_ms) == [HEARTBEAT_MS + 500] * 4  # the controller's fast pings
        networks = {w["node"]: w["network"] for w in where}
        here = os.readlink("/proc/self/ns/net")
        if slurm.emulated:  # each node its own network namespace, neither this machine's
            assert len(set(networks.values())) == 2 and here not in networks.values(), (networks, here)
        else:
            assert set(networks.values()) == {here}, (networks, here)
        # Slurm exposed both fake GPUs of a node to the job; each engine pinned the one of its local rank
        assert [(p["local_rank"], p["local_size"], p["gpu"]) for p in engines.placement] == \
            [(0, 2, "0"), (1, 2, "1"), (0, 2, "0"), (1, 2, "1")]

        from gpulab.cluster.bcast_runner import EngineRunner

        runner = EngineRunner(engines, iters=5, warmup=1)
        rows = [runner.measure(name, 1 << 16) for name in ("hierarchical", "chain", "mpi")]
        assert all(r["valid"] and r["avg_us"] > 0 and r["p"] == 4 for r in rows), rows
        step = engines.run(engine_step, timeout=120, what="a 4D engine step")
        assert step[0]["world"] == 4 and step[0]["iter_s"] > 0 and step[1:] == [None] * 3
        job_id = engines.job_id
    t_stop = time.monotonic()
    while job_state(slurm, job_id) and time.monotonic() - t_stop < 20:
        time.sleep(0.3)
    assert job_state(slurm, job_id) == "", "engines.stop() left the job in the queue"
    assert cluster_processes(ipython_dir) == []
    assert not list(Path.cwd().glob("*.sbatch")), "the job script belongs in the profile's log directory"
    print(f"\nslurm engines{' (emulated nodes)' if slurm.emulated else ''}: 4 connected in {connected_s:.1f} s; "
          f"stop and queue empty in {time.monotonic() - t_stop:.1f} s; hierarchical {rows[0]['avg_us']:.0f} us, "
          f"4D step {step[0]['iter_s'] * 1e3:.0f} ms")


@pytest.mark.parametrize("slurm", ["emulated"], indirect=True)  # while the time-limit job waits
def test_a_job_cancelled_from_outside_is_reported_not_a_hang(slurm_env, ipython_dir):
    slurm = slurm_env
    with start_engines(2, **{**controller_on_ipc(slurm, ipython_dir), "ranks_per_node": 1}) as engines:
        job_id = engines.job_id
        killer = threading.Timer(2, lambda: slurm.run("scancel", job_id))
        killer.start()
        t0 = time.monotonic()
        try:
            with pytest.raises(EngineDied) as died:
                engines.run(sleeper, timeout=250, what="a long task")
        finally:
            killer.cancel()
        reported_s = time.monotonic() - t0
        assert f"the Slurm job {job_id} of the engines ended (CANCELLED) while engine(s) [0, 1] were running " \
               "a long task" in str(died.value), str(died.value)
        assert reported_s < 15
        print(f"\nscancel: reported after {reported_s:.1f} s")
    deadline = time.monotonic() + 20  # Slurm keeps an ended job visible for MinJobAge
    while job_state(slurm, job_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert job_state(slurm, job_id) == ""


@pytest.mark.parametrize("slurm", ["emulated"], indirect=True)
def test_a_job_past_its_time_limit_is_reported_not_a_hang(time_limit_job, slurm_env):
    # started with the testbed's first test (tests/slurm/time_limit.py), this test runs last
    time_limit_job.join(200)
    assert not time_limit_job.is_alive(), "no report 200 s after the job's 1-minute time limit"
    assert isinstance(time_limit_job.error, EngineDied), repr(time_limit_job.error)
    job_id = time_limit_job.engines.job_id
    assert f"the Slurm job {job_id} of the engines ended (TIMEOUT)" in str(time_limit_job.error), \
        str(time_limit_job.error)
    print(f"\ntime limit: reported {time_limit_job.reported_s:.1f} s after the task started")
