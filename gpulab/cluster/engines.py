"""MPI engines behind a notebook: start them, run work on them within a time bound, stop them.

    from gpulab.cluster import start_engines
    with start_engines(4) as engines:            # local mpiexec, controller on 127.0.0.1
        ranks = engines.run(my_function, timeout=30)   # one result per MPI rank
        engines.view                             # blocking DirectView, active for %%px

In a notebook, keep the handle across cells and call ``engines.stop()`` at the
end (a kernel restart or exit stops it too; a kernel killed hard leaves a stale
cluster that the next ``start_engines`` in the same profile stops).

On a Slurm cluster, engines run as one batch job, one rank per GPU:
``start_engines(8, launcher="slurm", partition="gpu", account="abc",
gpus_per_node=4, time="00:30:00")``; ``print(slurm_script(...))`` shows the
job script, rendered from ``SLURM_TEMPLATE``.

Engine ids equal MPI ranks. Every engine pins its GPU (``pin_gpu``) before
anything initialises CUDA. ``Engines.run`` never blocks forever: a dead engine
or a hung collective raises an ``EngineProblem`` naming the engines and what
they were doing (for a hang, the Python stack where each one is stuck).
"""

from __future__ import annotations

import faulthandler
import json
import math
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import ipyparallel as ipp
import psutil
from IPython import get_ipython
from traitlets.config import Config

from gpulab.launch import find_mpiexec

PROFILE = "gpulab"  # IPython profile holding gpulab's cluster files and engine logs
THREAD_LIMITS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# The job script for engines on Slurm. {n}, {cluster_id}, {output_file} and
# {program_and_args} (the ipengine command) are filled in by ipyparallel; the rest
# come from start_engines' arguments. Edit a copy and pass it as slurm_template=.
SLURM_TEMPLATE = """\
#!/bin/bash
#SBATCH --job-name=gpulab-engines-{cluster_id}
#SBATCH --partition={partition}
#SBATCH --account={account}
#SBATCH --nodes={nodes}
#SBATCH --ntasks={n}
#SBATCH --ntasks-per-node={ranks_per_node}
#SBATCH --gpus-per-node={gpus_per_node}
#SBATCH --time={time}
#SBATCH --output={output_file}
#SBATCH --export=ALL
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
srun --cpu-bind=none {program_and_args}
"""


class EngineProblem(RuntimeError):
    """Work on the engines did not complete; the message says which engines and why."""


class EngineTimeout(EngineProblem):
    """Some engines did not answer in time (typically a collective waiting for a peer)."""


class EngineDied(EngineProblem):
    """An engine process exited while it had work."""


class EngineFailed(EngineProblem):
    """The function raised on some engines."""


def pin_gpu(comm=None) -> dict:
    """Engine side: learn the node-local rank and make one GPU visible to this rank.

    Must run before CUDA is initialised (before cupy allocates anything): the CUDA
    runtime reads CUDA_VISIBLE_DEVICES once. GPUs are counted from the driver's
    /proc entries, because asking CUDA would initialise it.
    """
    import sys

    from mpi4py import MPI

    comm = comm or MPI.COMM_WORLD
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    local_rank, local_size = local.Get_rank(), local.Get_size()
    local.Free()
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if not visible and "CUDA_VISIBLE_DEVICES" not in os.environ:
        gpus = Path("/proc/driver/nvidia/gpus")
        visible = [str(i) for i in range(len(list(gpus.iterdir())))] if gpus.is_dir() else []
    gpu = None
    if visible:
        gpu = visible[local_rank % len(visible)]
        if "cupy" in sys.modules:
            raise RuntimeError("pin_gpu() ran after cupy was imported: CUDA may already use GPU 0")
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    return {"rank": comm.Get_rank(), "host": socket.gethostname(), "pid": os.getpid(),
            "local_rank": local_rank, "local_size": local_size, "gpu": gpu}


