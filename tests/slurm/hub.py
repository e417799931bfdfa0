"""A JupyterHub whose spawner is batchspawner's SlurmSpawner, driven as a learner's browser would be.

The hub's configuration is the one docs/cluster.md gives sites (the ```python
block after ``<!-- tested: jupyterhub_config -->``): ``site_config`` replaces
only the values of lines marked ``# SITE`` and appends the test-only parts
(dummy login, an admin service token, SLURM_CONF, the nodes' addresses). On
the loopback testbed everything listens on 127.0.0.1. On the emulated one the
test's thread enters the login node's network (``login_network``), so the hub,
its proxy and the test's requests (the user's browser) run there: the hub
listens on the login node's address, each server on its node's (the hub finds
it from Slurm's node name, nK -> 10.77.0.K), and the engines' controller in
the user's kernel on the address of the kernel's node. The hub, its proxy and
the user's server are stopped and the test user removed by the context
managers, whatever happens.

    with login_network(slurm), TestUser("gpulabtest") as user, Hub(workdir, user, slurm) as hub:
        hub.spawn()                                 # the user's JupyterLab, as a Slurm job
        with hub.kernel() as kernel:                # a kernel on that server, through the hub's proxy
            kernel.execute("1 + 1")
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import psutil

from gpulab.cluster.processes import kill_and_wait
from gpulab.emulated.netns import CLONE_NEWNET, SUBNET
from gpulab.scoreboard.recorded import SHIPPED
from tests.testbeds.slurm import free_port

ROOT = Path(__file__).resolve().parents[2]
HUB_PACKAGES = {"jupyterhub": "jupyterhub", "batchspawner": "batchspawner",
                "configurable_http_proxy": "configurable-http-proxy", "websocket": "websocket-client"}


def documented_config() -> str:
    """The jupyterhub_config.py that docs/cluster.md gives sites."""
    text = (ROOT / "docs" / "cluster.md").read_text()
    found = re.search(r"<!-- tested: jupyterhub_config -->\s*```python\n(.*?)```", text, re.S)
    assert found, "docs/cluster.md has no ```python block after <!-- tested: jupyterhub_config -->"
    return found.group(1)


def site_config(text: str, site: dict, test_only: str) -> str:
    """text with the value of each '# SITE' line whose target (``c.X.y`` or a dict key ``"KEY"``)
    is in site replaced by repr(site[target]), then test_only appended. Other lines stay as written."""
    used = set()

    def replace(line: str) -> str:
        m = re.match(r'^(\s*)(c\.[\w.]+ = |"\w+": )(.+?)(,?)(\s+# SITE.*)$', line)
        if not m:
            return line
        target = m.group(2).rstrip(": =").strip()
        if target not in site:
            return line
        used.add(target)
        return f"{m.group(1)}{m.group(2)}{site[target]!r}{m.group(4)}{m.group(5)}"

    out = "\n".join(replace(line) for line in text.splitlines())
    unused = set(site) - used
    assert not unused, f"not '# SITE' lines in the documented config: {sorted(unused)}"
    return out + "\n\n# ---- test only (not in docs/cluster.md)\n" + test_only


def ensure_hub_packages() -> str | None:
    """Install JupyterHub, batchspawner and the proxy into this Python when missing; None or why not."""
    import importlib.util

    missing = [pkg for module, pkg in HUB_PACKAGES.items() if importlib.util.find_spec(module) is None]
    if not missing:
        return None
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], capture_output=True, text=True,
                          timeout=900)
    if done.returncode != 0:
        return f"pip install {' '.join(missing)} failed: {done.stderr[-2000:]}"
    return None


class TestUser:
    """A throwaway login (useradd -m); on exit its processes are killed and it is removed with its home."""

    __test__ = False  # not a pytest class

    def __init__(self, name: str | None = None, home_mode: str | None = None):
        self.name = name or f"gl{secrets.token_hex(3)}"
        self.home_mode = home_mode  # e.g. "0700", as a site with several learners keeps homes

    def __enter__(self) -> TestUser:
        mode = ["-K", f"HOME_MODE={self.home_mode}"] if self.home_mode else []
        try:
            subprocess.run(["useradd", "-m", *mode, "-s", "/bin/bash", self.name], check=True, capture_output=True,
                           timeout=30)
        except BaseException:
            self.__exit__()
            raise
        self.home = Path(pwd.getpwnam(self.name).pw_dir)
        return self

    def processes(self) -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["username"]) if p.info["username"] == self.name]

    def run(self, *cmd: str, timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(["runuser", "-u", self.name, "--", *cmd], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd="/")

    def __exit__(self, *exc) -> None:
        kill_and_wait(self.processes(), timeout=10)
        subprocess.run(["userdel", "-r", "-f", self.name], capture_output=True, timeout=30)


class UserPython:
    """A Python with gpulab, JupyterLab and batchspawner that the test user can run.

    This interpreter when the user can read it (a checkout outside /root); otherwise a copy of its
    environment in a world-readable temporary directory (no download: the packages are already here).
    """

    def __init__(self, user: TestUser):
        self.user, self.copy = user, None

    def __enter__(self) -> UserPython:
        try:
            return self._make()
        except BaseException:
            self.__exit__()
            raise

    def _make(self) -> UserPython:
        probe = "import gpulab, jupyterlab, ipyparallel, batchspawner, mpi4py; print(gpulab.__file__)"
        done = self.user.run(sys.executable, "-c", probe)
        if done.returncode == 0:
            self.bin = Path(sys.executable).parent
            return self
        # Here this interpreter lives under /root (pyenv, mode 0700): a venv from Debian's python3 with
        # this environment's packages hard-linked into it (copied across filesystems)
        base = Path("/usr/bin/python3")
        version = subprocess.run([str(base), "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                                 text=True, timeout=30).stdout.strip() if base.exists() else ""
        assert version == str(tuple(sys.version_info[:2])), \
            f"need {base} of Python {sys.version_info[:2]} for the test user's environment, found {version or 'none'}"
        self.copy = Path(tempfile.mkdtemp(prefix="gpulab-userpy-"))
        self.copy.chmod(0o755)
        venv = self.copy / "venv"
        subprocess.run([str(base), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        site = Path(sysconfig.get_paths()["purelib"])
        target = venv / site.relative_to(sys.prefix)
        # the whole prefix: site-packages, the MPI wheel's lib/ and bin/, Jupyter's share/ (kernels, lab)
        shutil.copytree(sys.prefix, venv, symlinks=True, dirs_exist_ok=True, copy_function=_link_or_copy,
                        ignore=lambda d, names: [n for n in names if n in ("playwright", "pyvenv.cfg") or
                                                 Path(d) == Path(sys.prefix) and n in ("bin", "lib64")])
        shutil.rmtree(target / "gpulab", ignore_errors=True)
        shutil.copytree(ROOT / "gpulab", target / "gpulab", ignore=shutil.ignore_patterns("__pycache__"))
        # what the wheel carries beside the package (pyproject's force-include of recorded.SHIPPED)
        (target / "gpulab" / "recorded_results").mkdir()
        for name in SHIPPED:
            shutil.copy2(ROOT / "docs" / "results" / name, target / "gpulab" / "recorded_results" / name)
        self.bin = venv / "bin"
        for src in Path(sys.executable).parent.iterdir():  # console scripts: point them at the new python
            if src.name.startswith(("python", "activate", "Activate", "pip")) or (self.bin / src.name).exists():
                continue
            if src.is_symlink() or not src.is_file():
                continue
            data = src.read_bytes()  # new files: the originals (maybe hard links) are never written
            first, _, rest = data.partition(b"\n")
            if first.startswith(b"#!") and b"python" in first:
                data = f"#!{self.bin / 'python'}\n".encode() + rest
            (self.bin / src.name).write_bytes(data)
            (self.bin / src.name).chmod(0o755)
        done = self.user.run(str(self.bin / "python"), "-c", probe)
        assert done.returncode == 0, f"the test user cannot use the copied environment: {done.stderr[-2000:]}"
        return self

    def __exit__(self, *exc) -> None:
        if self.copy is not None:
            shutil.rmtree(self.copy, ignore_errors=True)


def _link_or_copy(src, dst):
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


@contextlib.contextmanager
def login_network(slurm):
    """On the emulated testbed: this thread, and what it starts, in the network of the testbed's login node
    (setns affects the calling thread only); on the loopback testbed nothing changes."""
    if slurm.emulated is None:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    login = os.open(slurm.emulated.node_netns(len(slurm.nodes) + 1), os.O_RDONLY)
    try:
        if libc.setns(login, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns into the login node")
        yield
    finally:
        libc.setns(here, CLONE_NEWNET)
        os.close(here)
        os.close(login)


def http(method: str, url: str, token: str | None = None, body: dict | None = None, timeout: float = 10):
    """(status, parsed JSON or text) for one request; HTTP errors are returned, not raised."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if token:
        request.add_header("Authorization", f"token {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


class Hub:
    """The documented hub (SITE values for this machine), run as a child of the test."""

    def __init__(self, workdir: Path, user: TestUser, python: UserPython, slurm, *, partition: str,
                 extra_env: dict | None = None, more_users: tuple = (), extra_config: str = ""):
        self.workdir, self.user, self.python, self.slurm = workdir, user, python, slurm
        self.servers: dict[str, tuple[str, str]] = {}  # user name -> (server URL through the proxy, token)
        self.port, self.hub_port, self.api_port = free_port(), free_port(), free_port()
        self.token = secrets.token_hex(24)
        address = slurm.controller_address  # the login node's on the emulated testbed
        self.url = f"http://{address}:{self.port}"
        self.proc = None
        self.timings: dict[str, float] = {}
        site = {
            "c.JupyterHub.bind_url": self.url,
            "c.JupyterHub.hub_ip": address,
            "c.JupyterHub.hub_connect_ip": address,
            "c.JupyterHub.authenticator_class": "dummy",
            "c.SlurmSpawner.req_partition": partition,
            "c.SlurmSpawner.req_runtime": "00:15:00",
            "c.SlurmSpawner.req_prologue": "",
            "c.SlurmSpawner.ip": "0.0.0.0" if slurm.emulated else "127.0.0.1",
            # every loopback test node is this machine; emulated node nK is 10.77.0.K (state_exechost_re below)
            "c.SlurmSpawner.state_exechost_exp": rf"{SUBNET}.\1" if slurm.emulated else "127.0.0.1",
            "c.SlurmSpawner.batchspawner_singleuser_cmd": str(python.bin / "batchspawner-singleuser"),
            "c.SlurmSpawner.cmd": [str(python.bin / "jupyterhub-singleuser")],
            '"GPULAB_SLURM_PARTITION"': partition,
            '"GPULAB_GPUS_PER_NODE"': "2",
            '"GPULAB_SLURM_TIME"': "00:10:00",
        }
        env = {"SLURM_CONF": str(slurm.conf), "GPULAB_CONTROLLER_IP": "127.0.0.1", "IPP_NONINTERACTIVE": "1",
               **(extra_env or {})}
        if slurm.emulated:  # the engines on both nodes reach the controller at the kernel's node's address
            site["c.SlurmSpawner.req_prologue"] = "export GPULAB_CONTROLLER_IP=$(hostname -I | cut -d' ' -f1)"
            del env["GPULAB_CONTROLLER_IP"]
        test_only = (
            f"c.JupyterHub.hub_port = {self.hub_port}\n"
            f"c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{self.api_port}'\n"
            f"c.JupyterHub.db_url = 'sqlite:///{workdir}/jupyterhub.sqlite'\n"
            f"c.JupyterHub.cookie_secret_file = '{workdir}/jupyterhub_cookie_secret'\n"
            f"c.Authenticator.allowed_users = {sorted({user.name, *(u.name for u in more_users)})!r}\n"
            "c.JupyterHub.services = [{'name': 'gpulab-test', 'api_token': %r}]\n"
            "c.JupyterHub.load_roles = [{'name': 'gpulab-test', 'services': ['gpulab-test'], 'scopes': "
            "['admin:users', 'admin:servers', 'tokens', 'access:servers', 'read:users']}]\n"
            "c.SlurmSpawner.environment.update(%r)\n" % (self.token, env))
        if slurm.emulated:
            test_only += "c.SlurmSpawner.state_exechost_re = r'\\s+n(\\d+)$'\n"  # squeue's '%T %B': RUNNING n1
        # extra_config: more documented configuration (docs/teaching.md's nbgrader part), after the test's
        self.config = site_config(documented_config(), site, test_only) + extra_config

    def __enter__(self) -> Hub:
        (self.workdir / "jupyterhub_config.py").write_text(self.config)
        self.log = open(self.workdir / "jupyterhub.log", "w")  # noqa: SIM115
        env = {**os.environ, "SLURM_CONF": str(self.slurm.conf),
               "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
        t0 = time.monotonic()
        config_file = self.workdir / "jupyterhub_config.py"
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config_file)],
                                     cwd=self.workdir, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            # the proxy answers 404 until the hub has added its route: wait for the hub's own API
            self._wait(lambda: http("GET", f"{self.url}/hub/api", timeout=2)[0] == 200, 60, "the hub did not answer")
        except BaseException:
            self.__exit__()
            raise
        self.timings["hub_up_s"] = time.monotonic() - t0
        return self

    def _wait(self, ready, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{what}: the hub exited ({self.proc.returncode})\n{self.log_tail()}")
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"{what} within {timeout:g} s\n{self.log_tail()}")

    def log_tail(self, n: int = 4000) -> str:
        path = self.workdir / "jupyterhub.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def api(self, method: str, path: str, body: dict | None = None, token: str | None = None):
        return http(method, f"{self.url}/hub/api{path}", token or self.token, body, timeout=60)

    def server_state(self, user: TestUser | None = None) -> dict:
        status, info = self.api("GET", f"/users/{(user or self.user).name}")
        assert status == 200, (status, info)
        return (info.get("servers") or {}).get("", {})

    def spawn(self, timeout: float = 120, user: TestUser | None = None) -> dict:
        """Start the user's server (a Slurm job) and wait until the hub says it is ready."""
        user = user or self.user
        t0 = time.monotonic()
        status, body = self.api("POST", f"/users/{user.name}/server")
        assert status in (201, 202), f"spawn request: {status} {body}\n{self.log_tail()}"
        self._wait(lambda: self.server_state(user).get("ready"), timeout, "the user's server did not become ready")
        self.timings["spawn_s"] = time.monotonic() - t0
        status, body = self.api("POST", f"/users/{user.name}/tokens", {"note": "gpulab test", "expires_in": 3600})
        assert status in (200, 201), (status, body)
        self.servers[user.name] = (f"{self.url}/user/{user.name}", body["token"])  # through the hub's proxy
        if user is self.user:
            self.server_url, self.user_token = self.servers[user.name]
        return self.server_state(user)

    def stop_server(self, timeout: float = 60, user: TestUser | None = None) -> None:
        """Stop the user's server through the hub's API: what a teacher's "stop" and an idle culler do."""
        user = user or self.user
        t0 = time.monotonic()
        status, body = self.api("DELETE", f"/users/{user.name}/server")
        assert status in (202, 204), (status, body)
        self._wait(lambda: not self.server_state(user), timeout, "the user's server did not stop")
        self.timings["server_stop_s"] = time.monotonic() - t0

    def kernel(self, user: TestUser | None = None) -> RemoteKernel:
        return RemoteKernel(*self.servers[(user or self.user).name])

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the hub stops its servers (scancel) and its proxy
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # a proxy that outlived the hub
        except (ProcessLookupError, PermissionError, AttributeError):
            pass
        self.log.close()


