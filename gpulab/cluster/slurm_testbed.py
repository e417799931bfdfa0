"""A real, throwaway Slurm on this machine: munged, slurmctld and one slurmd per node, all in the foreground.

Why one file of about 500 lines (55 of them this docstring): the configuration it writes, the daemons
it starts and the teardown all read one testbed's state (its directory, nodes, ports, daemon handles
and emulated cluster); split by job, those parts would hand that state back and forth. Only the
install check (``ensure_slurm``) and the command line (``main``) stand alone, about 80 lines.

For tests and for trying gpulab's Slurm paths without a cluster (needs root):

    python -m gpulab.cluster.slurm_testbed up            # two nodes; prints SLURM_CONF, Ctrl-C stops it
    python -m gpulab.cluster.slurm_testbed up --emulated --link 1gbit   # the nodes on an emulated cluster
    python -m gpulab.cluster.slurm_testbed run -- srun -N 2 -n 4 --mpi=pmi2 hostname

    with SlurmTestbed() as slurm:                        # from Python (tests/slurm/conftest.py)
        subprocess.run(["sinfo"], env=slurm.env())

Debian's ``slurm-wlm`` and ``munge`` are installed when missing (root and
apt-get needed). Everything lives in one temporary directory: configuration,
munge key and socket (a private munged, not the system's), state, spool and
logs. The daemons are this process's children and are waited for; ``stop()``
cancels every job, waits for the queue to empty, stops the daemons and
removes the directory, whatever state the start reached.

Each node is a ``Node(name, address, port)``. By default all nodes are slurmd's
on 127.0.0.1 with their own ports, started with ``slurmd -N NAME``; Slurm then
treats them as separate nodes (MPI's node-local rank follows Slurm's layout),
although they share the machine's network; each slurmd runs in its own mount
namespace with a private /dev/shm (``private_shm``), so MPI's shared-memory
segments stay within a node and vanish with it. ``Node.wrap`` is the
hook for running a node's slurmd elsewhere (a network namespace: a command
prefix such as ``nsenter --net=/run/netns/n1 ...``). Nodes declare ``cpus``
CPUs and ``gpus`` fake GPUs (GRES backed by character devices like /dev/null, so Slurm
sets CUDA_VISIBLE_DEVICES in jobs) whatever the machine has
(``SlurmdParameters=config_overrides``). No cgroups, no systemd, no
accounting: ``proctrack/linuxproc`` and ``task/none``. ``KillOnBadExit=1``: a
task that fails ends its step, so an MPI abort cannot leave srun waiting for
the other tasks. An ``Epilog`` removes an ended job's MPI scratch files that no process of
its user still holds (``EPILOG``), as a site's node clean-up does. A ``TaskProlog`` gives every task
``task_env`` (by default
``FI_TCP_IFACE=lo``: libfabric's TCP between nodes stays on the loopback the
nodes share), as a site's node set-up names its fabric interface.

``emulated=True`` puts the nodes on an emulated cluster (``gpulab.emulated``)
of N + 1 network namespaces joined by ``link``: slurmd K runs in node K
(10.77.0.K, port 6818, its private /dev/shm as above, MPI between nodes over
its ``eth0``: ``FI_TCP_IFACE=eth0``), slurmctld and munged in the last one, the
"login" node, which has no slurmd. Slurm's commands must run where they reach
slurmctld and where the nodes reach them (srun listens for its tasks' I/O):
``env()`` puts wrappers first on PATH that run them in the login node when
called from the machine's own network (as root, which nsenter needs) and as
they are inside the nodes (a batch script's srun). munged's socket, the
configuration and ZeroMQ's ipc:// sockets are files, which every namespace
sees. ``stop()`` takes the namespaces down last; if this process is killed,
the cluster's keeper ends every daemon and job with them (only the directory stays).
"""

from __future__ import annotations

import argparse
import grp
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from gpulab.cluster.apt import apt_install

PACKAGES = ["slurm-wlm", "slurm-client", "munge"]
BINARIES = ["slurmctld", "slurmd", "munged", "sbatch", "srun", "squeue", "scancel", "sinfo"]
CLIENTS = ["sbatch", "srun", "salloc", "squeue", "scancel", "sinfo", "scontrol"]  # wrapped in emulated mode
# The node clean-up a site's Epilog does: a cancelled job's MPI ranks die by signal and leave their scratch
# files (/dev/shm/mpich_shm_*, hydra's /tmp files) on every node they ran on, where nothing of the job is
# left to remove them. Run by slurmd as root, in the node's mount namespace (its private /dev/shm).
EPILOG = """#!{python}
import os
import sys
import psutil
from gpulab.procfs import MPI_SCRATCH, mpi_scratch_held, remove_files
try:
    uid = int(os.environ["SLURM_JOB_UID"])
    theirs = set()
    for prefix in MPI_SCRATCH:
        folder, stem = os.path.split(prefix)
        for entry in os.scandir(folder):
            if entry.name.startswith(stem) and entry.stat(follow_symlinks=False).st_uid == uid:
                theirs.add(entry.path)
    # the user's other jobs on this node (a JupyterLab and its engines) keep what they still hold
    held = mpi_scratch_held(p.pid for p in psutil.process_iter(["uids"])
                            if p.info["uids"] and p.info["uids"].real == uid)
    remove_files(theirs - held)
except Exception as err:  # an Epilog that fails drains the node: report, never fail
    print(f"gpulab epilog: {{err}}", file=sys.stderr)
"""
SLURMCTLD_PORT, SLURMD_PORT = 6817, 6818  # Slurm's own: every emulated node has its ports to itself


