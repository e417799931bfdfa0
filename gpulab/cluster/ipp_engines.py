"""The ``Engines`` handle: an ipyparallel controller, n MPI engines, a client, a bounded ``run``.

``start_engines`` (gpulab.cluster.start) makes one:

    engines = start_engines(4)
    engines.run(os.getpid)              # [pid of rank 0, ..., pid of rank 3]
    engines.stop()

Engine ids equal MPI ranks (ipengine --mpi asks the controller for its rank as id).
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
from pathlib import Path

import ipyparallel as ipp
from IPython import get_ipython

from gpulab.cluster.engine_side import arm_cell_watchdog, stopped_cells, stuck_at, watched
from gpulab.cluster.processes import alive, kill_trees, remove_files, start_reaper, tree_scratch_files, wake_reaper
from gpulab.cluster.slurm import ended_in_output
from gpulab.cluster.time_limits import Limit, compact, rendered
from gpulab.launch import pin_gpu

PROFILE = "gpulab"  # IPython profile holding gpulab's cluster files and engine logs
# The controller accepts an engine only when its heart answers a ping: a faster beat than ipyparallel's
# 3 s starts the engines sooner (docs/cluster.md). It still declares an engine dead after 30 s without
# an answer, as by default.
HEARTBEAT_MS, HEARTBEAT_MISSES = 500, 60
CONTROLLER_ARGS = [f"--HeartMonitor.period={HEARTBEAT_MS}",
                   f"--HeartMonitor.max_heartmonitor_misses={HEARTBEAT_MISSES}"]


class EngineProblem(RuntimeError):
    """Work on the engines did not complete; the message says which engines and why."""


class EngineTimeout(EngineProblem):
    """Some engines did not answer in time (typically a collective waiting for a peer). The message is one
    paragraph (``time_limits.Limit.passed``); IPython shows it instead of the traceback, which says nothing more."""

    def _render_traceback_(self) -> list[str]:
        return rendered(self)


class EngineDied(EngineProblem):
    """An engine process exited while it had work."""


class EngineFailed(EngineProblem):
    """The function raised on some engines."""


class Engines:
    """A running cluster: ``client`` (ipyparallel Client), ``view`` (blocking DirectView), ``placement``.

    ``placement[rank]`` says where each rank runs: host, pid, local_rank, local_size, gpu.
    """

    def __init__(self, n: int, make_cluster, launcher: str, cell_timeout: float | None = 300,
                 start_timeout: float = 120, emulated=None, ipc_sockets=None):
        self.n, self._make_cluster, self.launcher = n, make_cluster, launcher
        self.cell_timeout, self.start_timeout = cell_timeout, start_timeout
        self.cell_limit: Limit | None = None  # cell_timeout stretched for this machine as the engines started
        self._job_checked = 0
        self.emulated = emulated  # gpulab.emulated.EmulatedCluster the engines run on, or None
        self.ipc_sockets = ipc_sockets  # IpcSockets that the controller listens on (engines on emulated nodes)
        self.cluster = self.client = self.view = self._reaper = None
        self.placement: list[dict] = []
        self._scratch: set[str] = set()  # MPICH's scratch files of these engines (hydra's, shared memory)
        self._start()

    def _start(self):
        # the machine read before the engines start: their own start-up and polling raise the load
        starting = self.limit(self.start_timeout)
        self.cluster, self.placement = self._make_cluster(), []
        try:
            if self.ipc_sockets is not None:  # ipc endpoints need a second name (see link_ipc_sockets)
                self.ipc_sockets.start()
            self.cluster.start_cluster_sync(n=self.n)
            self._reaper = start_reaper(self.cluster)  # stops all of this if our process dies
            self.client = self.cluster.connect_client_sync()
            self._wait_for_engines(starting)
            self.view = self.client[:]
            self.view.block = True
            if get_ipython() is not None:
                self.view.activate()  # %px and %%px now talk to these engines
            self.placement = self.run(pin_gpu, timeout=self.start_timeout, what="pin_gpu()")
            # engines that are killed, stopped by signal or die (a cell's watchdog) leave MPICH's files
            # (hydra's, shared memory): stop() removes them
            self._scratch = tree_scratch_files([*self._launcher_pids(), *self._local_pids()])
            if self.cell_timeout:
                self.cell_limit = self.limit(self.cell_timeout, state=starting.at_start)
                self.run(arm_cell_watchdog, self.cell_limit.seconds, str(self.dump_dir))
            if get_ipython() is not None:
                get_ipython().set_custom_exc((ipp.error.CompositeError,), self._explain_px_error)
        except BaseException:
            self.stop()
            raise

    def limit(self, seconds: float, state=None) -> Limit:
        """``seconds`` on an idle machine with a core per rank, stretched for this machine now where the engines
        run on it (on Slurm's nodes they have cores of their own)."""
        return Limit.start(seconds, self.n, stretch=self.launcher != "slurm", state=state)

    def _wait_for_engines(self, limit: Limit) -> None:
        """Wait until all n engines registered; a Slurm job that ended or a launcher that exited fails at once."""
        deadline = time.monotonic() + limit.seconds
        while len(self.client.ids) < self.n:
            ended = self._job_ended()
            if ended:
                raise EngineDied(f"{ended} before all {self.n} engines connected "
                                 f"({len(self.client.ids)} did){self._logs()}{self._job_output()}")
            if time.monotonic() > deadline:
                queued = f" (Slurm job {self.job_id}: {self._job_state() or 'gone'})" if self.job_id else ""
                raise EngineTimeout(limit.passed(f"only {len(self.client.ids)} of {self.n} engines connected",
                                                 extra=f"Their logs: {self._log_dir()}{queued}.",
                                                 larger="start_timeout="))
            try:
                self.client.wait_for_engines(self.n, timeout=1, interactive=False)
            except TimeoutError:
                pass

    @property
    def job_id(self) -> str:
        """The Slurm job of the engines ("" for launcher="local")."""
        return getattr(getattr(self.cluster, "engine_set", None), "job_id", "") or ""

    def _job_state(self) -> str:
        """Slurm's state for the engines' job (RUNNING, PENDING, TIMEOUT, CANCELLED, ...); "" once Slurm forgot it."""
        try:
            done = subprocess.run(["scontrol", "show", "job", "--oneliner", self.job_id], capture_output=True,
                                  text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return "UNKNOWN"  # scontrol failing or hanging is no proof that the job ended
        found = re.search(r"\bJobState=(\S+)", done.stdout)
        if found:
            return found.group(1)
        return "" if "Invalid job id" in done.stderr else "UNKNOWN"

    def _job_ended(self) -> str:
        """'the Slurm job 12 ended (TIMEOUT)' once the engines' job is no longer pending or running, or
        'the engines' mpiexec exited' for a local launcher that is gone; else ""."""
        if not self.job_id:
            process = getattr(getattr(self.cluster, "engine_set", None), "process", None)
            return "the engines' mpiexec exited" if process is not None and not alive(process) else ""
        now = time.monotonic()
        if now - getattr(self, "_job_checked", 0) < 2:  # squeue at most every 2 s
            return ""
        self._job_checked = now
        state = self._job_state()
        deadline = now + 10
        while state == "COMPLETING" and time.monotonic() < deadline:  # ending: wait for why (TIMEOUT, ...)
            time.sleep(0.5)
            state = self._job_state()
        if state in ("PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "REQUEUED", "RESIZING", "UNKNOWN"):
            return ""
        state = state or ended_in_output(self.job_id, self._job_text()[1])  # Slurm forgot it: its output says why
        return f"the Slurm job {self.job_id} of the engines ended ({state or 'no longer in the queue'})"

    def _job_text(self) -> tuple[str, str]:
        """(path, text) of the engines' job output (Slurm's errors, the engines' tracebacks)."""
        engine_set = getattr(self.cluster, "engine_set", None)
        path = getattr(engine_set, "output_file", "")
        try:  # ipyparallel keeps a stopped launcher's output after removing its file
            text = engine_set.get_output() if engine_set is not None else ""
        except Exception:  # noqa: BLE001 - a launcher that cannot say is no reason to hide the error
            text = ""
        try:
            text = text or (Path(path).read_text(errors="replace") if path else "")
        except OSError:
            pass
        return path, text

    def _job_output(self, lines: int = 15) -> str:
        """The end of the engines' job output."""
        path, text = self._job_text()
        tail = text.splitlines()[-lines:]
        return f"\nend of the job's output ({path}):\n" + "\n".join(tail) if tail else ""

    @property
    def dump_dir(self) -> Path:
        """Where the engines' watchdogs write the stacks of stuck tasks and cells."""
        path = Path(self.cluster.profile_dir, "log", f"gpulab-{self.cluster.cluster_id}")
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _explain_px_error(self, shell, etype, value, tb, tb_offset=None):
        """IPython handler for a failed %%px: where the engines were when a cell's watchdog stopped them, in one
        paragraph; any other failure with the usual traceback (the engines' own errors)."""
        stopped = stopped_cells(self.dump_dir) if self.cluster and self.cell_limit else {}
        if not stopped:
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
            return
        where = {rank: compact(place) for rank, place in stopped.items()}
        paragraph = self.cell_limit.passed(
            f"a %%px cell on {self.n} engines did not finish", where,
            extra="A collective probably waited for a rank that never joined; the watchdog ended the engines: "
                  "call engines.restart().", larger="cell_timeout= (of start_engines)")
        shell.showtraceback((EngineTimeout, EngineTimeout(paragraph), None))

    @property
    def ids(self) -> list[int]:
        return list(self.client.ids) if self.client else []

    def run(self, fn, *args, timeout: float = 120, what: str | None = None, **kwargs) -> list:
        """Call fn(*args, **kwargs) on every engine; return the results in rank order.

        ``timeout``: seconds the work takes at most on an idle machine with a core per rank; on a busy or
        oversubscribed one it is stretched (``limit``: the machine is read now, before the ranks start).
        Raises, within about that limit: EngineFailed (fn raised), EngineDied (an engine exited) or
        EngineTimeout (one paragraph: the engines that did not answer, the line each one is stuck at, how busy
        the machine was; the engines on this machine are killed then, since a rank stuck in MPI busy-polls a
        core: ``restart()`` brings fresh ones).
        """
        if self.client is None:
            raise EngineProblem("the engines are stopped: start_engines() or engines.restart()")
        what = what or f"{getattr(fn, '__name__', fn)}()"
        limit = self.limit(timeout)
        dumps = self.dump_dir
        tasks = {rank: self.client[rank].apply_async(watched, fn, args, kwargs, limit.seconds, what,
                                                     str(dumps / f"engine{rank}.txt"))
                 for rank in range(self.n)}
        deadline = time.monotonic() + limit.seconds + 2  # +2 s: the engines' watchdogs write their stacks first
        while pending := [rank for rank, task in tasks.items() if not task.ready()]:
            dead = self._dead_ranks()
            if dead:
                raise EngineDied(f"engine(s) {dead} died while running {what}; call engines.restart(){self._logs()}")
            ended = self._job_ended()  # engines on other nodes: Slurm knows when their job is gone
            if ended:
                raise EngineDied(f"{ended} while engine(s) {pending} were running {what}; "
                                 f"call engines.restart(){self._logs()}")
            if time.monotonic() > deadline:
                waiting = {rank: compact(stuck_at(dumps / f"engine{rank}.txt", frames=3)) for rank in pending}
                # a rank waiting in a collective busy-polls a core until it is killed (MPICH's progress
                # throttle did not lower that): killing those on this machine bounds it to the limit
                kill_trees(self._local_pids())
                raise EngineTimeout(limit.passed(
                    f"{what} on {self.n} engines did not finish", waiting, set(tasks) - set(pending), _errors(tasks),
                    "The engines on this machine were killed (a rank stuck in MPI holds a core): "
                    "call engines.restart()."))
            tasks[pending[0]].wait(0.2)
        died = [rank for rank, task in tasks.items() if _ename(task.exception()) == "EngineError"]
        if died:
            raise EngineDied(f"engine(s) {died} died while running {what}; call engines.restart(){self._logs()}")
        if _errors(tasks):
            raise EngineFailed(f"{what} raised{_errors(tasks)}")
        return [tasks[rank].get() for rank in range(self.n)]

    def _dead_ranks(self) -> list[int]:
        """Ranks on this host whose process is gone (for the others the controller's heartbeat tells)."""
        here = socket.gethostname()
        return [p["rank"] for p in self.placement if p["host"] == here and not alive(p["pid"])]

    def _launcher_pids(self) -> list[int]:
        pid = getattr(self.cluster.engine_set, "pid", -1) if self.cluster else -1
        return [pid] if pid and pid > 0 else []

    def _local_pids(self) -> list[int]:
        here = socket.gethostname()
        return [p["pid"] for p in self.placement if p["host"] == here]

    def _log_dir(self) -> str:
        return f"{self.cluster.profile_dir}/log" if self.cluster else "gone with the cluster"

    def _logs(self) -> str:
        return f" (engine logs: {self._log_dir()})" if self.cluster else ""

    def restart(self):
        """Stop everything (a hung MPI call cannot be interrupted) and start a fresh cluster of the same size."""
        # hung engines ignore SIGTERM for seconds: do not wait for those on this host
        kill_trees(self._local_pids())
        self.stop(keep_network=True)
        self._start()

    def stop(self, keep_network: bool = False):
        """Stop engines and controller, then kill whatever mpiexec left behind (and take the emulated
        cluster down unless ``keep_network``). Safe to call twice."""
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            pids = self._local_pids()
            self._scratch |= tree_scratch_files([*self._launcher_pids(), *pids])  # communicators made since
            try:  # engines first: with the controller gone they take seconds to notice SIGTERM
                self.cluster.stop_engines_sync()
                self.cluster.stop_controller_sync()
            finally:
                kill_trees(pids)
                if self._reaper is not None:  # it exits by itself once the cluster is gone
                    wake_reaper(self._reaper)
        remove_files(self._scratch)
        self.cluster = self.client = self.view = self._reaper = None
        self._job_checked = 0
        self._scratch = set()
        if not keep_network:
            if self.ipc_sockets is not None:
                self.ipc_sockets.stop()
                self.ipc_sockets = None
            if self.emulated is not None:
                self.emulated.stop()
                self.emulated = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        job = f" (Slurm job {self.job_id})" if self.job_id else ""
        return f"<Engines {self.launcher} n={self.n}: {f'{len(self.ids)} engines' if self.client else 'stopped'}{job}>"


def _errors(tasks) -> str:
    """'; engine 2: ValueError: ...' for every finished task that raised."""
    out = ""
    for rank, task in tasks.items():
        if task.ready() and not task.successful():
            err = task.exception()
            out += f"; engine {rank}: {_ename(err)}: {getattr(err, 'evalue', err)}"
    return out


def _ename(err) -> str | None:
    """The exception's class name; ipyparallel delivers engine-side errors as RemoteError(ename=...)."""
    return None if err is None else getattr(err, "ename", type(err).__name__)
