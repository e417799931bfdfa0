"""Engines reached over unix sockets: a directory whose socket paths fit, and the sockets' second names."""

import os
import socket
import tempfile
import time

from gpulab.cluster.ipc_sockets import SOCKET_PATH_MAX, IpcSockets, cluster_tmpdir, link_ipc_sockets


def test_ipc_sockets_fit_a_unix_socket_path_under_a_long_tmpdir(tmp_path, monkeypatch):
    long_tmp = tmp_path / ("d" * 60)  # pytest-xdist's per-test directories pushed the sockets past 107 bytes
    long_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_tmp))
    moved = cluster_tmpdir()
    os.rmdir(moved)
    assert len(os.path.join(moved, "ipc:65535")) <= SOCKET_PATH_MAX and not moved.startswith(str(long_tmp)), moved
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # a short TMPDIR is kept
    kept = cluster_tmpdir()
    os.rmdir(kept)
    assert kept.startswith(str(tmp_path)), kept



def test_every_bound_socket_gets_the_name_clients_connect_to():
    sockets = IpcSockets()
    try:
        bound = socket.socket(socket.AF_UNIX)
        bound.bind(f"{sockets.prefix}-5555")  # as ipyparallel 9's controller binds PREFIX-PORT
        assert link_ipc_sockets(sockets.prefix) == [f"{sockets.prefix}:5555"]
        assert link_ipc_sockets(sockets.prefix) == []  # made once
        client = socket.socket(socket.AF_UNIX)
        bound.listen()
        client.connect(f"{sockets.prefix}:5555")  # where engines and clients connect: the same socket
        client.close()
        bound.close()
        sockets.start()  # and while started, sockets bound later get theirs within 0.1 s
        later = socket.socket(socket.AF_UNIX)
        later.bind(f"{sockets.prefix}-6666")
        deadline = time.monotonic() + 5
        while not os.path.islink(f"{sockets.prefix}:6666") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert os.readlink(f"{sockets.prefix}:6666") == "ipc-6666"
        later.close()
    finally:
        sockets.stop()
    assert not os.path.exists(sockets.directory)
    sockets.stop()  # twice is fine