def _watched(fn, args, kwargs, timeout, what, dump_file):
    """Engine side: run fn, and if it is still running after timeout s, write its stack to dump_file.

    faulthandler's watchdog is a C thread, so it fires even while the main thread
    is blocked inside an MPI call, which is exactly when we need the stack.
    """
    with open(dump_file, "w") as f:
        f.write(f"{what}\n")
        f.flush()
        faulthandler.dump_traceback_later(timeout, file=f)
        try:
            return fn(*args, **kwargs)
        finally:
            faulthandler.cancel_dump_traceback_later()


def _stuck_at(dump_file: Path, frames: int = 4) -> str:
    """The innermost frames of the main thread from a faulthandler dump, innermost first."""
    text = dump_file.read_text() if dump_file.exists() else ""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", text)
    main = [b for b in blocks if "_watched" in b]  # the thread running our task
    lines = [ln.strip() for ln in (main[0] if main else "").splitlines() if ln.strip().startswith("File")]
    mine = [ln for ln in lines[:next((i for i, ln in enumerate(lines) if "_watched" in ln), None)]]
    return " <- ".join(mine[:frames]) if mine else "no stack recorded"


class Engines:
    """A running cluster: ``client`` (ipyparallel Client), ``view`` (blocking DirectView), ``placement``."""

    def __init__(self, n: int, make_cluster, where: str):
        self.n, self._make_cluster, self.where = n, make_cluster, where
        self.cluster = self.client = self.view = self._reaper = None
        self.placement: list[dict] = []
        self._start()

    def _start(self, timeout: float = 120):
        self.cluster, self.placement = self._make_cluster(), []
        try:
            self.cluster.start_cluster_sync(n=self.n)
            self._reaper = _start_reaper(self.cluster)  # stops all of this if our process dies
            self.client = self.cluster.connect_client_sync()
            self.client.wait_for_engines(self.n, timeout=timeout)
            self.view = self.client[:]
            self.view.block = True
            if get_ipython() is not None:
                self.view.activate()  # %px / %%px now talk to these engines
            self.placement = self.run(pin_gpu, timeout=timeout, what="pin_gpu()")
        except BaseException:
            self.stop()
            raise

    @property
    def ids(self) -> list[int]:
        return list(self.client.ids) if self.client else []

    def run(self, fn, *args, timeout: float = 120, what: str | None = None, **kwargs) -> list:
        """Call fn(*args, **kwargs) on every engine; return the results in rank order.

        Raises EngineDied, EngineFailed or EngineTimeout within about timeout seconds.
        """
        what = what or f"{getattr(fn, '__name__', fn)}()"
        dump_dir = Path(self.cluster.profile_dir, "log", f"gpulab-{self.cluster.cluster_id}")
        dump_dir.mkdir(parents=True, exist_ok=True)
        dumps = {eid: dump_dir / f"engine{eid}.txt" for eid in range(self.n)}
        tasks = {eid: self.client[eid].apply_async(_watched, fn, args, kwargs, timeout, what, str(dumps[eid]))
                 for eid in range(self.n)}
        deadline = time.monotonic() + timeout + 2  # +2 s: let the engines' watchdogs write first
        while not all(t.ready() for t in tasks.values()):
            dead = self._dead_engines()
            if dead:
                raise EngineDied(f"engine(s) {dead} died while running {what}; "
                                 f"call engines.restart(){self._log_hint()}")
            if time.monotonic() > deadline:
                pending = [eid for eid, t in tasks.items() if not t.ready()]
                stacks = "\n".join(f"  engine {eid} stuck at: {_stuck_at(dumps[eid])}" for eid in pending)
                raise EngineTimeout(
                    f"{what} did not finish within {timeout:g} s on engine(s) {pending} "
                    f"(finished: {sorted(set(tasks) - set(pending))}{self._errors(tasks)}).\n{stacks}\n"
                    "A collective is probably waiting for a rank that never joined. The engines are "
                    "still blocked: call engines.restart() before running more.")
            next(iter(t for t in tasks.values() if not t.ready())).wait(0.2)
        errors = self._errors(tasks)
        if "EngineError" in errors:
            raise EngineDied(f"{what}: {errors.lstrip('; ')}; call engines.restart(){self._log_hint()}")
        if errors:
            raise EngineFailed(f"{what} raised{errors}")
        return [tasks[eid].get() for eid in range(self.n)]

    @staticmethod
    def _errors(tasks) -> str:
        out = ""
        for eid, t in tasks.items():
            if t.ready() and not t.successful():
                err = t.exception()
                out += f"; engine {eid}: {getattr(err, 'ename', type(err).__name__)}: {getattr(err, 'evalue', err)}"
        return out

    def _dead_engines(self) -> list[int]:
        """Ranks whose process is gone (local engines only; on Slurm the controller's heartbeat tells)."""
        if self.where != "local":
            return []
        return [p["rank"] for p in self.placement if not _alive(p["pid"])]

    def _log_hint(self) -> str:
        return f" (engine logs: {self.cluster.profile_dir}/log)" if self.cluster else ""

    def restart(self):
        """Stop everything (a hung MPI call cannot be interrupted) and start a fresh cluster of the same size."""
        if self.where == "local":  # hung engines ignore SIGTERM for seconds: do not wait for them
            _kill([p["pid"] for p in self.placement])
        self.stop()
        self._start()

    def stop(self):
        """Stop engines and controller; then kill whatever mpiexec left behind. Safe to call twice."""
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            pids = [p["pid"] for p in self.placement]
            es = self.cluster.engine_set
            if es is not None and getattr(es, "pid", -1) > 0:
                pids.append(es.pid)
            try:
                self.cluster.stop_cluster_sync()
            finally:
                _kill(pids)
                if self._reaper is not None:
                    try:  # it exits by itself once the cluster is gone
                        self._reaper.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        self._reaper.kill()
        self.cluster = self.client = self.view = self._reaper = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        state = f"{len(self.ids)} engines" if self.client else "stopped"
        return f"<Engines {self.where} n={self.n}: {state}>"


