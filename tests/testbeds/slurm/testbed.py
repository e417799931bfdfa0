"""The testbed's daemons: munged, slurmctld and the slurmd's started, queried and stopped.

``SlurmTestbed`` holds one testbed's state (its directory, nodes, ports, daemon handles and, in
emulated mode, its emulated cluster); ``config`` writes its files and ``nodes`` says where each
slurmd runs. ``stop()`` cancels every job, waits for the queue to empty, stops the daemons and removes
the directory, whatever state the start reached.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from gpulab.cluster.processes import kill_and_wait
from tests.testbeds.slurm.config import SLURMCTLD_PORT, SLURMD_PORT, Node, free_port, write_config
from tests.testbeds.slurm.install import ensure_slurm, sbin
from tests.testbeds.slurm.nodes import on_emulated_cluster, own_shm


class SlurmTestbed:
    """``with SlurmTestbed(nodes, cpus=4, gpus=2) as slurm: slurm.env()`` -> {"SLURM_CONF": ...}."""

    def __init__(self, nodes: list[Node] | None = None, *, cpus: int = 4, gpus: int = 2,
                 partition: str = "debug", controller_address: str = "127.0.0.1", workdir: str | None = None,
                 private_shm: bool = True, shm_size: str = "1g", task_env: dict | None = None,
                 emulated: bool = False, link: str | None = "1gbit"):
        self.nodes = nodes or [Node("n1"), Node("n2")]
        self.on_emulated, self.link = emulated, link
        self.emulated = None  # the gpulab.emulated.EmulatedCluster under the nodes, while up
        interface = "eth0" if emulated else "lo"
        self.task_env = {"FI_TCP_IFACE": interface} if task_env is None else task_env
        self.cpus, self.gpus, self.partition = cpus, gpus, partition
        self.controller_address = controller_address
        self.private_shm, self.shm_size = private_shm, shm_size
        self._workdir_arg = workdir
        self.dir: Path | None = None
        self.procs: dict[str, subprocess.Popen] = {}
        self.timings: dict[str, float] = {}

    # ---- paths and environment
    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.dir / "munge" / "munge.socket"

    @property
    def bin(self) -> Path:
        """Emulated mode: the wrappers of Slurm's commands (tests.testbeds.slurm.nodes)."""
        return self.dir / "bin"

    def env(self, base: dict | None = None) -> dict:
        """An environment for Slurm's commands (and jobs: sbatch passes it on) that talks to this cluster."""
        env = {**(os.environ if base is None else base), "SLURM_CONF": str(self.conf)}
        if self.emulated is not None:
            env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', os.defpath)}"
        return env

    # ---- start and stop
    def start(self, timeout: float = 60) -> SlurmTestbed:
        ensure_slurm()
        t0 = time.monotonic()
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        self.timings["up_s"] = time.monotonic() - t0
        return self

    def _start(self, timeout: float) -> None:
        self.dir = Path(self._workdir_arg or tempfile.mkdtemp(prefix="gpulab-slurm-"))
        self.dir.chmod(0o755)  # jobs of other users read slurm.conf and reach the munge socket
        for sub in ("state", "spool", "munge"):
            (self.dir / sub).mkdir(exist_ok=True)
        login = on_emulated_cluster(self) if self.on_emulated else []  # the login node's command prefix
        self.ctld_port = SLURMCTLD_PORT if self.emulated else free_port(self.controller_address)
        for node in self.nodes:
            node.port = node.port or (SLURMD_PORT if self.emulated else free_port(node.address))
        write_config(self)
        self._start_munge(login)
        self.procs["slurmctld"] = self._spawn("slurmctld", [*login, sbin("slurmctld"), "-D", "-i", "-f",
                                                            str(self.conf)])
        shm = own_shm(self.shm_size) if self.private_shm else []
        for node in self.nodes:
            self.procs[f"slurmd-{node.name}"] = self._spawn(
                f"slurmd-{node.name}", [*node.wrap, *shm, sbin("slurmd"), "-D", "-N", node.name, "-f", str(self.conf)])
        self.wait_for_nodes(timeout)

    def _start_munge(self, wrap: list[str]) -> None:
        munge_dir = self.dir / "munge"
        key = munge_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        uid, gid = pwd.getpwnam("munge").pw_uid, grp.getgrnam("munge").gr_gid
        for path in (munge_dir, key):
            os.chown(path, uid, gid)
        key.chmod(0o600)
        munge_dir.chmod(0o755)
        # munged refuses to run as root; setpriv execs it as munge without leaving a wrapper process
        cmd = [*wrap, "setpriv", "--reuid=munge", "--regid=munge", "--init-groups", sbin("munged"), "-F",
               f"--socket={self.munge_socket}", f"--key-file={key}", f"--pid-file={munge_dir}/munged.pid",
               f"--log-file={munge_dir}/munged.log", f"--seed-file={munge_dir}/munged.seed"]
        self.procs["munged"] = self._spawn("munged", cmd)
        self._wait(lambda: self.munge_socket.exists(), 10, "munged did not create its socket")

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen:
        log = open(self.dir / f"{name}.out", "w")  # noqa: SIM115 (closed with the process)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)  # a Ctrl-C in a terminal reaches us, not the daemons
        log.close()
        return proc

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = {name: p.returncode for name, p in self.procs.items() if p.poll() is not None}
            if dead:
                raise RuntimeError(f"{what}: daemon(s) exited {dead}\n{self.logs()}")
            if ready():
                return
            time.sleep(0.2)
        raise TimeoutError(f"{what} within {timeout:g} s\n{self.logs()}")

    def run(self, *cmd: str, timeout: float = 30, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        """A Slurm command (sinfo, squeue, scancel, ...) against this cluster."""
        done = subprocess.run(list(cmd), env=kwargs.pop("env", self.env()), capture_output=True, text=True,
                              timeout=timeout, **kwargs)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def node_states(self) -> dict[str, str]:
        done = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False, timeout=15)
        return dict(line.split() for line in done.stdout.splitlines() if len(line.split()) == 2)

    def wait_for_nodes(self, timeout: float = 60) -> None:
        want = {node.name for node in self.nodes}
        self._wait(lambda: {n for n, s in self.node_states().items() if s == "idle"} >= want, timeout,
                   f"nodes {sorted(want)} did not become idle")

    def jobs(self) -> list[str]:
        """Ids of the jobs Slurm still knows as pending, running or completing."""
        done = self.run("squeue", "-h", "-o", "%i", check=False, timeout=15)
        return done.stdout.split()

    def cancel_all(self, timeout: float = 30) -> list[str]:
        """scancel every job; wait until the queue is empty. Returns the ids that were there."""
        jobs = self.jobs()
        if jobs:
            self.run("scancel", *jobs, check=False)
            self._wait_quietly(lambda: not self.jobs(), timeout)
        return jobs

    def _wait_quietly(self, ready, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if ready():
                    return True
            except Exception:
                return False
            time.sleep(0.3)
        return False

    def stop(self) -> list[str]:
        """Cancel all jobs, stop the daemons (slurmd's, slurmctld, munged), remove the directory.

        Safe to call at any point and twice. Returns what went wrong (empty when all stopped cleanly).
        """
        problems = []
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            try:
                left = self.cancel_all()
                if self.jobs():
                    problems.append(f"jobs still queued after scancel: {self.jobs()} (were {left})")
            except Exception as err:  # a broken controller must not stop the cleanup
                problems.append(f"cancelling jobs: {err}")
        order = [n for n in self.procs if n.startswith("slurmd-")] + ["slurmctld", "munged"]
        for name in order:
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                problems.append(f"{name} ignored SIGTERM for 15 s: killed")
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        for name in order:  # anything a daemon left in its session (a slurmstepd of a killed job)
            proc = self.procs.get(name)
            if proc is not None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.procs = {}
        left = self.leftovers()
        if left:  # a job step's processes that outlived their slurmstepd
            problems.append(f"processes left by jobs (killed): {[' '.join(p.cmdline()[:3]) for p in left]}")
            kill_and_wait(left, timeout=10)
        if self.emulated is not None:  # the keeper kills whatever still runs on the nodes
            self.emulated.stop()
            self.emulated = None
        if self.dir is not None and self._workdir_arg is None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        return problems

    def leftovers(self) -> list:
        """Processes that belong to this cluster (its SLURM_CONF in their environment, or its directory
        on their command line) other than this process."""
        if self.dir is None:
            return []
        conf, found = str(self.conf), []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                if str(self.dir) in " ".join(proc.info["cmdline"] or []) or proc.environ().get("SLURM_CONF") == conf:
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        return found

    def logs(self, tail: int = 1500) -> str:
        if self.dir is None:
            return ""
        out = []
        for path in sorted(self.dir.glob("*.log")) + sorted(self.dir.glob("*.out")) + \
                sorted(self.dir.glob("munge/*.log")):
            text = path.read_text(errors="replace").strip()
            if text:
                out.append(f"--- {path.name}\n{text[-tail:]}")
        return "\n".join(out)

    def __enter__(self) -> SlurmTestbed:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

