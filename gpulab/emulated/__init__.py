"""An emulated multi-node cluster on one Linux machine: network namespaces as nodes.

    from gpulab.emulated import EmulatedCluster
    with EmulatedCluster(nodes=4, ranks_per_node=2, link="1gbit", placement="block") as cluster:
        subprocess.run(cluster.mpiexec_command(8, ["-m", "my_program"]))
        # or anything that calls gpulab.launch.mpiexec_command (gpulab bench/tune/train, run_mpi)

Each node is a network namespace with one interface (``eth0``, 10.77.0.K/24)
whose veth peer is a port of a Linux bridge in a switch namespace; ``tbf``
limits the rate of both ends (``link="1gbit"``, ``"10gbit"``, ``"100mbit"`` or
``None``/``"unlimited"``). MPI ranks on one node share memory as before;
between nodes MPICH is forced onto TCP (``UCX_TLS=tcp,self``), because UCX
would otherwise move data between namespaces through shared memory and the
links would carry nothing. ``Split_type(COMM_TYPE_SHARED)`` gives one
communicator per emulated node.

Set up as root, or unprivileged inside a user namespace (``unshare -r``) where
the kernel allows it (``mode="auto"`` tries root, then user). Where neither
works, :class:`ClusterUnavailable` says why; the commands then print the
reason and run on the single machine as before.

Nothing is left behind: the namespaces are held open by one keeper process
(``gpulab.emulated.netns``) and are never bind-mounted, so they vanish with
the keeper, which tears everything down when its creator ends, however it
ends (normal exit, exception, Ctrl-C, kill -9).

Only the standard library is imported here (``gpulab.launch`` consults
:func:`active_cluster` on every launch).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpulab.emulated.netns import node_address, running, tool

PLACEMENTS = ("block", "round-robin")
TRANSPORT = "TCP between nodes (UCX_TLS=tcp,self), shared memory inside a node"
ENV_STATE = "GPULAB_CLUSTER"  # path of the state file of the cluster that launches use
ENV_TOPOLOGY = "GPULAB_TOPOLOGY"  # JSON topology, set in every rank of an emulated job
STATE_DIR = Path(tempfile.gettempdir()) / "gpulab-clusters"  # state files of `gpulab cluster up`

# MPICH/UCX settings that make inter-node traffic cross the emulated links
MPI_ENV = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "eth0"}


SOCKET_PATH_MAX = 107  # bytes of a unix socket's path (sun_path holds 108 with the final NUL)


def cluster_tmpdir() -> str:
    """A fresh directory for a cluster's files, short enough for the ipc sockets made in it.

    The controller of emulated engines binds unix sockets named ``DIR/ipc-PORT`` (and ``ipc:PORT``);
    under a long TMPDIR (pytest's per-test directories, a batch job's scratch) the name passes the
    limit and the controller exits with nothing but its status. Then the directory goes to /tmp.
    """
    base = tempfile.gettempdir()
    if len(os.path.join(base, "gpulab-cluster-xxxxxxxx", "ipc:65535")) > SOCKET_PATH_MAX:
        base = "/tmp"
    return tempfile.mkdtemp(prefix="gpulab-cluster-", dir=base)


class ClusterUnavailable(RuntimeError):
    """This machine cannot host an emulated cluster (the message says why and what would help)."""


class ClusterNameTaken(ClusterUnavailable):
    """A cluster of that name is already up."""


class ClusterJobFailed(RuntimeError):
    """A job on the emulated cluster failed or timed out; the message names what failed."""


_RATE = re.compile(r"^(\d+(?:\.\d+)?)([kmg]?)bit$")


def parse_link(link: str | None) -> str | None:
    """'1gbit' -> '1gbit'; None, '', 'unlimited', 'none' -> None; anything else -> ValueError."""
    if link is None or str(link).lower() in ("", "unlimited", "none", "inf"):
        return None
    text = str(link).lower()
    if not _RATE.match(text):
        raise ValueError(f"link rate must look like 100mbit, 1gbit, 10gbit or 'unlimited', got {link!r}")
    return text


def link_bytes_per_s(link: str | None) -> float | None:
    """The rate of a link in bytes per second (None for unlimited)."""
    link = parse_link(link)
    if link is None:
        return None
    value, unit = _RATE.match(link).groups()
    return float(value) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[unit] / 8


def _hosts(nodes: int, n: int, ranks_per_node: int | None, placement: str) -> tuple[list[tuple[int, int]], int]:
    """[(node k, slots)] for hydra's -hosts, and the ranks per node used."""
    rpn = ranks_per_node if ranks_per_node and ranks_per_node * nodes >= n else math.ceil(n / nodes)
    used = min(nodes, math.ceil(n / rpn)) if placement == "block" else min(nodes, n)
    slots = rpn if placement == "block" else 1
    return [(k, slots) for k in range(1, used + 1)], rpn


