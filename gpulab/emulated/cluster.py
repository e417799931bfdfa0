"""``EmulatedCluster``: bring the nodes up and down, reach them, and launch MPI onto them.

Its state file (see ``gpulab.jobsite``) says how to launch onto the nodes and what a job there
records, so that ``gpulab.launch`` and the records read it without importing this package.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpulab import jobsite
from gpulab.emulated.jobs import Jobs
from gpulab.emulated.links import Links, link_bytes_per_s, parse_link
from gpulab.emulated.netns import node_address, tool
from gpulab.jobsite import ENV_STATE, PLACEMENTS, STATE_DIR, ClusterUnavailable
from gpulab.procfs import pids_inside, running

TRANSPORT = "TCP between nodes (UCX_TLS=tcp,self), shared memory inside a node"
# MPICH/UCX settings that make inter-node traffic cross the emulated links
MPI_ENV = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "eth0"}
ENV_CONGESTION = "GPULAB_TCP_CONGESTION"  # TCP's congestion control in the nodes, when not given
# reno: every kernel lets a network namespace use it, and it kept MPICH's all-reduce steady where the
# bbr of some cloud images did not; "machine" leaves the nodes what a new namespace inherits
DEFAULT_CONGESTION, MACHINE_CONGESTION = "reno", "machine"
ENV_TIE_CORES = "GPULAB_TIE_CORES"  # "1": with more nodes than cores, node k on core k mod cores (node_cpus)


class ClusterNameTaken(ClusterUnavailable):
    """A cluster of that name is already up."""


class EmulatedCluster(Links, Jobs):
    """N emulated nodes joined by rate-limited links; see the docstring of ``gpulab.emulated``.

    ``mode``: "auto" (root if root, else a user namespace), "root" or "user".
    ``name`` (optional) registers the cluster under $TMPDIR/gpulab-clusters/NAME.json
    for ``gpulab cluster show/down`` and ``GPULAB_CLUSTER=NAME``.
    ``own_cores`` (default): each node's processes run on their own share of this machine's cores
    where there are at least as many cores as nodes (``node_cpus``), as on separate machines; False
    lets every node use every core. ``tie_cores`` (default $GPULAB_TIE_CORES = 1, else off): with more
    nodes than cores, node k runs on core k mod cores, so that every job places its ranks alike.
    ``congestion``: TCP's congestion control inside the nodes (default $GPULAB_TCP_CONGESTION, else
    ``"reno"``; ``"machine"``: what a new network namespace inherits, the machine's own default); the
    state's ``tcp_congestion`` says which ran. It moves what the links measure: BBR made MPICH's
    all-reduce between nodes vary by half from one call to the next where reno and cubic did not
    (docs/engine_model_accuracy.md).
    """

    def __init__(self, nodes: int = 2, ranks_per_node: int | None = None, link: str | None = "1gbit",
                 placement: str = "block", mode: str = "auto", name: str | None = None,
                 export: bool = True, fault_grace: float = 5.0, own_cores: bool = True,
                 congestion: str | None = None, tie_cores: bool | None = None):
        if nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {nodes}")
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
        if mode not in ("auto", "root", "user"):
            raise ValueError(f"mode must be auto, root or user, got {mode!r}")
        self.nodes, self.ranks_per_node, self.placement = nodes, ranks_per_node, placement
        self.link = parse_link(link)
        self.mode = ("root" if os.geteuid() == 0 else "user") if mode == "auto" else mode
        self._fallback = mode == "auto" and self.mode == "root"  # root refused (a container?): try user
        self.name, self.export, self.fault_grace, self.own_cores = name, export, fault_grace, own_cores
        self.congestion = congestion or os.environ.get(ENV_CONGESTION) or DEFAULT_CONGESTION
        self.tie_cores = os.environ.get(ENV_TIE_CORES, "0") not in ("", "0") if tie_cores is None else tie_cores
        self.keeper: subprocess.Popen | None = None
        self.state: dict | None = None
        self.state_file: str | None = None
        self._saved_env: str | None = None

    # ---- life cycle -------------------------------------------------------------------------
    def start(self, detached: bool = False) -> EmulatedCluster:
        """Bring the cluster up (``detached``: it stays up after this process, see ``gpulab cluster``)."""
        try:
            return self._start(detached)
        except ClusterUnavailable as as_root:
            if not self._fallback or isinstance(as_root, ClusterNameTaken):
                raise
            self.mode, self._fallback = "user", False
            try:
                return self._start(detached)
            except ClusterUnavailable as as_user:
                raise ClusterUnavailable(f"{as_root}\n{as_user}") from None

    def _start(self, detached: bool) -> EmulatedCluster:
        check_tools()
        tmpdir = tempfile.mkdtemp(prefix="gpulab-cluster-")
        if self.name:
            STATE_DIR.mkdir(exist_ok=True)
            state_file = str(STATE_DIR / f"{self.name}.json")
            if os.path.exists(state_file):
                other = EmulatedCluster.attach(state_file)
                if other.alive():
                    shutil.rmtree(tmpdir)
                    raise ClusterNameTaken(f"a cluster named {self.name!r} is already up (gpulab cluster down "
                                             f"{self.name})")
                os.unlink(state_file)  # its keeper was killed: clear what it could not
                shutil.rmtree(other.state["tmpdir"], ignore_errors=True)
        else:
            state_file = os.path.join(tmpdir, "state.json")
        report_fd = None if detached else os.dup(2)  # the keeper reports faults on our stderr
        spec = {"nodes": self.nodes, "rate": self.link, "tmpdir": tmpdir, "detached": detached,
                "state_file": state_file if self.name else None, "report_fd": report_fd,
                "fault_grace": self.fault_grace,
                "congestion": None if self.congestion == MACHINE_CONGESTION else self.congestion}
        cmd = [sys.executable, "-m", "gpulab.emulated.netns", json.dumps(spec)]
        if self.mode == "user":
            cmd = [tool("unshare"), "--user", "--map-root-user", "--", *cmd]
        env = {**os.environ, "PYTHONPATH": _package_root() + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.keeper = subprocess.Popen(cmd, stdin=subprocess.DEVNULL if detached else subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                       start_new_session=True, pass_fds=() if detached else (report_fd,))
        if report_fd is not None:
            os.close(report_fd)
        line = self.keeper.stdout.readline()
        try:
            reply = json.loads(line) if line else {"ok": False, "error": self.keeper.stderr.read().strip()}
        except json.JSONDecodeError:
            reply = {"ok": False, "error": line + self.keeper.stderr.read()}
        if not reply.get("ok"):
            self.keeper.wait()
            self.keeper = None
            shutil.rmtree(tmpdir, ignore_errors=True)
            raise ClusterUnavailable(_explain(self.mode, reply.get("error", "")))
        try:
            # what gpulab.jobsite reads to launch onto the nodes and to say where a job ran
            self.state = {**reply, "emulated": True, "nodes": self.nodes, "ranks_per_node": self.ranks_per_node,
                          "placement": self.placement, "link": self.link,
                          "link_bytes_per_s": link_bytes_per_s(self.link), "transport": TRANSPORT,
                          "mode": self.mode, "tmpdir": tmpdir, "name": self.name, "started": time.time(),
                          "hosts": self.addresses(), "mpi_env": MPI_ENV,
                          "cpus": node_cpus(self.nodes, tie=self.tie_cores) if self.own_cores and tool("taskset")
                          else None}
            self.state["launcher"] = self._write_launcher(tmpdir)
            self.state["mpiexec"] = self.mpiexec_prefix()
            self.state_file = state_file
            self._write_state()
        except BaseException:  # the keeper is up: end it (and the namespaces with it) rather than leave it
            self.state = self.state or {"tmpdir": tmpdir}
            self.stop()
            raise
        return self

    def _write_state(self, **changes) -> None:
        """Update the state file whole or not at all: 'gpulab cluster show' and launches may read it at any
        moment (its directory stays: 'down' removed it when empty, and a cluster whose 'up' had just made
        it then lost its file)."""
        self.state.update(changes)
        partial = f"{self.state_file}.{os.getpid()}.tmp"
        try:
            Path(partial).write_text(json.dumps(self.state, indent=1))
            os.replace(partial, self.state_file)
        finally:
            Path(partial).unlink(missing_ok=True)

    def stop(self) -> None:
        """Tear everything down and wait until it is gone."""
        if self.keeper is not None:  # ours: close the pipe (or signal a detached keeper) and reap it
            if self.keeper.stdin:
                self.keeper.stdin.close()
            else:
                self.keeper.terminate()
            try:
                self.keeper.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.keeper.kill()
                self.keeper.wait()
            for stream in (self.keeper.stdout, self.keeper.stderr):
                stream.close()
            self.keeper = None
        elif self.state is not None:  # attached (gpulab cluster down): signal it, wait for it to exit
            try:
                os.kill(self.state["pid"], 15)
            except ProcessLookupError:
                pass
            # the keeper lets go of the namespaces first, then removes its files and exits: until then
            # it is a process in the switch's namespace (a test checking right after 'down' found it)
            deadline = time.monotonic() + 30
            while (self.alive() or running(self.state["pid"])) and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.state_file and os.path.exists(self.state_file):
                os.unlink(self.state_file)
        if self.state:
            shutil.rmtree(self.state["tmpdir"], ignore_errors=True)

    def __enter__(self) -> EmulatedCluster:
        if self.state is None:
            self.start()
        jobsite.enter(self.state_file)
        if self.export:
            self._saved_env = os.environ.get(ENV_STATE)
            os.environ[ENV_STATE] = self.state_file
        return self

    def __exit__(self, *exc) -> None:
        jobsite.leave(self.state_file)
        if self.export:
            if self._saved_env is None:
                os.environ.pop(ENV_STATE, None)
            else:
                os.environ[ENV_STATE] = self._saved_env
        self.stop()

    @classmethod
    def attach(cls, name_or_path: str) -> EmulatedCluster:
        """A handle on a running cluster, by name (``gpulab cluster up NAME``) or state-file path."""
        path = jobsite.state_path(name_or_path)
        state = jobsite.read_state(name_or_path)
        self = cls(state["nodes"], state["ranks_per_node"], state["link"], state["placement"], mode=state["mode"],
                   name=state.get("name"), export=False, own_cores=bool(state.get("cpus")))
        self.state, self.state_file = state, path
        return self

    def alive(self) -> bool:
        """Whether the keeper still holds the namespaces."""
        return self.state is not None and jobsite.cluster_alive(self.state)

    # ---- reaching the nodes -------------------------------------------------------------------
    def node_netns(self, k: int) -> str:
        """Path that opens node k's (1-based) network namespace."""
        return f"/proc/{self.state['pid']}/fd/{self.state['fds'][k - 1]}"

    def switch_netns(self) -> str:
        return f"/proc/{self.state['pid']}/ns/net"

    def addresses(self) -> list[str]:
        return [node_address(k) for k in range(1, self.nodes + 1)]

    def _enter(self, netns: str, from_inside: bool = False) -> list[str]:
        # user mode: enter the keeper's user namespace too, unless already inside it (hydra's proxies)
        user = ([f"--user=/proc/{self.state['pid']}/ns/user", "--preserve-credentials"]
                if self.mode == "user" and not from_inside else [])
        return [tool("nsenter"), *user, f"--net={netns}", "--"]

    def on_node(self, k: int, argv: list[str], from_inside: bool = False) -> list[str]:
        """argv that runs ``argv`` inside node k (``from_inside``: from a process already in the cluster)."""
        cpus = self.state.get("cpus")
        pin = [tool("taskset"), "-c", ",".join(map(str, cpus[k - 1]))] if cpus else []
        return [*pin, *self._enter(self.node_netns(k), from_inside), *argv]

    def on_switch(self, argv: list[str]) -> list[str]:
        return [*self._enter(self.switch_netns()), *argv]

    def _write_launcher(self, tmpdir: str) -> str:
        """hydra's launcher (``-launcher ssh -launcher-exec``): ``SCRIPT [-x] HOST COMMAND...`` -> that node."""
        cases = "\n".join(f"  {node_address(k)}) exec {' '.join(self.on_node(k, [], from_inside=True))} sh -c \"$*\" ;;"
                          for k in range(1, self.nodes + 1))
        path = os.path.join(tmpdir, "launcher.sh")
        Path(path).write_text(f"""#!/bin/sh
# hydra calls: launcher [-x ...] HOST "proxy command"; run the command inside HOST's namespace
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host=$1; shift
case "$host" in
{cases}
  *) echo "gpulab emulated cluster: unknown host $host" >&2; exit 1 ;;
esac
""")
        os.chmod(path, 0o755)
        return path

    # ---- MPI -------------------------------------------------------------------------------
    def topology(self, n: int) -> dict:
        """What a result records about where its ``n`` ranks ran."""
        return jobsite.topology(self.state, n)

    def mpiexec_command(self, n: int, python_args: list[str], program: list[str] | None = None) -> list[str]:
        """argv that starts ``python *python_args`` (or ``program``) on ``n`` ranks spread over the nodes.

        mpiexec runs inside node 1 (the head node) and reaches the others through the launcher
        script; hosts are given as addresses, so hydra's control traffic stays on the emulated network.
        """
        return jobsite.mpiexec_command(self.state, n, program or [sys.executable, *python_args])

    def mpiexec_prefix(self) -> list[str]:
        """mpiexec inside the head node, with the launcher script (the part before ``-n N``)."""
        return self.on_node(1, [hydra_mpiexec(), "-launcher", "ssh", "-launcher-exec", self.state["launcher"]])

    def mpiexec_args(self, n: int) -> list[str]:
        """Hosts and environment for ``n`` ranks (the part after ``-n N``)."""
        return jobsite.mpiexec_args(self.state, n)

    def pids_on_node(self, k: int) -> list[int]:
        return pids_inside({self.state["inodes"][k - 1]})


