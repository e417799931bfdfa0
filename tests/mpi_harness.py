"""Run a test function on N MPI ranks under ``mpiexec`` and report per rank.

Usage from a pytest test::

    results = run_mpi(4, "tests.bcast.cases:check_algorithm", algorithm="chain")

Each rank imports ``module:function`` and calls ``function(comm, **kwargs)``.
What a rank returns (JSON) comes back as ``results[rank]``. If any rank
raises, the test fails with that rank's traceback; if the job does not finish
within ``timeout`` seconds, it is killed and the failure says what every rank
was doing (its last ``step()``), so a deadlock reads as a message, not a hang.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from gpulab.launch import mpiexec_command
from gpulab.procfs import MPI_SCRATCH, mpi_scratch_held

ROOT = Path(__file__).resolve().parents[1]


class MPIJobFailed(AssertionError):
    """An MPI test job failed on some rank, or timed out."""


def run_mpi(n: int, target: str, *, timeout: float = 120, env: dict | None = None, **kwargs):
    with tempfile.TemporaryDirectory(prefix="gpulab-mpi-") as outdir, removing_scratch_of_aborted_jobs():
        cmd = mpiexec_command(n, ["-m", "tests.mpi_worker", outdir, target, json.dumps(kwargs)])
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                    "OPENBLAS_NUM_THREADS": "1", **(env or {})}
        proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_job(proc.pid)
            output, _ = proc.communicate()
            where = "; ".join(f"rank {r}: {_last_step(outdir, r)}" for r in range(n))
            raise MPIJobFailed(f"{target} on {n} ranks timed out after {timeout}s ({where})\n"
                               f"output:\n{output[-3000:]}") from None
        return _collect(outdir, n, target, proc.returncode, output)


def shared_jobs():
    """``run_mpi`` with memory, for many tests reading one job: the first call with given arguments runs
    the job, later calls get its results, or its failure raised again (a module-scoped fixture holds it)."""
    jobs = {}

    def run(n: int, target: str, **kwargs):
        key = (n, target, json.dumps(kwargs, sort_keys=True))
        if key not in jobs:
            try:
                jobs[key] = run_mpi(n, target, **kwargs)
            except MPIJobFailed as failure:
                jobs[key] = failure
        if isinstance(jobs[key], MPIJobFailed):
            raise jobs[key]
        return jobs[key]
    return run


def batched_jobs(calls: dict, *, timeout: float = 200, env: dict | None = None):
    """Many tests' rank functions, one MPI job per rank count (a start costs about a second on 2 cores).

    ``calls`` maps a name to (ranks, "module:function", kwargs). The returned
    function, given a name, runs the job of that rank count on first use (all its
    calls in turn, ``tests.mpi_worker.run_calls``) and returns the call's results
    per rank, or raises its own failure: a call that raises on every rank leaves
    the others' results standing; one that leaves its peers waiting ends the job
    by ``timeout``, and every test of that job fails saying where each rank was.
    """
    shared = shared_jobs()

    def result(name: str) -> list:
        n = calls[name][0]
        mine = {key: [target, kwargs] for key, (ranks, target, kwargs) in calls.items() if ranks == n}
        outcomes = [per_rank[name] for per_rank in
                    shared(n, "tests.mpi_worker:run_calls", calls=mine, timeout=timeout, env=env)]
        failed = [f"rank {rank} raised:\n{o['traceback']}" for rank, o in enumerate(outcomes) if not o["ok"]]
        if failed:
            raise MPIJobFailed(f"{name} ({calls[name][1]} in a job of {n} ranks) failed:\n" + "\n".join(failed))
        return [o["result"] for o in outcomes]
    return result


def _kill_job(pid: int) -> None:
    """SIGKILL mpiexec, its proxy and ranks (the job's whole session), and remove the scratch files they held."""
    from gpulab.cluster.processes import kill_trees  # psutil, which a bare GPU machine may lack: only on a timeout

    kill_trees([pid])  # removes hydra's topology file and the ranks' shared memory, which SIGKILL leaves
    try:
        os.killpg(pid, signal.SIGKILL)  # any rank that had left the tree
    except ProcessLookupError:
        pass


def scratch_on_disk() -> set[str]:
    return {path for prefix in MPI_SCRATCH for path in glob.glob(prefix + "*")}


def leaked_scratch(before: set[str], grace: float = 2) -> set[str]:
    """MPI scratch files created since ``before`` that no running process holds (a killed job's),
    once the jobs that are just ending have had ``grace`` s to remove theirs."""
    deadline = time.monotonic() + grace
    while True:
        new = scratch_on_disk() - before
        if new:  # other MPI jobs on the machine may be running: theirs are held
            new -= mpi_scratch_held(int(pid) for pid in os.listdir("/proc") if pid.isdigit())
        if not new or time.monotonic() > deadline:
            return new
        time.sleep(0.2)


@contextmanager
def removing_scratch_of_aborted_jobs():
    """For a test whose MPI job ends in MPI_Abort, which leaves hydra's and the ranks' scratch files (a
    failing tests.mpi_worker rank removes its own node's first: then this finds nothing, and waits for nothing)."""
    before = scratch_on_disk()
    try:
        yield
    finally:
        remove_leaked_scratch(before)


def remove_leaked_scratch(before: set[str]) -> set[str]:
    """Remove what leaked_scratch(before) finds, and return it."""
    leaked = leaked_scratch(before)
    for path in leaked:
        Path(path).unlink(missing_ok=True)
    return leaked


def _last_step(outdir: str, rank: int) -> str:
    path = Path(outdir, f"rank{rank}.progress")
    if Path(outdir, f"rank{rank}.json").exists():
        return "finished"
    steps = path.read_text().splitlines() if path.exists() else []
    return repr(steps[-1]) if steps else "no step reached"


def _collect(outdir: str, n: int, target: str, returncode: int, output: str) -> list:
    results, failures = [], []
    for rank in range(n):
        path = Path(outdir, f"rank{rank}.json")
        if not path.exists():
            failures.append(f"rank {rank}: no result (last step {_last_step(outdir, rank)})")
            results.append(None)
            continue
        record = json.loads(path.read_text())
        if not record["ok"]:
            failures.insert(0, f"rank {rank} raised:\n{record['traceback']}")
        results.append(record.get("result"))
    if failures or returncode != 0:
        detail = "\n".join(failures) or "all ranks reported success"
        raise MPIJobFailed(f"{target} on {n} ranks failed (mpiexec exit {returncode}):\n{detail}\n"
                           f"output tail:\n{output[-2000:]}")
    return results