def rank_nodes(nodes: int, n: int, ranks_per_node: int | None = None, placement: str = "block") -> list[int]:
    """The emulated node (1-based) of every rank, as hydra places them."""
    hosts, rpn = _hosts(nodes, n, ranks_per_node, placement)
    if placement == "block":
        return [hosts[r // rpn][0] for r in range(n)]
    return [hosts[r % len(hosts)][0] for r in range(n)]


_STACK: list["EmulatedCluster"] = []


def active_cluster() -> "EmulatedCluster | None":
    """The cluster launches go to: the innermost ``with EmulatedCluster``, else $GPULAB_CLUSTER."""
    if _STACK:
        return _STACK[-1]
    state = os.environ.get(ENV_STATE)
    if state:
        cluster = EmulatedCluster.attach(state)
        if not cluster.alive():
            raise ClusterUnavailable(f"the emulated cluster {state!r} (${ENV_STATE}) is no longer up")
        return cluster
    return None


class EmulatedCluster:
    """N emulated nodes joined by rate-limited links; see the module docstring.

    ``mode``: "auto" (root if root, else a user namespace), "root" or "user".
    ``name`` (optional) registers the cluster under $TMPDIR/gpulab-clusters/NAME.json
    for ``gpulab cluster show/down`` and ``GPULAB_CLUSTER=NAME``.
    """

    def __init__(self, nodes: int = 2, ranks_per_node: int | None = None, link: str | None = "1gbit",
                 placement: str = "block", mode: str = "auto", name: str | None = None,
                 export: bool = True, fault_grace: float = 5.0):
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
        self.name, self.export, self.fault_grace = name, export, fault_grace
        self.keeper: subprocess.Popen | None = None
        self.state: dict | None = None
        self.state_file: str | None = None
        self._saved_env: str | None = None

    # ---- life cycle -------------------------------------------------------------------------
    def start(self, detached: bool = False) -> "EmulatedCluster":
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

    def _start(self, detached: bool) -> "EmulatedCluster":
        check_tools()
        tmpdir = cluster_tmpdir()
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
                "fault_grace": self.fault_grace}
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
        partial = f"{state_file}.{os.getpid()}.tmp"
        try:
            self.state = {**reply, "nodes": self.nodes, "ranks_per_node": self.ranks_per_node,
                          "placement": self.placement, "link": self.link, "mode": self.mode, "tmpdir": tmpdir,
                          "name": self.name, "started": time.time()}
            self.state["launcher"] = self._write_launcher(tmpdir)
            self.state_file = state_file
            # whole or not at all: 'gpulab cluster show' may read it at any moment (its directory stays:
            # 'down' removed it when empty, and a cluster whose 'up' had just made it then lost its file)
            Path(partial).write_text(json.dumps(self.state, indent=1))
            os.replace(partial, state_file)
        except BaseException:  # the keeper is up: end it (and the namespaces with it) rather than leave it
            Path(partial).unlink(missing_ok=True)
            self.state = self.state or {"tmpdir": tmpdir}
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Tear everything down and wait until it is gone."""
        if getattr(self, "_ipc_stop", None) is not None:
            self._ipc_stop.set()
            self._ipc_stop = None
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

    def __enter__(self) -> "EmulatedCluster":
        if self.state is None:
            self.start()
        _STACK.append(self)
        if self.export:
            self._saved_env = os.environ.get(ENV_STATE)
            os.environ[ENV_STATE] = self.state_file
        return self

    def __exit__(self, *exc) -> None:
        if self in _STACK:
            _STACK.remove(self)
        if self.export:
            if self._saved_env is None:
                os.environ.pop(ENV_STATE, None)
            else:
                os.environ[ENV_STATE] = self._saved_env
        self.stop()

    @classmethod
    def attach(cls, name_or_path: str) -> "EmulatedCluster":
        """A handle on a running cluster, by name (``gpulab cluster up NAME``) or state-file path."""
        path = name_or_path if os.sep in name_or_path else str(STATE_DIR / f"{name_or_path}.json")
        try:
            state = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ClusterUnavailable(f"no emulated cluster {name_or_path!r} is up (no {path})") from None
        self = cls(state["nodes"], state["ranks_per_node"], state["link"], state["placement"], mode=state["mode"],
                   name=state.get("name"), export=False)
        self.state, self.state_file = state, path
        return self

    def alive(self) -> bool:
        """Whether the keeper still holds the namespaces."""
        if self.state is None:
            return False
        try:
            return os.stat(self.node_netns(1)).st_ino == self.state["inodes"][0]
        except OSError:
            return False

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
        return [*self._enter(self.node_netns(k), from_inside), *argv]

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
        nodes_of = rank_nodes(self.nodes, n, self.ranks_per_node, self.placement)
        per_node = [nodes_of.count(k) for k in sorted(set(nodes_of))]
        return {"emulated": True, "nodes": len(per_node), "ranks_per_node": max(per_node),
                "placement": self.placement, "link": self.link or "unlimited",
                "link_bytes_per_s": link_bytes_per_s(self.link), "transport": TRANSPORT,
                "rank_nodes": nodes_of, "mode": self.mode}

    def mpiexec_command(self, n: int, python_args: list[str], program: list[str] | None = None) -> list[str]:
        """argv that starts ``python *python_args`` (or ``program``) on ``n`` ranks spread over the nodes.

        mpiexec runs inside node 1 (the head node) and reaches the others through the launcher
        script; hosts are given as addresses, so hydra's control traffic stays on the emulated network.
        """
        if n < 1:
            raise ValueError(f"number of ranks must be >= 1, got {n}")
        return [*self.mpiexec_prefix(), "-n", str(n), *self.mpiexec_args(n),
                *(program or [sys.executable, *python_args])]

    def mpiexec_prefix(self) -> list[str]:
        """mpiexec inside the head node, with the launcher script (the part before ``-n N``)."""
        return self.on_node(1, [hydra_mpiexec(), "-launcher", "ssh", "-launcher-exec", self.state["launcher"]])

    def mpiexec_args(self, n: int) -> list[str]:
        """Hosts and environment for ``n`` ranks (the part after ``-n N``)."""
        hosts, _ = _hosts(self.nodes, n, self.ranks_per_node, self.placement)
        args = ["-hosts", ",".join(f"{node_address(k)}:{slots}" for k, slots in hosts)]
        for key, value in {**MPI_ENV, ENV_TOPOLOGY: json.dumps(self.topology(n))}.items():
            args += ["-genv", key, value]
        return args

    def ipc_prefix(self) -> str:
        """A path prefix for unix-socket (ZeroMQ ipc://) endpoints that every node can reach: unix
        sockets live in the file system, which the namespaces share, so no address is needed."""
        return os.path.join(self.state["tmpdir"], "ipc")

    def link_ipc_sockets(self) -> list[str]:
        """ipyparallel 9's controller binds ipc sockets as PREFIX-PORT while engines and clients
        connect to PREFIX:PORT: give every bound socket its second name (a symlink)."""
        made = []
        prefix = Path(self.ipc_prefix())
        for sock in prefix.parent.glob(prefix.name + "-*"):
            alias = sock.with_name(prefix.name + ":" + sock.name[len(prefix.name) + 1:])
            if not alias.is_symlink() and not alias.exists():
                try:
                    alias.symlink_to(sock.name)
                except FileExistsError:
                    continue
                made.append(str(alias))
        return made

    def keep_linking_ipc_sockets(self) -> None:
        """Run :meth:`link_ipc_sockets` every 0.1 s until the cluster stops (the controller's
        schedulers bind their sockets after it reports ready, and again after a restart)."""
        import threading

        if getattr(self, "_ipc_stop", None) is not None:
            return
        self._ipc_stop = threading.Event()

        def loop(stop=self._ipc_stop):
            while not stop.wait(0.1):
                try:
                    self.link_ipc_sockets()
                except OSError:
                    pass

        threading.Thread(target=loop, daemon=True, name="gpulab-ipc-aliases").start()

    # ---- inspection and faults --------------------------------------------------------------------
    def describe(self) -> str:
        lines = [f"emulated cluster{' ' + self.name if self.name else ''}: {self.nodes} nodes, link "
                 f"{self.link or 'unlimited'}, placement {self.placement}, ranks per node "
                 f"{self.ranks_per_node or 'ranks / nodes'}, mode {self.mode}, keeper pid {self.state['pid']}"]
        for k in range(1, self.nodes + 1):
            addr = _run(self.on_node(k, [tool("ip"), "-br", "addr", "show", "dev", "eth0"])).split()
            qdisc = _run(self.on_node(k, [tool("tc"), "qdisc", "show", "dev", "eth0"])).strip()
            pids = self.pids_on_node(k)
            lines.append(f"  node {k}: {' '.join(addr[2:3])} eth0 {addr[1] if len(addr) > 1 else '?'}; "
                         f"{qdisc.split(' root ')[0].replace('qdisc ', '') or 'no qdisc'} "
                         f"{_rate_of(qdisc)}; {len(pids)} processes")
        return "\n".join(lines)

    def pids_on_node(self, k: int) -> list[int]:
        from gpulab.emulated.netns import pids_inside

        return pids_inside({self.state["inodes"][k - 1]})

    def link_down(self, k: int) -> None:
        """Cut node k's link (its switch port goes down): a fault to test with."""
        subprocess.run(self.on_switch([tool("ip"), "link", "set", f"n{k}", "down"]), check=True)

    def link_up(self, k: int) -> None:
        subprocess.run(self.on_switch([tool("ip"), "link", "set", f"n{k}", "up"]), check=True)

    def set_link(self, link: str | None) -> None:
        """Change every node's link rate on the running cluster, both ends as at start: "100mbit",
        "1gbit", ... or "unlimited". Running jobs see the new rate at once."""
        from gpulab.emulated.netns import TBF_BURST, TBF_LATENCY

        rate = parse_link(link)
        if rate:
            command = ["replace", "root", "tbf", "rate", rate, "burst", TBF_BURST, "latency", TBF_LATENCY]
        else:  # no qdisc: the veth's full speed
            command = ["del", "root"]
        for k in range(1, self.nodes + 1):
            for argv in (self.on_node(k, [tool("tc"), "qdisc", command[0], "dev", "eth0", *command[1:]]),
                         self.on_switch([tool("tc"), "qdisc", command[0], "dev", f"n{k}", *command[1:]])):
                done = subprocess.run(argv, capture_output=True, text=True)
                already_unlimited = not rate and ("handle of zero" in done.stderr or "No such" in done.stderr)
                if done.returncode != 0 and not already_unlimited:
                    raise RuntimeError(f"{' '.join(argv[-8:])}: {done.stderr.strip()}")
        self.link = rate

    def links_down(self) -> list[int]:
        """Nodes whose link is down."""
        out = _run(self.on_switch([tool("ip"), "-br", "link", "show", "master", "br0"]))
        return [int(line.split()[0].split("@")[0][1:]) for line in out.splitlines()
                if line.split() and line.split()[1] != "UP"]


    def faults(self) -> list[str]:
        """What the keeper noticed so far (links down and up, jobs it ended), oldest first."""
        try:
            text = Path(self.state["tmpdir"], "faults.log").read_text()
        except FileNotFoundError:
            return []
        return [line.split(" ", 1)[1].replace("gpulab emulated cluster: ", "") for line in text.splitlines()]

    def run(self, n: int, python_args: list[str], *, timeout: float | None = None, env: dict | None = None,
            cwd=None) -> subprocess.CompletedProcess:
        """Run ``python *python_args`` on ``n`` ranks; raise :class:`ClusterJobFailed` naming what failed.

        A rank that dies ends the job at once (hydra notices); a link that goes down ends it after
        ``fault_grace`` seconds (the keeper notices); ``timeout`` bounds everything else.
        """
        import threading

        from gpulab.emulated.netns import remove_files

        seen = len(self.faults())
        proc = subprocess.Popen(self.mpiexec_command(n, python_args), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd, start_new_session=True)
        start, done, ranks, exits = time.monotonic(), threading.Event(), {}, {"order": [], "complete": False}
        scratch: set[str] = set()
        tracker = threading.Thread(target=self._track_ranks, args=(done, ranks, exits, n, scratch), daemon=True)
        tracker.start()
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.end_jobs()
            proc.kill()
            output, _ = proc.communicate()
            raise ClusterJobFailed(self._diagnosis(f"timed out after {timeout:.0f} s", n, output, seen,
                                                   ranks, exits)) from None
        finally:
            done.set()
            tracker.join()
            if proc.returncode is not None:  # the job is over: a killed or aborted one left these
                remove_files(scratch)
        if proc.returncode != 0:
            elapsed = time.monotonic() - start
            raise ClusterJobFailed(self._diagnosis(f"failed after {elapsed:.1f} s (exit {proc.returncode})", n,
                                                   output, seen, ranks, exits))
        return subprocess.CompletedProcess(proc.args, 0, output, None)

    def end_jobs(self) -> None:
        """Kill every process running on the nodes (the cluster stays up), and remove their MPI scratch files."""
        from gpulab.emulated.netns import kill_inside

        kill_inside(set(self.state["inodes"]))

    def _track_ranks(self, done, ranks: dict, exits: dict, n: int, scratch: set) -> None:
        """pid -> MPI rank of the processes on the nodes (hydra names a dead process by pid only), and
        the order in which ranks end (``exits["order"]``: (pid, time)). When one rank is killed its
        peers may crash on the broken connection, and hydra reports whichever death it saw first; on a
        busy machine even the order of the exits can put a crashing peer first, so all are listed.
        ``scratch`` collects the MPI scratch files that the live ranks and their proxies hold: once a
        rank is killed, hydra kills the rest, and the dead hold nothing."""
        import select as select_module

        from gpulab.emulated.netns import mpi_scratch_held, parent, pids_inside

        pidfds: dict[int, int] = {}  # pidfd -> pid
        try:
            while not done.is_set():
                for pid in pids_inside(set(self.state["inodes"])) if len(ranks) < n else []:
                    if pid in ranks:
                        continue
                    try:
                        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                    except OSError:
                        continue
                    rank = next((v[9:] for v in environ if v.startswith(b"PMI_RANK=")), None)
                    if rank is not None:
                        ranks[pid] = int(rank)
                        try:
                            pidfds[os.pidfd_open(pid)] = pid
                        except (OSError, AttributeError):  # gone already, or no pidfd (Linux < 5.3)
                            pass
                if len(pidfds) == n and not exits["order"]:
                    exits["complete"] = True  # every rank watched before any ended: the order is known
                live = list(pidfds.values())  # not a dead rank's pid: it may be another process's by now
                scratch |= mpi_scratch_held({*live, *map(parent, live)} - {None})
                # wait for rank exits (in order), looking for new ranks every 0.05 s until all are found
                wait = 0.05 if len(ranks) < n else 0.2
                ready, _, _ = select_module.select(list(pidfds), [], [], wait) if pidfds else ([], [], [])
                if not pidfds:
                    done.wait(wait)
                for fd in ready:
                    exits["order"].append((pidfds.pop(fd), time.monotonic()))
                    os.close(fd)
        finally:
            for fd in pidfds:
                os.close(fd)

    def _diagnosis(self, what: str, n: int, output: str, seen: int, ranks: dict, exits: dict) -> str:
        nodes_of = self.topology(n)["rank_nodes"]
        reasons = [f for f in self.faults()[seen:] if "up again" not in f]
        down = self.links_down()
        if down and not reasons:
            reasons.append("links down: " + ", ".join(f"node {k} ({node_address(k)})" for k in down))
        # hydra: "PID 123 RUNNING AT 10.77.0.2" then "EXIT CODE: 9" (a process killed by signal 9 reads so)
        for match in re.finditer(r"PID (\d+) RUNNING AT (\S+)\s*\n=\s*(KILLED BY SIGNAL: [^\n=]*|EXIT CODE: \d+)",
                                 output):
            pid, host, how = int(match.group(1)), match.group(2), match.group(3).strip()
            node = self.addresses().index(host) + 1 if host in self.addresses() else "?"
            rank = ranks.get(pid)
            who = f"rank {rank}" if rank is not None else "a rank"
            code = re.match(r"EXIT CODE: (\d+)", how)
            if code:
                number = int(code.group(1))
                how = f"exit code {number}" + (f" (how hydra reports a process killed by signal {number}, "
                                               f"{signal.Signals(number).name})" if 0 < number < 32 else "")
            reasons.append(f"{who} (pid {pid}, node {node}, {host}) ended: {how}")
        ended = exits["order"]
        if ended and exits["complete"] and not any("link down" in r for r in reasons):
            t0 = ended[0][1]
            listed = [f"rank {ranks[pid]} (pid {pid}, node {nodes_of[ranks[pid]]}, "
                      f"{node_address(nodes_of[ranks[pid]])}) at +{t - t0:.3f} s" for pid, t in ended[:8]]
            reasons.insert(0, "ranks in the order they ended: " + ", ".join(listed))
        summary = "; ".join(dict.fromkeys(reasons)) or "no fault seen by the cluster; see the output"
        return f"job of {n} ranks on the emulated cluster {what}: {summary}\noutput tail:\n{output[-2000:]}"


def _rate_of(qdisc: str) -> str:
    match = re.search(r"rate (\S+)", qdisc)
    return f"rate {match.group(1)}" if match else ""


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True).stdout


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def hydra_mpiexec() -> str:
    """MPICH's hydra mpiexec (the ``mpich`` wheel's, beside this Python, else on PATH): the emulated
    cluster needs its launcher options, so $GPULAB_MPIEXEC (a site's srun, say) does not apply."""
    beside_python = Path(sys.executable).parent / "mpiexec"
    found = str(beside_python) if beside_python.exists() else shutil.which("mpiexec")
    if found is None:
        raise ClusterUnavailable("the emulated cluster launches with MPICH's mpiexec (pip install mpich)")
    return found


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
