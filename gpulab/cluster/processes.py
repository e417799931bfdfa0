"""Making sure no engine outlives its notebook: a reaper process, and cleanup of stale clusters.

mpiexec and the controller run in their own sessions (ipyparallel starts them so
that Ctrl-C in the kernel does not kill them), so when a kernel is restarted or
killed nothing stops them. The reaper is a small process that watches the
kernel and kills the cluster's whole process tree once the kernel is gone, then
removes the MPI scratch files that tree held (SIGKILL leaves them, and so do
engines that end without MPI_Finalize):

    reap(owner=<kernel pid>, pids=[<controller pid>, <mpiexec pid>], cancel=[])
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from gpulab.procfs import mpi_scratch_held, remove_files


def alive(proc) -> bool:
    """True if this pid or psutil.Process is running and not a zombie."""
    try:
        proc = proc if isinstance(proc, psutil.Process) else psutil.Process(proc)
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def mpi_scratch_files(procs) -> set[str]:
    """The MPI scratch files (``gpulab.procfs.MPI_SCRATCH``) that these processes hold open or mapped: hydra's
    topology file is held open by mpiexec's proxy, the ranks' shared memory is mapped by them."""
    return mpi_scratch_held(proc.pid for proc in procs)


def kill_and_wait(procs: list[psutil.Process], timeout: float = 5) -> None:
    """SIGKILL these processes (those already gone are skipped) and wait up to timeout s for them."""
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=timeout)


def kill_all(procs: list[psutil.Process], timeout: float = 5) -> None:
    """SIGKILL these processes, wait up to timeout s for them, and remove the MPI scratch files they
    held (nobody else will)."""
    scratch = mpi_scratch_files(procs)
    kill_and_wait(procs, timeout)
    remove_files(scratch)


def tree_scratch_files(pids) -> set[str]:
    """The MPI scratch files held by these processes and their descendants (a job's, while it runs)."""
    return mpi_scratch_files(_trees(pids))


def kill_trees(pids) -> None:
    """SIGKILL these processes and all their descendants, if still alive."""
    kill_all(_trees(pids))


def _trees(pids) -> list[psutil.Process]:
    """These processes and all their descendants, those still there."""
    return _family(_processes(pids))


def _processes(pids) -> list[psutil.Process]:
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    return procs


def _family(procs) -> list[psutil.Process]:
    """These processes and all their descendants, from one pass over the process table
    (``children(recursive=True)`` reads all of /proc for every process it is asked about)."""
    children: dict[int, list[psutil.Process]] = {}
    for proc in psutil.process_iter(["ppid"]):
        children.setdefault(proc.info["ppid"], []).append(proc)
    found, todo = {}, list(procs)
    while todo:
        proc = todo.pop()
        if proc.pid not in found:
            found[proc.pid] = proc
            todo += children.get(proc.pid, [])
    return list(found.values())


def start_reaper(cluster) -> subprocess.Popen:
    """Start a reaper for this cluster's controller and engine launcher (mpiexec or a Slurm job).
    Closing its stdin (``wake_reaper``) makes it look at once; so does the end of our process."""
    pids = [cluster.controller.pid]
    es = cluster.engine_set
    pids += [es.pid] if getattr(es, "pid", -1) > 0 else []
    cancel = ["scancel", es.job_id] if getattr(es, "job_id", "") else []
    args = json.dumps({"owner": os.getpid(), "pids": pids, "cancel": cancel})
    code = "import json, sys; from gpulab.cluster.processes import reap; reap(**json.loads(sys.argv[1]))"
    return subprocess.Popen([sys.executable, "-c", code, args], start_new_session=True, stdin=subprocess.PIPE)


def wake_reaper(reaper: subprocess.Popen, timeout: float = 5) -> None:
    """After the cluster was stopped: the reaper looks now, finds nothing left and exits (else it is killed)."""
    reaper.stdin.close()
    try:
        reaper.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        reaper.kill()
        reaper.wait()


def reap(owner: int, pids: list[int], cancel: list[str], poll: float = 2.0) -> None:
    """Remember every descendant of pids and the MPI scratch files they hold; when owner exits, kill them
    all (and scancel the job) and remove the files.

    Looks every ``poll`` s (a look reads the process table and the processes' maps, which costs CPU),
    and at once when its stdin closes: the owner has stopped the cluster, or has died."""
    # outlive the owner's end: Slurm ending a JupyterLab job (a hub culling or stopping the server) sends
    # SIGTERM to all its processes, this one included, and the engines' Slurm job would be left running
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    known, scratch = {}, set()
    owner = next(iter(_processes([owner])), None)  # the Process: a new process may get its pid later
    waiting = [sys.stdin]  # until the owner closes it (nobody writes to it)
    while True:
        # learn the engines while mpiexec lives: once it dies they are orphans we cannot find
        # (the Process objects already known, not their pids, which a new process may reuse)
        for proc in _family([*known.values(), *_processes(pid for pid in pids if pid not in known)]):
            known.setdefault(proc.pid, proc)
        known = {pid: p for pid, p in known.items() if alive(p)}
        # learnt while they live: engines that end without MPI_Finalize (a cell's watchdog exits one,
        # hydra then kills the others) leave their files, and the dead hold nothing
        scratch |= mpi_scratch_files(known.values())
        if not known:  # stopped normally (MPICH removed its files then), or died by itself
            remove_files(scratch)
            return
        if owner is None or not alive(owner):  # a killed kernel is a zombie until its parent waits for it
            if cancel:
                subprocess.run(cancel, check=False)
            kill_all(_family(known.values()))  # the Process objects: a pid alone may be a new process's by now
            remove_files(scratch)
            return
        if waiting and select.select(waiting, [], [], poll)[0]:
            waiting = []  # closed: look once more at once, then every poll s
        elif not waiting:
            time.sleep(poll)


def stop_cluster(cluster_file) -> None:
    """Stop the controller and engines that this ipyparallel cluster file describes, if still running."""
    try:  # the import too: without ipyparallel a stale file is only skipped
        import ipyparallel as ipp

        ipp.Cluster.from_file(str(cluster_file), log_level=40).stop_cluster_sync()
    except Exception:  # its processes are already gone: the file is all that is left
        pass


def stop_stale_clusters(profile_dir: str) -> list[str]:
    """Stop clusters in this profile whose starting process (the pid in the cluster id) is gone."""
    stopped = []
    for path in Path(profile_dir, "security").glob("cluster-gpulab-*.json"):
        owner = int(path.stem.split("-")[2])
        if psutil.pid_exists(owner):
            continue
        stop_cluster(path)
        path.unlink(missing_ok=True)
        stopped.append(path.stem.removeprefix("cluster-"))
    return stopped