@dataclass
class Node:
    name: str
    address: str = "127.0.0.1"
    port: int = 0  # 0: a free port is picked
    wrap: list[str] = field(default_factory=list)  # command prefix for this node's slurmd


class SlurmUnavailable(RuntimeError):
    """Slurm is not installed and cannot be installed here (needs root and apt-get)."""


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if not (shutil.which(b) or Path("/usr/sbin", b).exists())]


def ensure_slurm(timeout: float = 600) -> None:
    """Install Debian's slurm-wlm and munge when missing; SlurmUnavailable says why not."""
    if not missing_binaries():
        return
    if why := apt_install(PACKAGES, timeout):
        raise SlurmUnavailable(f"missing {missing_binaries()} and cannot install them here: {why}")
    if missing_binaries():
        raise SlurmUnavailable(f"still missing after apt-get install: {missing_binaries()}")


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _sbin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


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

    # ---- paths and configuration
    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.dir / "munge" / "munge.socket"

    @property
    def bin(self) -> Path:
        """Emulated mode: the wrappers of Slurm's commands (see the module docstring)."""
        return self.dir / "bin"

    def env(self, base: dict | None = None) -> dict:
        """An environment for Slurm's commands (and jobs: sbatch passes it on) that talks to this cluster."""
        env = {**(os.environ if base is None else base), "SLURM_CONF": str(self.conf)}
        if self.emulated is not None:
            env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', os.defpath)}"
        return env

    def slurm_conf(self) -> str:
        host = socket.gethostname()
        d = self.dir
        lines = [
            "ClusterName=gpulabtest",
            f"SlurmctldHost={host}({self.controller_address})",
            f"SlurmctldPort={self.ctld_port}",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={self.munge_socket}",
            "SlurmUser=root", "SlurmdUser=root",
            f"StateSaveLocation={d}/state", f"SlurmdSpoolDir={d}/spool/%n",
            f"SlurmctldPidFile={d}/slurmctld.pid", f"SlurmdPidFile={d}/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/slurmctld.log", f"SlurmdLogFile={d}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            "SlurmdParameters=config_overrides", "ReturnToService=2", "MpiDefault=none",
            "SchedulerType=sched/builtin", "MinJobAge=10", "KillWait=2", "InactiveLimit=0", "KillOnBadExit=1",
            f"TaskProlog={d}/task_prolog.sh",  # MinJobAge: why a job ended stays visible between 2-s polls
            f"Epilog={d}/epilog.py",
            "MessageTimeout=10", "MailProg=/bin/true", "SlurmdTimeout=60", "SlurmctldTimeout=60",
            "UnkillableStepTimeout=30",
            "GresTypes=gpu" if self.gpus else "",
        ]
        gres = f" Gres=gpu:{self.gpus}" if self.gpus else ""
        for node in self.nodes:
            lines.append(f"NodeName={node.name} NodeHostname={host} NodeAddr={node.address} Port={node.port} "
                         f"CPUs={self.cpus} RealMemory=1000{gres} State=UNKNOWN")
        lines.append(f"PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        return "\n".join(line for line in lines if line) + "\n"

    def gres_conf(self) -> str:
        # fake GPUs: Slurm only needs a file per device to count and index them
        return "".join(f"NodeName={node.name} Name=gpu File={self.dir}/gpus/{node.name}/gpu[0-{self.gpus - 1}]\n"
                       for node in self.nodes)

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
        login = self._start_emulated() if self.on_emulated else []  # the login node's command prefix
        self.ctld_port = SLURMCTLD_PORT if self.emulated else free_port(self.controller_address)
        for node in self.nodes:
            node.port = node.port or (SLURMD_PORT if self.emulated else free_port(node.address))
            (self.dir / "spool" / node.name).mkdir(exist_ok=True)
            if self.gpus:
                (self.dir / "gpus" / node.name).mkdir(parents=True, exist_ok=True)
                for i in range(self.gpus):  # character devices like /dev/null: Slurm checks the type
                    os.mknod(self.dir / "gpus" / node.name / f"gpu{i}", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        self.conf.write_text(self.slurm_conf())
        prolog = self.dir / "task_prolog.sh"  # slurmstepd exports what it prints as "export K=V"
        prolog.write_text("#!/bin/sh\n" + "".join(f"echo export {k}={v}\n" for k, v in self.task_env.items()))
        prolog.chmod(0o755)
        epilog = self.dir / "epilog.py"
        epilog.write_text(EPILOG.format(python=sys.executable))
        epilog.chmod(0o755)
        if self.gpus:
            (self.dir / "gres.conf").write_text(self.gres_conf())
        self._start_munge(login)
        self.procs["slurmctld"] = self._spawn("slurmctld", [*login, _sbin("slurmctld"), "-D", "-i", "-f",
                                                            str(self.conf)])
        for node in self.nodes:
            self.procs[f"slurmd-{node.name}"] = self._spawn(
                f"slurmd-{node.name}", [*node.wrap, *self._own_shm(), _sbin("slurmd"), "-D", "-N", node.name,
                                        "-f", str(self.conf)])
        self.wait_for_nodes(timeout)

    def _start_emulated(self) -> list[str]:
        """The emulated cluster: node K for slurmd K, the last node (login) for slurmctld and munged,
        so that the keeper ends them if we are killed; the wrappers of Slurm's commands. Returns the
        command prefix that runs in the login node."""
        from gpulab.emulated import EmulatedCluster
        from gpulab.emulated.netns import node_address

        login = len(self.nodes) + 1
        # own_cores=False: each slurmd counts its node's CPUs itself, and the test Slurm declares them all
        self.emulated = EmulatedCluster(nodes=login, link=self.link, mode="root", export=False,
                                        own_cores=False).start()
        for k, node in enumerate(self.nodes, start=1):
            node.address, node.wrap = node_address(k), self.emulated.on_node(k, [])
        self.controller_address = node_address(login)
        self.bin.mkdir()
        machine = os.readlink("/proc/self/ns/net")  # "net:[INODE]": the network Slurm's users call from
        enter = self.emulated.on_node(login, [])
        for name in CLIENTS:
            real = shutil.which(name)
            if real is None:  # salloc or scontrol missing: the tests need neither
                continue
            wrapper = self.bin / name
            wrapper.write_text(f"""#!/bin/sh
# {name} of the test Slurm: from the machine's own network in its login node ({self.controller_address}),
# from inside a node (a job's srun) as it is
if [ "$(readlink /proc/self/ns/net)" = "{machine}" ]; then exec {" ".join(enter)} {real} "$@"; fi
exec {real} "$@"
""")
            wrapper.chmod(0o755)
        return enter

    def _own_shm(self) -> list[str]:
        """A command prefix that gives a slurmd (and its jobs) a private /dev/shm, gone when they are.

        MPI's shared-memory segments of one node stay on that node: two nodes on one machine
        cannot meet in each other's segments, and segments of killed jobs do not outlive the node.
        """
        if not self.private_shm:
            return []
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                f"mount -t tmpfs -o size={self.shm_size},mode=1777 gpulab-shm /dev/shm && exec \"$@\"", "own-shm"]

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
        cmd = [*wrap, "setpriv", "--reuid=munge", "--regid=munge", "--init-groups", _sbin("munged"), "-F",
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
            for proc in left:
                try:
                    proc.kill()
                except psutil.Error:
                    pass
            psutil.wait_procs(left, timeout=10)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpulab.cluster.slurm_testbed", description=__doc__.splitlines()[0],
                                     usage="%(prog)s {up,run} [options] [-- COMMAND ...]")
    parser.add_argument("action", choices=("up", "run"), help="up: run until Ctrl-C; run: run COMMAND against it")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=4, help="CPUs each node declares")
    parser.add_argument("--gpus", type=int, default=2, help="fake GPUs (GRES) each node declares")
    parser.add_argument("--emulated", action="store_true",
                        help="each slurmd in a node of an emulated cluster, slurmctld in its login node")
    parser.add_argument("--link", default="1gbit", help="with --emulated: each node's link (100mbit, 1gbit, unlimited)")
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)  # options may follow the action
    args, command = parser.parse_args(argv[:split]), argv[split + 1:]
    nodes = [Node(f"n{i + 1}") for i in range(args.nodes)]
    with SlurmTestbed(nodes, cpus=args.cpus, gpus=args.gpus, emulated=args.emulated, link=args.link) as slurm:
        where = f" at {', '.join(n.address for n in nodes)}, slurmctld at {slurm.controller_address}" \
            if args.emulated else ""
        print(f"Slurm is up in {slurm.timings['up_s']:.1f} s: nodes {', '.join(n.name for n in nodes)}{where}\n"
              f"export SLURM_CONF={slurm.conf}", flush=True)
        if args.emulated:
            print(f"export PATH={slurm.bin}:$PATH", flush=True)
        if args.action == "run":
            return subprocess.run(command, env=slurm.env()).returncode
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
        finally:
            print("stopping Slurm", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
