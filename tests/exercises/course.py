"""A teacher's copy of the course, the environment nbgrader runs in, and what grading must not leave behind."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import psutil

from tests.exercises.sources import COURSE

PLANTED_BINOMIAL = '''def binomial_bcast(buf, root, comm):
    """Broadcast buf from root along a binomial tree: ceil(log2 p) steps."""
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == root:  # a linear broadcast under the binomial's name: right bytes, p - 1 steps
        for dest in range(size):
            if dest != root:
                comm.Send(buf, dest=dest)
    else:
        comm.Recv(buf, source=root)
'''


def copy_course(target: Path) -> None:
    """exercises/ without what nbgrader made in it (its .gitignore)."""
    shutil.copytree(COURSE, target, ignore=shutil.ignore_patterns(*(COURSE / ".gitignore").read_text().split()))


def teacher_env(ipython_dir: Path) -> dict:
    """nbgrader's environment: a private IPython directory, so that the engines it starts can be told apart
    from any others on the machine."""
    return {**os.environ, "IPYTHONDIR": str(ipython_dir), "IPP_NONINTERACTIVE": "1",
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def gpulab_processes(env) -> list[str]:
    mark = env["IPYTHONDIR"]
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(mark in part for part in proc.info["cmdline"] or []) or mark in proc.environ().get("IPYTHONDIR", ""):
                found.append(" ".join(proc.info["cmdline"][:4]))
        except psutil.Error:
            pass
    return found
