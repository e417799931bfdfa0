"""The keeper: the one process that owns an emulated cluster's network namespaces.

    python -m gpulab.emulated.netns SPEC_JSON      (started by EmulatedCluster, never by hand)

It enters a fresh network namespace, the "switch" (a Linux bridge), creates
one namespace per node, and keeps each node namespace alive by holding an open
file descriptor to it (no ``ip netns add``: nothing is bind-mounted in
/run/netns, so nothing outlives the keeper). Each node gets a veth pair: the
end inside the node is ``eth0`` with address 10.77.0.K/24, the other end is a
port of the bridge; a ``tbf`` qdisc on both ends limits the rate in each
direction, and both ends carry 9000-byte frames (``MTU``). The addresses
exist only inside these namespaces, which have no route anywhere else.

Others reach a node through ``/proc/KEEPER_PID/fd/FD`` (``nsenter --net=...``).
The keeper prints one JSON line when ready, then waits until its stdin closes
(the creator ended, however it ended) or it gets SIGTERM/SIGINT/SIGHUP. Then it
kills every process inside the nodes (and removes the MPI scratch files they
held, which SIGKILL leaves), closes the descriptors (the kernel removes the
namespaces, their veths and the bridge) and deletes its temporary directory.
If the keeper itself is killed with SIGKILL the namespaces still vanish as
soon as the last process inside them exits.

Only the standard library and ``gpulab.procfs`` (which imports nothing else): this runs
before anything else is set up.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

from gpulab.procfs import mpi_scratch_held, net_inode, pids_inside, remove_files

CLONE_NEWNET = 0x40000000
SUBNET = "10.77.0"
TBF_BURST = "32kb"  # smaller bursts cost rate (tbf at 1 Gbit/s with a 4 KB burst falls well short of it);
# larger ones let messages below the burst through at full speed
TBF_LATENCY = "50ms"
# Jumbo frames, as cluster Ethernet is usually set up. With 1500-byte frames the kernel's per-packet work
# (veth, bridge, tbf, TCP: all softirq on the machine's own cores) takes the cores the ranks need and holds
# a chain below the link's rate; at 9000 it runs at the link's rate (docs/emulated_bcast.md#why-jumbo-frames).
MTU = "9000"

_libc = ctypes.CDLL(None, use_errno=True)


def tool(name: str) -> str | None:
    """Absolute path of ip, tc, nsenter, unshare (often in /usr/sbin, off an ordinary user's PATH)."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin",
                                                     "/usr/bin", "/bin"]))


def _unshare_net() -> None:
    if _libc.unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}")


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def node_address(k: int) -> str:
    """Address of node k (1-based)."""
    return f"{SUBNET}.{k}"


def _ip(*args: str, netns: str | None = None) -> None:
    cmd = ([tool("nsenter"), f"--net={netns}"] if netns else []) + [tool(args[0]), *args[1:]]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()}")


def _tbf(dev: str, rate: str | None, netns: str | None = None) -> None:
    if rate:
        _ip("tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", TBF_BURST,
            "latency", TBF_LATENCY, netns=netns)


CONGESTION = "/proc/sys/net/ipv4/tcp_congestion_control"  # this process's network namespace's


def _congestion(name: str | None) -> str:
    """Set TCP's congestion control in the namespace this process is in (``name``, if given); what it is."""
    if name:
        try:
            with open(CONGESTION, "w") as f:
                f.write(name)
        except OSError as err:
            with open("/proc/sys/net/ipv4/tcp_allowed_congestion_control") as f:
                allowed = f.read().split()
            raise RuntimeError(f"TCP congestion control {name!r} cannot be set inside a node ({err.strerror}): "
                               f"a network namespace may use only {', '.join(allowed)} "
                               f"(net.ipv4.tcp_allowed_congestion_control)") from None
    with open(CONGESTION) as f:
        return f.read().strip()


def build(nodes: int, rate: str | None, congestion: str | None = None) -> tuple[list[int], str]:
    """In the caller's (switch) namespace: bridge + one node namespace per node, TCP in each set to
    ``congestion`` (else what a new namespace inherits, the machine's default); their fds and what TCP
    runs in them."""
    switch_fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    me = os.getpid()
    _ip("ip", "link", "set", "lo", "up")
    _ip("ip", "link", "add", "br0", "type", "bridge")
    _ip("ip", "link", "set", "br0", "up")
    fds = []
    for _ in range(nodes):
        _unshare_net()
        in_use = _congestion(congestion)
        fds.append(os.open("/proc/self/ns/net", os.O_RDONLY))
        _setns(switch_fd)
    for k, fd in enumerate(fds, start=1):
        node = f"/proc/{me}/fd/{fd}"
        _ip("ip", "link", "set", "lo", "up", netns=node)
        # created inside the node; the peer goes straight to the switch (this process's namespace)
        _ip("ip", "link", "add", "eth0", "type", "veth", "peer", "name", f"n{k}", "netns", str(me), netns=node)
        _ip("ip", "link", "set", "eth0", "mtu", MTU, netns=node)
        _ip("ip", "link", "set", f"n{k}", "mtu", MTU)
        _ip("ip", "addr", "add", f"{node_address(k)}/24", "dev", "eth0", netns=node)
        _ip("ip", "link", "set", "eth0", "up", netns=node)
        _tbf("eth0", rate, netns=node)
        _ip("ip", "link", "set", f"n{k}", "master", "br0")
        _ip("ip", "link", "set", f"n{k}", "up")
        _tbf(f"n{k}", rate)
    os.close(switch_fd)
    deadline = time.monotonic() + 10  # the kernel reports a new carrier up to a second late
    while not all(port_up(f"n{k}") for k in range(1, nodes + 1)):
        if time.monotonic() > deadline:
            raise RuntimeError("the links did not come up within 10 s")
        time.sleep(0.02)
    return fds, in_use


