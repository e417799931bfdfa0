"""A throwaway JupyterLab server and a headless Chromium for end-to-end tests.

The server listens on 127.0.0.1 with a random token, serves a *copy* of
notebooks/ (so the browser's autosave never writes outputs into the repo;
``parameters`` go into the copies after their "parameters" cell) and keeps
its settings, workspaces, runtime files and IPython profile in a temporary
directory. Chromium is Debian's (test tools that download their own
browser cannot work offline); ``ensure_chromium`` installs it when missing.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import psutil

from tests.notebooks.nbrun import inject_parameters
from tests.testbeds.apt import apt_install

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# JupyterLab settings that would otherwise reach for the internet or pop up over the notebook
SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
    "@jupyterlab/extensionmanager-extension/plugin.jupyterlab-settings": {"enabled": False},
    # every cell in the page, not only those scrolled into view, so tests can find any cell
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def ensure_chromium() -> str | None:
    """Path to Chromium, installing Debian's package if missing; None (with the reason printed) if impossible."""
    if Path(CHROMIUM).exists():
        return CHROMIUM
    if why := apt_install(["chromium"]):
        print(f"chromium is missing and cannot be installed here: {why}")
        return None
    return CHROMIUM if Path(CHROMIUM).exists() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """``with Lab(tmp_path, notebooks_dir, {"02_x": {"ITERS": 5}}) as lab: lab.url("02_x.ipynb")``"""

    def __init__(self, workdir: Path, notebooks: Path, parameters: dict[str, dict] | None = None):
        self.workdir, self.port, self.token = workdir, _free_port(), secrets.token_hex(16)
        self.root = workdir / "notebooks"
        shutil.copytree(notebooks, self.root,
                        ignore=shutil.ignore_patterns("*.py", "__pycache__", ".ipynb_checkpoints"))
        for name, values in (parameters or {}).items():
            path = self.root / f"{name}.ipynb"
            nbformat.write(inject_parameters(nbformat.read(path, as_version=4), values), path)
        settings = workdir / "settings"
        for name, values in SETTINGS.items():
            stem = name.replace("/", os.sep, 1).replace(".jupyterlab-settings", "")
            path = settings / (stem + ".jupyterlab-settings")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        self.env = {**os.environ, "IPYTHONDIR": str(workdir / "ipython"),
                    "JUPYTER_RUNTIME_DIR": str(workdir / "runtime"), "JUPYTER_CONFIG_DIR": str(workdir / "config"),
                    "IPP_NONINTERACTIVE": "1"}
        self.log = open(workdir / "jupyterlab.log", "w")
        self.proc = None

    def __enter__(self) -> Lab:
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={self.port}", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={self.root}", f"--LabApp.user_settings_dir={self.workdir / 'settings'}",
               f"--LabApp.workspaces_dir={self.workdir / 'workspaces'}", "--ServerApp.port_retries=0",
               "--ServerApp.allow_root=True"]
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/status?token={self.token}", timeout=2)
                return self
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.5)
        self.__exit__()
        raise RuntimeError(f"JupyterLab did not start: {(self.workdir / 'jupyterlab.log').read_text()[-3000:]}")

    def url(self, notebook: str) -> str:
        return f"http://127.0.0.1:{self.port}/lab/tree/{notebook}?token={self.token}&reset"

    def shutdown_kernels(self) -> None:
        """Shut down every kernel of the server (a notebook's kernel outlives its page)."""
        api = f"http://127.0.0.1:{self.port}/api/kernels"
        for kernel in json.load(urllib.request.urlopen(f"{api}?token={self.token}", timeout=10)):
            request = urllib.request.Request(f"{api}/{kernel['id']}?token={self.token}", method="DELETE")
            urllib.request.urlopen(request, timeout=30)

    def descendants(self, names=("mpiexec", "hydra_pmi_proxy", "ipyparallel.engine", "ipyparallel.controller",
                                 "ipyparallel.cluster")) -> list[str]:
        """Processes below the server whose command line mentions MPI engines (the kernel's cluster).

        ipyparallel 9 starts ``python -m ipyparallel.engine`` / ``ipyparallel.controller``
        (no ``ipengine``/``ipcontroller`` executables any more).
        """
        found = []
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                line = " ".join(child.cmdline())
            except psutil.Error:
                continue
            if any(name in line for name in names):
                found.append(f"{child.pid}: {line[:120]}")
        return found

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            tree = psutil.Process(self.proc.pid).children(recursive=True)
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            for child in tree:  # anything the kernel left behind
                try:
                    child.kill()
                except psutil.Error:
                    pass
        self.log.close()
