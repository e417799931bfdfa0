"""Engines reached over unix sockets (ZeroMQ ipc://): a directory short enough for them, and their aliases.

Engines in other network namespaces on this machine (an emulated cluster's nodes) reach the
controller through the file system, which the namespaces share, so no address is needed:

    sockets = IpcSockets().start()     # controller_ip=sockets.prefix, --transport=ipc
    ...
    sockets.stop()                     # stops the aliasing and removes the directory
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

SOCKET_PATH_MAX = 107  # bytes of a unix socket's path (sun_path holds 108 with the final NUL)


def cluster_tmpdir() -> str:
    """A fresh directory for a cluster's files, short enough for the ipc sockets made in it.

    The controller binds unix sockets named ``DIR/ipc-PORT`` (and ``ipc:PORT``); under a long TMPDIR
    (pytest's per-test directories, a batch job's scratch) the name passes the limit and the controller
    exits with nothing but its status. Then the directory goes to /tmp.
    """
    base = tempfile.gettempdir()
    if len(os.path.join(base, "gpulab-cluster-xxxxxxxx", "ipc:65535")) > SOCKET_PATH_MAX:
        base = "/tmp"
    return tempfile.mkdtemp(prefix="gpulab-cluster-", dir=base)


def link_ipc_sockets(prefix: str) -> list[str]:
    """ipyparallel 9's controller binds ipc sockets as PREFIX-PORT while engines and clients connect
    to PREFIX:PORT: give every bound socket its second name (a symlink). Returns the names made."""
    made = []
    path = Path(prefix)
    for sock in path.parent.glob(path.name + "-*"):
        alias = sock.with_name(path.name + ":" + sock.name[len(path.name) + 1:])
        if not alias.is_symlink() and not alias.exists():
            try:
                alias.symlink_to(sock.name)
            except FileExistsError:
                continue
            made.append(str(alias))
    return made


class IpcSockets:
    """A directory of its own for a controller's ipc sockets (``prefix``), whose sockets get their second
    names every 0.1 s while started (the controller's schedulers bind theirs after it reports ready,
    and again after a restart)."""

    def __init__(self):
        self.directory = cluster_tmpdir()
        self.prefix = os.path.join(self.directory, "ipc")
        self._stop: threading.Event | None = None

    def start(self) -> IpcSockets:
        if self._stop is None:
            self._stop = threading.Event()
            threading.Thread(target=self._keep_linking, args=(self._stop,), daemon=True,
                             name="gpulab-ipc-aliases").start()
        return self

    def _keep_linking(self, stop: threading.Event) -> None:
        while not stop.wait(0.1):
            try:
                link_ipc_sockets(self.prefix)
            except OSError:
                pass

    def stop(self) -> None:
        """Stop aliasing and remove the directory (safe to call twice)."""
        if self._stop is not None:
            self._stop.set()
            self._stop = None
        shutil.rmtree(self.directory, ignore_errors=True)