def node_cpus(nodes: int, allowed: list[int] | None = None, tie: bool = False) -> list[list[int]] | None:
    """The cores each node's processes run on (``taskset``), or None where every node uses every core.

    Separate machines do not lend each other cores: without this a rank of one node spinning in MPI
    while it waits for the link takes the core a rank of another node computes on. So the CPUs this
    process may use are split between the nodes, as evenly as they go. With more nodes than CPUs no
    split keeps the nodes apart, and tying two nodes to each core only stops the kernel from moving
    work to an idle one, so then every node keeps every core, unless ``tie``: node k then runs on core
    k mod cores. Left to the kernel, the ranks land differently in every job, and so does a small
    message's time (docs/cluster.md, "Your laptop as a cluster", has both measured).
    """
    allowed = sorted(os.sched_getaffinity(0)) if allowed is None else allowed
    if nodes > len(allowed):
        return [[allowed[k % len(allowed)]] for k in range(nodes)] if tie else None
    share, extra = divmod(len(allowed), nodes)
    bounds = [k * share + min(k, extra) for k in range(nodes + 1)]
    return [allowed[bounds[k]:bounds[k + 1]] for k in range(nodes)]


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def hydra_mpiexec() -> str:
    """MPICH's hydra mpiexec (the ``mpich`` wheel's, beside this Python, else the first on PATH): the
    emulated cluster needs its launcher options, so $GPULAB_MPIEXEC (a site's srun, say) does not apply,
    and a system's Open MPI ``mpiexec`` (which rejects ``-launcher``) is passed over."""
    on_path = [str(Path(d) / "mpiexec") for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    for candidate in dict.fromkeys([str(Path(sys.executable).parent / "mpiexec"), *on_path]):
        if os.access(candidate, os.X_OK) and _is_hydra(candidate):
            return candidate
    raise ClusterUnavailable("the emulated cluster launches with MPICH's mpiexec (pip install mpich)")


@functools.cache
def _is_hydra(mpiexec: str) -> bool:
    try:
        shown = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "HYDRA" in shown


def check_tools() -> None:
    missing = [name for name in ("ip", "tc", "nsenter", "unshare") if tool(name) is None]
    if missing:
        raise ClusterUnavailable(f"an emulated cluster needs {', '.join(missing)} (Debian/Ubuntu: apt-get install "
                                 f"iproute2 util-linux)")


def _explain(mode: str, error: str) -> str:
    if mode == "user":
        hint = ("unprivileged user namespaces seem disabled here (check /proc/sys/kernel/"
                "unprivileged_userns_clone, /proc/sys/user/max_user_namespaces, or AppArmor's "
                "kernel.apparmor_restrict_unprivileged_userns); run as root or enable them")
    else:
        hint = "creating network namespaces, veths, a bridge or tbf failed (kernel modules veth, bridge, sch_tbf?)"
    return f"cannot set up an emulated cluster ({mode} mode): {error.strip() or 'no reason given'}; {hint}"
