"""start_engines(launcher="slurm") against a real Slurm: one sbatch job, engines on both nodes in one MPI
world (srun --mpi=pmi2), node-local ranks and fake GPUs as Slurm sets them, a broadcast and a 4D engine
step through them, a clean stop, and a job killed by Slurm reported within a bounded time."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from gpulab.cluster import EngineDied, start_engines
from tests.cluster.procs import cluster_processes

SLURM = dict(launcher="slurm", controller_ip="127.0.0.1", gpus_per_node=2, ranks_per_node=2, time="00:10:00")


def where_am_i():
    import os

    from mpi4py import MPI

    from gpulab.bcast.hierarchical import node_of_rank

    world = MPI.COMM_WORLD
    return {"rank": world.rank, "size": world.size, "node": os.environ.get("SLURMD_NODENAME"),
            "job": os.environ.get("SLURM_JOB_ID"), "hierarchical_node": node_of_rank(world, None)[world.rank]}


def engine_step():
    """One measured iteration of the 4D-parallel engine on a (row, col, depth, data) = (1, 2, 1, 2) grid."""
    from mpi4py import MPI

    from gpulab.engine.bench import bench_config, measure

    row = measure(MPI.COMM_WORLD, bench_config(), (1, 2, 1, 2), 4, iters=1, warmup=1, seq_len=16, device="fake")
    return None if row is None else {"iter_s": row["iter_s"], "world": row["world"], "shape": row["shape"]}


def sleeper():
    import time

    time.sleep(300)


def job_state(slurm, job_id):
    return slurm.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).stdout.strip()


def test_engines_as_a_slurm_job_on_two_nodes(slurm_env, ipython_dir):
    slurm = slurm_env
    t0 = time.monotonic()
    with start_engines(4, **SLURM) as engines:
        connected_s = time.monotonic() - t0
        assert engines.job_id and job_state(slurm, engines.job_id) == "RUNNING"
        where = engines.run(where_am_i, timeout=60)
        assert [w["rank"] for w in where] == [0, 1, 2, 3] and {w["size"] for w in where} == {4}  # one world
        assert [w["node"] for w in where] == ["n1", "n1", "n2", "n2"]
        assert {w["job"] for w in where} == {engines.job_id}
        assert [w["hierarchical_node"] for w in where] == [0, 0, 1, 1]  # hierarchical sees Slurm's nodes
        # Slurm exposed both fake GPUs of a node to the job; each engine pinned the one of its local rank
        assert [(p["local_rank"], p["local_size"], p["gpu"]) for p in engines.placement] == \
            [(0, 2, "0"), (1, 2, "1"), (0, 2, "0"), (1, 2, "1")]

        from gpulab.widgets import EngineRunner

        runner = EngineRunner(engines, iters=5, warmup=1)
        rows = [runner.measure(name, 1 << 16) for name in ("hierarchical", "chain", "mpi")]
        assert all(r["valid"] and r["avg_us"] > 0 and r["p"] == 4 for r in rows), rows
        step = engines.run(engine_step, timeout=120, what="a 4D engine step")
        assert step[0]["world"] == 4 and step[0]["iter_s"] > 0 and step[1:] == [None] * 3
        job_id = engines.job_id
    t_stop = time.monotonic()
    while job_state(slurm, job_id) and time.monotonic() - t_stop < 15:
        time.sleep(0.3)
    assert job_state(slurm, job_id) == "", "engines.stop() left the job in the queue"
    assert cluster_processes(ipython_dir) == []
    assert not list(Path.cwd().glob("*.sbatch")), "the job script belongs in the profile's log directory"
    print(f"\nslurm engines: 4 connected in {connected_s:.1f} s; stop and queue empty in "
          f"{time.monotonic() - t_stop:.1f} s; hierarchical {rows[0]['avg_us']:.0f} us, "
          f"4D step {step[0]['iter_s'] * 1e3:.0f} ms")


@pytest.mark.parametrize("how", ["scancel", "time_limit"])
def test_a_job_that_slurm_ends_is_reported_not_a_hang(slurm_env, ipython_dir, how):
    slurm = slurm_env
    with start_engines(2, **{**SLURM, "ranks_per_node": 1}) as engines:
        job_id = engines.job_id
        if how == "scancel":
            killer = threading.Timer(2, lambda: slurm.run("scancel", job_id))
        else:  # the job's time limit drops below its run time: Slurm ends it as TIMEOUT
            killer = threading.Timer(2, lambda: slurm.run("scontrol", "update", f"JobId={job_id}", "TimeLimit=0:1"))
        killer.start()
        t0 = time.monotonic()
        try:
            with pytest.raises(EngineDied) as died:
                engines.run(sleeper, timeout=250, what="a long task")
        finally:
            killer.cancel()
        reported_s = time.monotonic() - t0
        message = str(died.value)
        state = "CANCELLED" if how == "scancel" else "TIMEOUT"
        assert f"the Slurm job {job_id} of the engines ended ({state})" in message, message
        print(f"\n{how}: reported after {reported_s:.1f} s: {message[:200]}")
        assert reported_s < (15 if how == "scancel" else 100)
    assert job_state(slurm, job_id) == ""