class CellFailed(AssertionError):
    """A cell's execute_reply was not "ok" (or it timed out)."""


class RemoteKernel:
    """A kernel on a remote Jupyter server, over its REST API and the kernel websocket (JSON messages).

    ``execute(code)`` -> the cell's outputs; raises CellFailed unless the reply's status is "ok".
    """

    def __init__(self, server_url: str, token: str):
        self.server_url, self.token, self.session = server_url, token, uuid.uuid4().hex

    def __enter__(self) -> RemoteKernel:
        import websocket

        status, body = http("POST", f"{self.server_url}/api/kernels", self.token, {"name": "python3"}, timeout=60)
        assert status == 201, f"starting a kernel: {status} {body}"
        self.id = body["id"]
        ws_url = self.server_url.replace("http", "ws", 1) + f"/api/kernels/{self.id}/channels?session_id={self.session}"
        self.ws = websocket.create_connection(ws_url, header=[f"Authorization: token {self.token}"], timeout=60)
        return self

    def execute(self, code: str, timeout: float = 120) -> list[dict]:
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "username": "test", "session": self.session, "msg_type": "execute_request",
                       "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        outputs, reply, idle = [], None, False
        deadline = time.monotonic() + timeout
        while reply is None or not idle:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CellFailed(f"no reply within {timeout:g} s to:\n{code}\noutputs so far: {outputs}")
            self.ws.settimeout(left)
            msg = json.loads(self.ws.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["header"]["msg_type"]
            if kind == "execute_reply":
                reply = msg["content"]
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
            elif kind in ("stream", "execute_result", "display_data", "error"):
                outputs.append({"type": kind, **msg["content"]})
        if reply["status"] != "ok":
            raise CellFailed(f"reply {reply['status']}: {reply.get('ename')}: {reply.get('evalue')}\n"
                             f"cell:\n{code}\noutputs: {outputs}")
        return outputs

    def __exit__(self, *exc) -> None:
        try:
            self.ws.close()
        finally:
            http("DELETE", f"{self.server_url}/api/kernels/{self.id}", self.token, timeout=30)
