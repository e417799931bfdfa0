"""JupyterHub + batchspawner end to end: the hub configured as docs/cluster.md says, a user's JupyterLab
spawned as a Slurm job, notebook 00 executed on that server through the hub's proxy (its kernel
submitting the engines as a second Slurm job, as a learner's would), then everything stopped. It runs on
the emulated testbed: the hub and its proxy in the login node, the server and the engines on the nodes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import nbformat
import psutil
import pytest

from gpulab.emulated.netns import node_address
from tests.notebooks.nbrun import NOTEBOOKS, inject_parameters
from tests.slurm.hub import (
    ROOT,
    Hub,
    TestUser,
    UserPython,
    documented_config,
    ensure_hub_packages,
    login_network,
    site_config,
)

PARAMETERS = {"N_ENGINES": 4, "NBYTES": 1 << 16, "ITERS": 5}  # 4 engines: two on each node
CHECK_ENGINES = """import json, os
print(json.dumps({"server_job": os.environ.get("SLURM_JOB_ID"), "engines_job": engines.job_id,
                  "controller_ip": os.environ.get("GPULAB_CONTROLLER_IP"),
                  "launcher": engines.launcher, "placement": engines.placement}))"""


@pytest.fixture(scope="module")
def hub_packages():
    problem = ensure_hub_packages()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)


def test_documented_config_marks_every_site_value():
    text = documented_config()
    assert "batchspawner.SlurmSpawner" in text and '"GPULAB_LAUNCHER": "slurm"' in text
    for line in text.splitlines():  # every site-specific value is marked, so a site knows what to change
        if any(key in line for key in ("example.org", '"gpu"', "/opt/gpulab", "module load")):
            assert "# SITE" in line, line
    with pytest.raises(AssertionError, match="not '# SITE' lines"):
        site_config(text, {"c.JupyterHub.spawner_class": "x"}, "")  # only marked lines may change


def _stream(outputs) -> str:
    return "".join(o.get("text", "") for o in outputs if o["type"] == "stream")


# the emulated testbed only: the hub on the login node, the server and the engines on the nodes, each at its
# own address, is the documented set-up; the loopback one would add minutes and cover less
@pytest.mark.parametrize("slurm", ["emulated"], indirect=True)
def test_notebook_00_on_a_jupyterlab_spawned_through_slurm(slurm_env, hub_packages, tmp_path):
    slurm, timings = slurm_env, {}
    with login_network(slurm), TestUser() as user, UserPython(user) as python, \
            Hub(tmp_path, user, python, slurm, partition=slurm.partition) as hub:
        state = hub.spawn()
        jobs = slurm.run("squeue", "-h", "-u", user.name, "-o", "%i %j %T %N").stdout.splitlines()
        assert len(jobs) == 1 and "spawner-jupyterhub RUNNING" in jobs[0], jobs
        server_job, server_node = jobs[0].split()[0], jobs[0].split()[-1]
        # the kernel's controller: where the engines on both nodes reach it
        controller_ip = node_address(int(server_node[1:])) if slurm.emulated else "127.0.0.1"
        assert http_ok(hub, "/api/status"), "the server does not answer through the proxy"

        nb = inject_parameters(nbformat.read(NOTEBOOKS / "00_start_here.ipynb", as_version=4), PARAMETERS)
        cells = [c.source for c in nb.cells if c.cell_type == "code" and c.source.strip()]
        start_cell = next(i for i, src in enumerate(cells) if "start_engines(N_ENGINES)" in src)
        outputs = []
        t0 = time.monotonic()
        with hub.kernel() as kernel:
            for i, source in enumerate(cells):
                t_cell = time.monotonic()
                outputs.append(kernel.execute(source, timeout=180))
                if i == start_cell:
                    timings["engines_connected_s"] = time.monotonic() - t_cell
                    info = json.loads(_stream(kernel.execute(CHECK_ENGINES)))
                    assert info["server_job"] == server_job  # the kernel runs inside the JupyterLab job
                    assert info["launcher"] == "slurm" and info["engines_job"] not in ("", server_job)
                    assert info["controller_ip"] == controller_ip, (info, server_node)
                    queue = slurm.run("squeue", "-h", "-u", user.name, "-o", "%i %T %N").stdout
                    assert f"{info['engines_job']} RUNNING n[1-2]" in queue, queue
                    assert [p["local_rank"] for p in info["placement"]] == [0, 1, 0, 1]
                    assert [p["gpu"] for p in info["placement"]] == ["0", "1", "0", "1"]  # Slurm's fake GPUs
                    engines_job = info["engines_job"]
        timings["notebook_s"] = time.monotonic() - t0
        text = "\n".join(_stream(o) for o in outputs)
        assert "every rank received the root's bytes: [True, True, True, True]" in text, text[-3000:]
        assert "I am rank 3 of 4" in text
        # the notebook's last cell stopped the engines: their job leaves the queue
        deadline = time.monotonic() + 20
        while engines_job in slurm.jobs() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert engines_job not in slurm.jobs()

        hub.stop_server()
        deadline = time.monotonic() + 20  # (the testbed's time-limit job may be running: tests/slurm/time_limit.py)
        while server_job in slurm.jobs() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert server_job not in slurm.jobs(), "the server's job outlived the stop"
        timings.update(hub.timings)
        left = [" ".join(p.cmdline()[:3]) for p in user.processes() if p.is_running()]
        assert not left, f"the user's processes outlived the server: {left}"
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    print(f"\nhub timings: {json.dumps({k: round(v, 1) for k, v in timings.items()})}; server state {state}")


def http_ok(hub, path) -> bool:
    from tests.slurm.hub import http

    status, _ = http("GET", f"{hub.server_url}{path}", hub.user_token)
    unauthorized, _ = http("GET", f"{hub.server_url}{path}")
    return status == 200 and unauthorized in (302, 403)


def teaching_block(name: str) -> str:
    """A ```python block of docs/teaching.md marked <!-- tested: NAME -->."""
    text = (ROOT / "docs" / "teaching.md").read_text()
    found = re.search(rf"<!-- tested: {name} -->\s*```python\n(.*?)```", text, re.S)
    assert found, f"docs/teaching.md has no ```python block after <!-- tested: {name} -->"
    return found.group(1)