def _alive(proc) -> bool:
    """True if this pid or psutil.Process is running and not a zombie."""
    try:
        proc = proc if isinstance(proc, psutil.Process) else psutil.Process(proc)
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill(pids):
    """SIGKILL these processes and their children, if any are still alive."""
    procs = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            procs += [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=5)


def _start_reaper(cluster) -> subprocess.Popen:
    """A watchdog process that kills the controller and engines once this process is gone.

    A kernel that is restarted or killed does not get to stop its cluster (mpiexec
    runs in its own session, so nothing kills it), hence this separate process.
    """
    pids = [cluster.controller.pid]
    es = cluster.engine_set
    pids += [es.pid] if getattr(es, "pid", -1) > 0 else []
    cancel = [] if getattr(es, "job_id", "") == "" else ["scancel", es.job_id]
    args = json.dumps({"owner": os.getpid(), "pids": pids, "cancel": cancel})
    return subprocess.Popen([sys.executable, "-m", "gpulab.cluster", "reap", args],
                            start_new_session=True, stdin=subprocess.DEVNULL)


def _reap(owner: int, pids: list[int], cancel: list[str], poll: float = 0.5):
    """Reaper main loop: remember every descendant of pids; when owner exits, kill them all."""
    known = {}
    while True:
        for proc in list(known.values()) + [psutil.Process(p) for p in pids if psutil.pid_exists(p)]:
            try:  # engines must be known before mpiexec dies, or they would be orphans we cannot find
                for child in [proc, *proc.children(recursive=True)]:
                    known.setdefault(child.pid, child)
            except psutil.NoSuchProcess:
                pass
        known = {pid: p for pid, p in known.items() if _alive(p)}
        if not known:
            return  # the cluster was stopped normally
        if not psutil.pid_exists(owner):
            if cancel:
                subprocess.run(cancel, check=False)
            _kill(list(known))
            return
        time.sleep(poll)


