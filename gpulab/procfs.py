"""Processes as /proc shows them, with the standard library only: alive, parent, network namespace, MPI scratch.

The bottom of the package: the emulated cluster's keeper (which runs before
anything else is set up), ``gpulab.launch`` and the engines' reaper read
processes through these, and nothing here imports any other gpulab module.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

# What MPICH keeps on disk while a job runs and removes at a clean exit, not after SIGKILL or MPI_Abort:
# hydra's topology file (in /tmp whatever TMPDIR says) and the ranks' shared memory.
MPI_SCRATCH = ("/tmp/hydra_hwloc_xmlfile_", "/dev/shm/mpich_shm_")


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name: state, parent, ... (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def parent(pid: int) -> int | None:
    """The parent of a process (None once it is gone)."""
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def running(pid: int) -> bool:
    """Whether the process exists and has not exited (a zombie only waits for its parent to reap it)."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def net_inode(pid: int | str) -> int | None:
    """The inode of a process's network namespace (None once it is gone, a zombie, or not ours to look at)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def pids_inside(inodes: set[int], exclude: int | None = None) -> list[int]:
    """Live processes whose network namespace is one of ``inodes``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != exclude and net_inode(entry) in inodes:
            found.append(int(entry))
    return found


def mpi_scratch_held(pids) -> set[str]:
    """The MPI scratch files (``MPI_SCRATCH``) that these processes hold open or mapped: hydra's
    topology file is held open by a node's proxy, the ranks' shared memory is mapped by them."""
    return {path for pid in pids for path in _scratch_of(pid)}


# an engine maps about 500 regions: matching the few scratch paths in the whole text is cheaper than
# splitting every line (a notebook's reaper reads its cluster's maps every 2 s)
_SCRATCH_IN_MAPS = re.compile("(?:" + "|".join(map(re.escape, MPI_SCRATCH)) + r")[^\n]*")


def _scratch_of(pid: int) -> list[str]:
    """The scratch paths a process holds, read from /proc (psutil's memory_maps parses smaps: far slower)."""
    paths, mapped = [], []
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):  # closed meanwhile
                paths.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        with open(f"/proc/{pid}/maps") as maps:
            mapped = _SCRATCH_IN_MAPS.findall(maps.read())
    except OSError:  # gone, or not ours to read
        pass
    return [path for path in paths if path.startswith(MPI_SCRATCH)] + mapped


def remove_files(paths) -> None:
    for path in paths:
        Path(path).unlink(missing_ok=True)