def site_values(text: str, values: dict) -> str:
    """text with each documented example value replaced (each must be there, on a '# SITE' line)."""
    for example, value in values.items():
        line = next((line for line in text.splitlines() if example in line), "")
        assert "# SITE" in line, f"{example!r} is not on a '# SITE' line of:\n{text}"
        text = text.replace(example, value)
    return text


STUDENT = """import json, subprocess, sys
from pathlib import Path
import nbformat
nbgrader, home = str(Path(sys.executable).parent / "nbgrader"), Path.home()
def run(*args):
    done = subprocess.run([nbgrader, *args], cwd=home, capture_output=True, text=True, timeout=180)
    print(json.dumps({"args": args, "rc": done.returncode, "out": (done.stdout + done.stderr)[-1500:]}))
"""
FILL = """path = home / "01_broadcast" / "01_broadcast.ipynb"
nb = nbformat.read(path, as_version=4)
answers = json.loads({answers!r})
for cell in nb.cells:
    grade_id = cell.metadata.get("nbgrader", {{}}).get("grade_id")
    if cell.metadata.get("nbgrader", {{}}).get("solution"):
        cell.source = answers[grade_id]
nbformat.write(nb, path)
"""


# the emulated testbed, as the test above: the learner's server on a node, the teacher on the login machine;
# the hub test's steps plus nine nbgrader commands and a notebook graded on 4 engines (about 3 minutes)
@contextmanager
def learner_kernel(tmp_path, user, python, slurm, hub_extra: str):
    """The learner logs in: a new JupyterLab (a Slurm job) on the documented hub, a kernel with STUDENT's
    helpers; the server is stopped on the way out."""
    with login_network(slurm), Hub(tmp_path, user, python, slurm, partition=slurm.partition,
                                   extra_config="\n" + hub_extra) as hub:
        hub.spawn()
        with hub.kernel() as kernel:
            kernel.execute(STUDENT)
            yield kernel
        hub.stop_server()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("slurm", ["emulated"], indirect=True)
