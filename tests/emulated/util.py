"""Checks shared by the emulated-cluster tests: can this machine host one, and is anything left behind?"""

from __future__ import annotations

import functools
import os
import subprocess

import pytest

from gpulab.procfs import running


@functools.cache
def _why_no_cluster() -> str | None:
    from gpulab.emulated import ClusterUnavailable, EmulatedCluster

    try:
        with EmulatedCluster(nodes=1, link=None, export=False):
            return None
    except ClusterUnavailable as e:
        return str(e)


def require_cluster() -> None:
    """Skip (or, under CI, fail) where no emulated cluster can be set up, with the reason."""
    reason = _why_no_cluster()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the emulated-cluster tests: {reason}")
    pytest.skip(reason)


def leftovers(cluster_state: dict) -> list[str]:
    """What still holds a cluster's namespaces: live processes inside them, open descriptors, mounts, files."""
    inodes = set(cluster_state["inodes"]) | {cluster_state["switch_inode"]}
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if not running(int(pid)):
            continue
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino in inodes:
                found.append(f"process {pid} inside a node or the switch")
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("net:[") and int(link[5:-1]) in inodes:
                    found.append(f"process {pid} holds a namespace open (fd {fd})")
        except OSError:
            continue
    with open("/proc/self/mountinfo") as f:
        if any(f"net:[{i}]" in line for line in f for i in inodes):
            found.append("a namespace is bind-mounted")
    if os.path.exists(cluster_state["tmpdir"]):
        found.append(f"temporary directory {cluster_state['tmpdir']}")
    return found


def reap_orphans() -> None:
    """Wait for any exited children (orphans reparented to us as subreaper)."""
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def root_netns_links() -> str:
    return subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
