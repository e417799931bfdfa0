"""Installing the Debian packages a test bed needs (Slurm and munge, Chromium, Open MPI): root and apt-get.

Tests run two at a time (``pytest -n 2``) and may install at once: apt-get waits for the other's
dpkg lock, and a step that still finds a lock held is tried again until the time is up.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time


def apt_install(packages: list[str], timeout: float = 900) -> str | None:
    """Update the package lists and install ``packages`` (no recommends); None when done, else why not."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "installing needs root and apt-get"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    wait = ["-o", f"DPkg::Lock::Timeout={int(timeout)}"]
    deadline = time.monotonic() + timeout
    for cmd in (["apt-get", *wait, "update", "-qq"],
                ["apt-get", *wait, "install", "-y", "-qq", "--no-install-recommends", *packages]):
        while True:
            left = deadline - time.monotonic()
            try:
                done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=max(left, 1))
            except subprocess.TimeoutExpired:
                return f"{' '.join(cmd)} did not finish within {timeout:.0f} s"
            if done.returncode == 0:
                break
            if "Could not get lock" in done.stderr and left > 10:
                time.sleep(5)
                continue
            return f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}"
    return None