def kill_inside(inodes: set[int], exclude: int | None = None, timeout: float = 10.0) -> None:
    """SIGKILL every process inside these namespaces and remove the MPI scratch files they held (nobody
    else will: their proxies and ranks die together), read before each kill since the dead hold nothing."""
    scratch = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = pids_inside(inodes, exclude)
        if not pids:
            break
        scratch |= mpi_scratch_held(pids)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        while True:  # reap our own children (the keeper starts none, but be safe)
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        time.sleep(0.02)
    remove_files(scratch)


SIOCGIFFLAGS, IFF_UP, IFF_RUNNING = 0x8913, 0x1, 0x40


def port_up(name: str) -> bool:
    """Whether a switch port (in this process's namespace) is up with a carrier on its node's end."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH", name.encode(), 0)))[1]
        except OSError:
            return False
    return bool(flags & IFF_UP) and bool(flags & IFF_RUNNING)


class LinkWatch:
    """Notice links that go down; if one stays down ``grace`` seconds while processes run on the
    cluster, end them and say why (MPI over TCP would otherwise wait for minutes)."""

    def __init__(self, nodes: int, grace: float, report):
        self.nodes, self.grace, self.report = nodes, grace, report
        self.down_since: dict[int, float] = {}
        self.handled: set[int] = set()

    def check(self, inodes: set[int]) -> None:
        now = time.monotonic()
        for k in range(1, self.nodes + 1):
            if port_up(f"n{k}"):
                if k in self.down_since:
                    self.report(f"node {k} ({node_address(k)}): link up again")
                self.down_since.pop(k, None)
                self.handled.discard(k)
                continue
            if k not in self.down_since:
                self.down_since[k] = now
                self.report(f"node {k} ({node_address(k)}): link down")
            elif k not in self.handled and now - self.down_since[k] >= self.grace:
                self.handled.add(k)
                victims = pids_inside(inodes, exclude=os.getpid())
                if victims:
                    self.report(f"node {k} ({node_address(k)}): link down for {now - self.down_since[k]:.1f} s; "
                                f"ending the {len(victims)} processes running on the cluster")
                    kill_inside(inodes, exclude=os.getpid())


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    tmpdir = spec["tmpdir"]
    stop = {"now": False}

    def on_signal(signum, frame):
        stop["now"] = True

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    fds: list[int] = []
    switch_inode = None
    try:
        _unshare_net()
        switch_inode = net_inode("self")
        fds, congestion = build(spec["nodes"], spec.get("rate"), spec.get("congestion"))
        state = {"ok": True, "pid": os.getpid(), "fds": fds, "tcp_congestion": congestion,
                 "inodes": [os.fstat(fd).st_ino for fd in fds], "switch_inode": switch_inode}
        print(json.dumps(state), flush=True)
        detached = spec.get("detached", False)
        faults_path = os.path.join(tmpdir, "faults.log")
        report_fd = spec.get("report_fd")

        def report(message: str) -> None:
            line = f"gpulab emulated cluster: {message}\n"
            with open(faults_path, "a") as f:
                f.write(f"{time.time():.3f} {line}")
            if report_fd is not None and not detached:
                try:
                    os.write(report_fd, line.encode())
                except OSError:
                    pass

        watch = LinkWatch(spec["nodes"], spec.get("fault_grace", 5.0), report)
        node_inodes = {os.fstat(fd).st_ino for fd in fds}
        if detached:  # the creator exits soon: nothing more to say to its pipes
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
        while not stop["now"]:
            watch.check(node_inodes)
            if detached:
                time.sleep(0.25)
                continue
            try:
                ready, _, _ = select.select([sys.stdin], [], [], 0.25)
            except InterruptedError:
                continue
            if ready and not os.read(sys.stdin.fileno(), 4096):
                break  # the creator closed the pipe or died
    except Exception as e:  # noqa: BLE001 - report to the creator, then clean up
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}), flush=True)
    finally:
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        inodes = {os.fstat(fd).st_ino for fd in fds}
        if switch_inode:
            inodes.add(switch_inode)
        kill_inside(inodes, exclude=os.getpid())
        for fd in fds:
            os.close(fd)
        shutil.rmtree(tmpdir, ignore_errors=True)
        state_file = spec.get("state_file")
        if state_file:
            try:
                os.unlink(state_file)
            except FileNotFoundError:
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