def test_nbgrader_release_submit_autograde_for_one_learner(slurm_env, hub_packages, tmp_path):
    """The teacher releases exercise 1 into the exchange; the learner, in a JupyterLab that the hub spawned
    as a Slurm job, fetches it, answers (linear right, binomial planted wrong) and submits; the teacher
    collects and autogrades (the checks on MPI engines), and the learner fetches the feedback."""
    from nbgrader.api import Gradebook

    from tests.exercises.course import (
        PLANTED_BINOMIAL,
        copy_course,
        gpulab_processes,
        teacher_env,
    )
    from tests.exercises.sources import cells_of

    slurm = slurm_env
    shared = Path(tempfile.mkdtemp(prefix="gpulab-nbgrader-"))  # where the job's user reaches it, not tmp_path
    try:
        shared.chmod(0o755)
        exchange, config_dir = shared / "exchange", shared / "etc-jupyter"
        exchange.mkdir()
        exchange.chmod(0o1777)
        config_dir.mkdir()
        (config_dir / "nbgrader_config.py").write_text(
            site_values(teaching_block("nbgrader_global_config"), {"/srv/nbgrader/exchange": str(exchange)}))
        hub_extra = site_values(teaching_block("nbgrader_hub_config"), {"/opt/gpulab/etc/jupyter": str(config_dir)})
        course = tmp_path / "course"
        copy_course(course)
        with (course / "nbgrader_config.py").open("a") as f:
            f.write(f"\nc.Exchange.root = {str(exchange)!r}\n")
        env_of_teacher = teacher_env(tmp_path / "ipython")

        def teacher(*args, timeout=240):
            proc = subprocess.Popen(["nbgrader", *args], cwd=course, env=env_of_teacher, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, start_new_session=True)
            try:
                out, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # nbgrader, its kernel and the kernel's engines
                out, _ = proc.communicate()
                pytest.fail(f"nbgrader {' '.join(args)} did not finish within {timeout} s:\n{out[-4000:]}")
            assert proc.returncode == 0, f"nbgrader {' '.join(args)}:\n{out[-4000:]}"

        teacher("generate_assignment", "01_broadcast")
        teacher("release_assignment", "01_broadcast")
        answers = {c.metadata.nbgrader["grade_id"]: c.source for c in cells_of("01_broadcast", "solution")}
        answers["binomial_bcast"] = PLANTED_BINOMIAL

        with TestUser() as user, UserPython(user) as python:
            with learner_kernel(tmp_path, user, python, slurm, hub_extra) as kernel:
                fetched = json.loads(_stream(kernel.execute('run("fetch_assignment", "01_broadcast")')))
                assert fetched["rc"] == 0, fetched
                kernel.execute(FILL.format(answers=json.dumps(answers)))
                submitted = json.loads(_stream(kernel.execute('run("submit", "01_broadcast")')))
                assert submitted["rc"] == 0, submitted

            teacher("collect", "01_broadcast")
            assert (course / "submitted" / user.name / "01_broadcast" / "01_broadcast.ipynb").exists()
            teacher("autograde", "01_broadcast", timeout=360)
            teacher("generate_feedback", "01_broadcast")
            teacher("release_feedback", "01_broadcast")
            with Gradebook(f"sqlite:///{course}/gradebook.db") as gradebook:
                submission = gradebook.find_submission("01_broadcast", user.name)
                assert (submission.score, submission.max_score) == (2.0, 5.0)  # linear right, binomial not

            # the learner logs in again and fetches the feedback from a new server (a new Slurm job)
            with learner_kernel(tmp_path, user, python, slurm, hub_extra) as kernel:
                fetched = json.loads(_stream(kernel.execute('run("fetch_feedback", "01_broadcast")')))
                assert fetched["rc"] == 0, fetched
            feedback = list((user.home / "01_broadcast" / "feedback").glob("*/01_broadcast.html"))
            assert len(feedback) == 1, fetched
            assert feedback[0].owner() == user.name
            # the check's message for the planted binomial (a linear broadcast under its name)
            assert "it took 3 steps; a binomial tree on 4 ranks needs" in feedback[0].read_text()
        assert not gpulab_processes(env_of_teacher), "grading left engines behind"
    finally:
        shutil.rmtree(shared, ignore_errors=True)