def stop_stale_clusters(profile_dir: str) -> list[str]:
    """Stop clusters in this profile whose starting process (pid in the cluster id) no longer exists."""
    stopped = []
    for path in Path(profile_dir, "security").glob("cluster-gpulab-*.json"):
        owner = int(path.stem.split("-")[2])
        if psutil.pid_exists(owner):
            continue
        try:
            ipp.Cluster.from_file(str(path), log_level=40).stop_cluster_sync()
        except Exception:  # already gone: the file is all that is left
            pass
        path.unlink(missing_ok=True)
        stopped.append(path.stem)
    return stopped


def slurm_script(n: int, *, partition: str, account: str = "", gpus_per_node: int = 4,
                 ranks_per_node: int | None = None, time: str = "00:30:00",
                 template: str = SLURM_TEMPLATE, **fields) -> str:
    """Render the engines' batch script as sbatch will see it (ipyparallel's fields left as placeholders)."""
    ns = slurm_fields(n, partition=partition, account=account, gpus_per_node=gpus_per_node,
                      ranks_per_node=ranks_per_node, time=time)
    ns.update(n=n, cluster_id="{cluster_id}", output_file="{output_file}",
              program_and_args="{program_and_args}", **fields)
    return template.format(**ns)


def slurm_fields(n, *, partition, account, gpus_per_node, ranks_per_node, time) -> dict:
    ranks_per_node = ranks_per_node or max(gpus_per_node, 1)  # one rank per GPU
    return {"partition": partition, "account": account, "gpus_per_node": gpus_per_node,
            "ranks_per_node": ranks_per_node, "nodes": math.ceil(n / ranks_per_node), "time": time}


def start_engines(n: int = 4, *, launcher: str = "local", controller_ip: str | None = None,
                  profile: str = PROFILE, partition: str = "", account: str = "",
                  gpus_per_node: int = 4, ranks_per_node: int | None = None, time: str = "00:30:00",
                  slurm_template: str = SLURM_TEMPLATE) -> Engines:
    """Start a controller and n MPI engines; return the connected ``Engines`` handle.

    launcher="local": ``mpiexec -n n`` on this machine (the mpiexec beside this Python,
    or GPULAB_MPIEXEC). launcher="slurm": one ``sbatch`` job (see SLURM_TEMPLATE).
    The controller listens on 127.0.0.1 unless controller_ip says otherwise
    ("*" for all interfaces); Slurm engines need it reachable, so there it defaults
    to this host's address.
    """
    if launcher not in ("local", "slurm"):
        raise ValueError(f"launcher must be 'local' or 'slurm', got {launcher!r}")
    config = Config()
    if launcher == "local":
        config.MPIEngineSetLauncher.mpi_cmd = [find_mpiexec()]
        config.MPIEngineSetLauncher.environment = dict(THREAD_LIMITS)
        engines, ip = "mpi", controller_ip or "127.0.0.1"
    else:
        config.SlurmEngineSetLauncher.batch_template = slurm_template
        config.SlurmEngineSetLauncher.engine_args = ["--mpi"]  # ranks become engine ids
        config.SlurmEngineSetLauncher.namespace = slurm_fields(
            n, partition=partition, account=account, gpus_per_node=gpus_per_node,
            ranks_per_node=ranks_per_node, time=time)
        engines, ip = "slurm", controller_ip or socket.gethostbyname(socket.gethostname())
    profile_dir = ipp.Cluster(profile=profile, load_profile=False).profile_dir
    stop_stale_clusters(profile_dir)

    def make_cluster():
        # the owner pid in the id lets a later start find clusters of killed kernels
        cluster_id = f"gpulab-{os.getpid()}-{os.urandom(3).hex()}"
        return ipp.Cluster(engines=engines, n=n, profile_dir=profile_dir, cluster_id=cluster_id,
                           controller_ip=ip, config=config, log_level=30, load_profile=False)

    return Engines(n, make_cluster, launcher)


if __name__ == "__main__" and sys.argv[1:2] == ["reap"]:
    _reap(**json.loads(sys.argv[2]))
