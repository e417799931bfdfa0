"""Engines whose Slurm job passes its time limit while a task runs on them, in the background.

Slurm's shortest limit is one minute and slurmctld looks for jobs past theirs
every 30 s, so the job ends 60-90 s after it starts. Waited for on its own
that was the longest test of the suite; instead the job starts with the first
test of the emulated testbed and runs alongside the others (1 CPU per node,
declared for it in tests/slurm/conftest.py, no GPU, idle engines), and the
test that reads the outcome runs last (conftest.py orders it so).
"""

from __future__ import annotations

import threading
import time
import weakref
from pathlib import Path

import pytest

from gpulab.cluster import EngineDied, start_engines
from gpulab.cluster.ipc_sockets import IpcSockets
from tests.cluster.procs import cluster_processes

SLURM = dict(launcher="slurm", controller_ip="127.0.0.1", gpus_per_node=2, ranks_per_node=2, time="00:10:00")


def sleeper():
    import time

    time.sleep(300)


_IPC_SOCKETS: dict[int, IpcSockets] = {}  # id of a testbed's emulated cluster -> its controllers' sockets


def controller_on_ipc(slurm, ipython_dir: Path) -> dict:
    """start_engines options for the emulated testbed: a controller listening on unix sockets (ipc://),
    which the engines in the nodes' network namespaces reach through the file system they share. The
    sockets' directory is the testbed's, removed when its emulated cluster goes."""
    profile = ipython_dir / "profile_gpulab"
    profile.mkdir(parents=True, exist_ok=True)
    (profile / "ipcontroller_config.py").write_text('c.IPController.transport = "ipc"\n')
    key = id(slurm.emulated)
    if key not in _IPC_SOCKETS:
        _IPC_SOCKETS[key] = IpcSockets().start()  # ipyparallel's two names for each socket (see link_ipc_sockets)
        weakref.finalize(slurm.emulated, lambda: _IPC_SOCKETS.pop(key).stop())
    return {**SLURM, "controller_ip": _IPC_SOCKETS[key].prefix}


class TimeLimitJob(threading.Thread):
    """``start()`` returns once the engines are up; ``error`` then holds the report of their job's end,
    ``finish()`` waits for it and stops them."""

    def __init__(self, slurm, ipython_dir: Path):
        super().__init__(daemon=True, name="slurm-time-limit-job")
        self.ipython_dir, self.error, self.engines, self.reported_s = ipython_dir, None, None, None
        options = controller_on_ipc(slurm, ipython_dir) if slurm.emulated else SLURM
        self.options = {**options, "ranks_per_node": 1, "time": "00:01:00", "gpus_per_node": 0}
        self.started = threading.Event()
        # the engines poll Slurm (scontrol) with os.environ as it is then, until their job ends
        self.env = pytest.MonkeyPatch()
        self.env.setenv("SLURM_CONF", str(slurm.conf))
        self.env.setenv("PATH", slurm.env()["PATH"])  # emulated: the wrappers that reach its login node
        self.env.setenv("IPP_NONINTERACTIVE", "1")
        self.finished = False

    def start(self):
        # its processes (controller, reaper) take os.environ as it is when they start: IPYTHONDIR only then
        with pytest.MonkeyPatch.context() as starting:
            starting.setenv("IPYTHONDIR", str(self.ipython_dir))
            super().start()
            assert self.started.wait(120), "the engines of the time-limit job did not start within 120 s"

    def run(self):
        try:
            try:
                self.engines = start_engines(2, **self.options)
            finally:
                self.started.set()
            t0 = time.monotonic()
            try:
                self.engines.run(sleeper, timeout=250, what="a long task")
            except EngineDied as died:
                self.error, self.reported_s = died, time.monotonic() - t0
        except BaseException as err:  # noqa: BLE001 - reported by the test
            self.error = err

    def finish(self) -> list:
        """Wait for the report (200 s at most), stop the engines, restore os.environ; the processes left."""
        if self.finished:
            return []
        self.finished = True
        try:
            self.join(200)
            if self.engines is not None:
                self.engines.stop()
        finally:
            self.env.undo()
        return cluster_processes(self.ipython_dir)
