"""A class on one hub: several learners (Unix users) at once on the documented hub + batchspawner + Slurm.

One hub start serves every hub test here (``classroom``): LEARNERS users made as a site should make
them (private homes), each with a JupyterLab spawned as a Slurm job on the emulated testbed and one
kernel kept open. In each kernel the engines of notebooks 02 and 05 (``notebook_engines(4, nodes=2)``:
an emulated cluster in a user namespace, inside the learner's job) and, for the isolation and cull
tests, engines as a Slurm job of their own (the hub's GPULAB_LAUNCHER=slurm).

Notebooks 02 and 05 run whole (tests/notebooks' parameters, each in a new kernel) for one learner
alone and then for SIDE_BY_SIDE learners at once; the other tests use their measuring cells reduced
(``SWEEP_02``, ``MESH_05``: fewer sizes and iterations, no widgets) on the engines the notebooks
start, which take seconds rather than minutes. The limits that need no hub (engines per core, idle
CPU, a rank stuck in a collective) run on this machine's own engines.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import stat
import subprocess
import threading
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from gpulab.cluster import EngineProblem, EngineTimeout, start_engines
from gpulab.cluster.processes import alive
from gpulab.cluster.start import local_engine_limit
from gpulab.procfs import MPI_SCRATCH
from tests.notebooks.nbrun import NOTEBOOKS, inject_parameters
from tests.notebooks.parameters import PARAMETERS
from tests.slurm.hub import (
    Hub,
    TestUser,
    UserPython,
    ensure_hub_packages,
    login_network,
)

LEARNERS = 3
CLEANUP_S = 20  # "within seconds": the reaper looks every 2 s, the engines' job watch every 2 s; loaded CI
LOAD_S = 20  # each learner's broadcast sweep in the load test runs this long
# whichever hub test runs first also starts the class (three spawns and their engines, minutes on a loaded
# 2-core machine), then runs for up to 2 min
HUB_TEST = pytest.mark.timeout(600)

# ---- what the learners' kernels run ----------------------------------------------------------------
# run on the engines: who and where a rank is, and a broadcast of the learner's own token
PROBES = """
def whoami():
    import os
    from mpi4py import MPI
    return {"uid": os.getuid(), "pid": os.getpid(), "net": os.readlink("/proc/self/ns/net"),
            "rank": MPI.COMM_WORLD.rank}

def bcast_token(token):
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    return world.bcast(token if world.rank == 0 else None, root=0)
"""
START = """
import json, os, time
from gpulab.cluster.bcast_runner import EngineRunner
from gpulab.cluster.mesh_runner import MeshRunner
from gpulab.widgets import notebook_engines
t0 = time.monotonic()
engines, cluster = notebook_engines(4, nodes=2, link="1gbit", placement="block")   # as notebooks 02 and 05
runner = EngineRunner(engines, iters=5, warmup=1, time_budget=0.2)
mesh = MeshRunner(engines, iters=2, warmup=1)
""" + PROBES + """
print(json.dumps({"banner": cluster.describe(), "mode": getattr(engines.emulated, "mode", None),
                  "start_s": time.monotonic() - t0}))
"""
# notebook 02's measuring, reduced: three algorithms, three sizes (the notebook: 11 sizes, 3 rounds)
SWEEP_02 = """
t0 = time.monotonic()
rows = [runner.measure(a, n) for a in ("binomial", "chain", "mpi") for n in (1 << 10, 1 << 16, 1 << 20)]
print(json.dumps({"s": time.monotonic() - t0, "valid": [r["valid"] for r in rows],
                  "token": engines.run(bcast_token, os.environ["USER"]), "engines": engines.run(whoami)}))
"""
# notebook 05's measuring, reduced: one grid, overlap off (the notebook: a fit, then every grid shape)
MESH_05 = """
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.perf.timing import bench_config
t0 = time.monotonic()
row = mesh.measure(4, bench_config(), (2, 1, 2, 1), 4, Overlap())
print(json.dumps({"s": time.monotonic() - t0, "iter_s": row["iter_s"], "world": row["world"]}))
"""
# the load test: sweeps of broadcasts for a fixed time, every row checked on every rank (EngineRunner)
LOAD = """
t0, sweeps, rows = time.monotonic(), 0, 0
while time.monotonic() - t0 < {seconds}:
    for a in ("binomial", "chain", "mpi"):
        for n in (1 << 10, 1 << 16, 1 << 20):
            assert runner.measure(a, n)["valid"]
            rows += 1
    sweeps += 1
print(json.dumps({{"sweeps": sweeps, "rows": rows, "s": time.monotonic() - t0,
                   "token": engines.run(bcast_token, os.environ["USER"])}}))
"""
SLURM_ENGINES = """
from gpulab.cluster import start_engines
# the hub's GPULAB_LAUNCHER=slurm: a Slurm job of their own; no GPUs (the test nodes' 2 each would let only two
# learners' jobs run at once, and these tests need none)
slurm_engines = start_engines(2, gpus_per_node=0, ranks_per_node=2)
print(json.dumps({"job": slurm_engines.job_id, "pids": [p["pid"] for p in slurm_engines.placement],
                  "nodes": [p["host"] for p in slurm_engines.placement]}))
"""
WHAT_IS_MINE = """
import glob
from gpulab.bcast.selection.tuning import VERSION, save
tuning = str(save({"version": VERSION, "models": {}}))
security = os.path.expanduser("~/.ipython/profile_gpulab/security")
with open(f"{security}/ipcontroller-{slurm_engines.cluster.cluster_id}-client.json") as f:
    slurm_client = json.load(f)
print(json.dumps({"security": sorted(glob.glob(f"{security}/*")), "tuning": tuning,
                  "keeper": engines.emulated.state["pid"], "fds": engines.emulated.state["fds"],
                  "ipc": engines.ipc_sockets.directory, "slurm_client": slurm_client}))
"""


def _json(outputs) -> dict:
    text = "".join(o.get("text", "") for o in outputs if o["type"] == "stream")
    return json.loads(text.strip().splitlines()[-1])


class Learner:
    """A user with a running JupyterLab (a Slurm job) and one open kernel on it."""

    def __init__(self, user: TestUser, hub: Hub, stack: contextlib.ExitStack):
        self.user, self.hub, self.stack = user, hub, stack
        self.uid = pwd.getpwnam(user.name).pw_uid

    def spawn(self) -> Learner:
        self.hub.spawn(timeout=240, user=self.user)
        self.kernel = self.hub.kernel(self.user).__enter__()
        return self

    def run(self, code: str, timeout: float = 300) -> dict:
        return _json(self.kernel.execute(code, timeout=timeout))

    def jobs(self, slurm) -> list[str]:
        return slurm.run("squeue", "-h", "-u", self.user.name, "-o", "%i", check=False).stdout.split()

    def close_kernel(self) -> None:
        with contextlib.suppress(Exception):
            self.kernel.__exit__()


@pytest.fixture(scope="module")
def classroom(slurm, tmp_path_factory):
    """LEARNERS learners on one hub, each with a server, a kernel and notebook_engines' engines started."""
    problem = ensure_hub_packages()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)
    with contextlib.ExitStack() as stack:
        stack.enter_context(login_network(slurm))
        # homes 0700, as a site must keep them (docs/cluster.md "Running a class"); Debian's default is 0755
        users = [stack.enter_context(TestUser(home_mode="0700")) for _ in range(LEARNERS)]
        python = stack.enter_context(UserPython(users[0]))
        hub = stack.enter_context(Hub(tmp_path_factory.mktemp("class-hub"), users[0], python, slurm,
                                      partition=slurm.partition, more_users=tuple(users[1:])))
        learners = [Learner(user, hub, stack) for user in users]
        try:
            for learner in learners:
                learner.spawn()
                learner.started = learner.run(START, timeout=240)
            yield learners
        finally:
            for learner in learners:
                learner.close_kernel()
                if hub.server_state(learner.user):
                    with contextlib.suppress(Exception):
                        hub.stop_server(user=learner.user)
    # the users are gone (userdel -r), their processes killed; nothing of theirs may be left anywhere
    left = [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real in
            {learner.uid for learner in learners}]
    assert not left, f"the learners' processes outlived the class: {left}"


def threaded(calls: dict) -> dict:
    """Run {name: callable} at the same time; {name: result}, re-raising the first failure."""
    results, errors = {}, {}

    def one(name, call):
        try:
            results[name] = call()
        except BaseException as err:  # noqa: BLE001 - re-raised below with the learner named
            errors[name] = err

    threads = [threading.Thread(target=one, args=item) for item in calls.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        name, err = next(iter(errors.items()))
        raise AssertionError(f"learner {name}: {err}") from err
    return results


# ---- side by side -------------------------------------------------------------------------------------
@HUB_TEST
@pytest.mark.parametrize("slurm", ["emulated"], indirect=True)
def test_learners_run_notebooks_02_and_05_side_by_side(classroom, slurm_env):
    learners = classroom
    for learner in learners:  # each its own emulated cluster, in a user namespace: they are ordinary users
        assert learner.started["mode"] == "user", learner.started
        assert learner.started["banner"].startswith("4 engines on an emulated cluster: 2 nodes"), learner.started
    alone = {"02": learners[0].run(SWEEP_02), "05": learners[0].run(MESH_05)}
    together = threaded({learner.user.name: (lambda lr=learner: (lr.run(SWEEP_02), lr.run(MESH_05)))
                         for learner in learners})
    seen = {}
    for learner in learners:
        sweep, step = together[learner.user.name]
        assert all(sweep["valid"]) and len(sweep["valid"]) == 9, sweep
        assert sweep["token"] == [learner.user.name] * 4  # each world broadcast its own learner's bytes
        # root inside the learner's user namespace, the learner outside it (as the machine sees the process)
        assert {e["uid"] for e in sweep["engines"]} == {0}, sweep["engines"]
        assert {psutil.Process(e["pid"]).uids().real for e in sweep["engines"]} == {learner.uid}, sweep["engines"]
        assert [e["rank"] for e in sweep["engines"]] == [0, 1, 2, 3]
        assert step["world"] == 4 and step["iter_s"] > 0, step
        seen[learner.user.name] = {(e["pid"], e["net"]) for e in sweep["engines"]}
    mine = [{net for _, net in pairs} for pairs in seen.values()]
    assert all(len(nets) == 2 for nets in mine)  # two emulated nodes each
    assert len(set().union(*mine)) == sum(map(len, mine)), "two learners' engines share a network namespace"
    print(f"\nclass side by side ({len(learners)} learners, reduced cells): alone 02 {alone['02']['s']:.1f} s, "
          f"05 {alone['05']['s']:.1f} s; together 02 " +
          ", ".join(f"{together[n][0]['s']:.1f}" for n in together) + " s, 05 " +
          ", ".join(f"{together[n][1]['s']:.1f}" for n in together) + " s; engines started in " +
          ", ".join(f"{lr.started['start_s']:.1f}" for lr in learners) + " s")


# ---- whole notebooks side by side ----------------------------------------------------------------------
WHOLE = ("02_broadcast_explorer", "05_mesh_explorer")
SIDE_BY_SIDE = LEARNERS  # running the whole notebooks at once: 3 x (4 + 8) busy-polling ranks in notebook 02
CELL_S = 180  # tests/notebooks' bound per cell: above the notebooks' own 120 s bound on an engine call
# the kernel's folder as in a course copy (~/gpulab/notebooks; the records come with the installed gpulab),
# and the probes of START, for the check before the notebook's last cell
OPEN = """
import json, os, time
os.chdir(os.path.expanduser("~/gpulab/notebooks"))
""" + PROBES
# every cluster the notebook started (its panels, once each: IPython's output history holds them again), as
# the notebook's banner shows it, and what runs on it
WHOSE = """
from gpulab.widgets.cluster_panel import ClusterPanel
panels = {id(value): value for value in globals().values() if isinstance(value, ClusterPanel)}.values()
print(json.dumps([{"banner": panel.banner.value, "mode": getattr(panel.emulated, "mode", None),
                   "token": panel.engines.run(bcast_token, os.environ["USER"]),
                   "engines": panel.engines.run(whoami)} for panel in panels]))
"""


def course_copy(learner) -> None:
    """~/gpulab/notebooks, the learner's, as a course would hand it out."""
    course = learner.user.home / "gpulab"
    (course / "notebooks").mkdir(parents=True, exist_ok=True)
    subprocess.run(["chown", "-R", f"{learner.user.name}:", str(course)], check=True, timeout=30)


def whole_notebook(learner, name: str) -> dict:
    """Every code cell of notebook ``name`` (tests/notebooks' parameters) in a new kernel of the learner's
    JupyterLab, WHOSE before the last (which stops the engines); wall seconds (in all, per cell), clusters, outputs."""
    nb = inject_parameters(nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4), PARAMETERS[name])
    cells = [c.source for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    assert "engines.stop()" in cells[-1], f"{name}'s last cell no longer stops its engines: {cells[-1]}"
    with learner.hub.kernel(learner.user) as kernel:
        kernel.execute(OPEN)
        cell_s, outputs, clusters = [], [], None
        for i, source in enumerate(cells):
            if i == len(cells) - 1:
                clusters = _json(kernel.execute(WHOSE, timeout=CELL_S))  # not timed: the test's, not the notebook's
                for cluster in clusters:  # as the machine sees them: the learner's processes
                    cluster["owners"] = sorted({psutil.Process(e["pid"]).uids().real for e in cluster["engines"]})
            t0 = time.monotonic()
            outputs += kernel.execute(source, timeout=CELL_S)
            cell_s.append(time.monotonic() - t0)
    return {"s": sum(cell_s), "cell_s": cell_s, "clusters": clusters, "outputs": outputs}


def side_by_side(learners, name: str) -> dict:
    """{learner's name: whole_notebook(...)} run by all of ``learners`` at once, with the 1-minute load
    average at the start and at the end."""
    load = [os.getloadavg()[0]]
    done = threaded({lr.user.name: (lambda lr=lr: whole_notebook(lr, name)) for lr in learners})
    load.append(os.getloadavg()[0])
    return {"runs": done, "load": load}


def check_whole_run(learner, run: dict, clusters: int) -> set:
    """The notebook ran on ``clusters`` emulated clusters of the learner's own (in user namespaces, the banner
    says so), each world broadcast the learner's own bytes, and its engines are gone after its last cell;
    the network namespaces it used."""
    assert len(run["clusters"]) == clusters, run["clusters"]
    nets = set()
    for cluster in run["clusters"]:
        n = len(cluster["engines"])
        assert cluster["mode"] == "user", cluster
        assert f"{n} engines on an emulated cluster:" in cluster["banner"], cluster["banner"]
        assert cluster["token"] == [learner.user.name] * n, cluster
        assert [e["rank"] for e in cluster["engines"]] == list(range(n)), cluster["engines"]
        assert {e["uid"] for e in cluster["engines"]} == {0}, cluster["engines"]  # root in its own namespace
        assert cluster["owners"] == [learner.uid], cluster
        nets |= {e["net"] for e in cluster["engines"]}
    deadline = time.monotonic() + CLEANUP_S
    pids = [e["pid"] for cluster in run["clusters"] for e in cluster["engines"]]
    while any(running(pid) for pid in pids):
        assert time.monotonic() < deadline, f"{learner.user.name}'s engines outlived the notebook's last cell"
        time.sleep(0.5)
    return nets


def running(pid: int) -> bool:
    with contextlib.suppress(psutil.Error):
        return alive(psutil.Process(pid))
    return False


def streamed(run: dict) -> str:
    return "".join(o.get("text", "") for o in run["outputs"] if o["type"] == "stream")


@pytest.mark.timeout(1800)  # measured: see the print and docs/cluster.md; the class's start adds 3 min when first
@pytest.mark.parametrize("slurm", ["emulated"], indirect=True)
def test_learners_run_whole_notebooks_02_and_05_side_by_side(classroom, slurm_env):
    learners = classroom[:SIDE_BY_SIDE]
    for learner in learners:
        course_copy(learner)
    alone = {name: side_by_side(learners[:1], name) for name in WHOLE}
    together = {name: side_by_side(learners, name) for name in WHOLE}
    clusters = {"02_broadcast_explorer": 2, "05_mesh_explorer": 1}  # 02: 4 nodes x 1, then 4 x 2 round-robin
    for name in WHOLE:
        runs = {**{f"alone {n}": r for n, r in alone[name]["runs"].items()}, **together[name]["runs"]}
        nets = {}
        for key, run in runs.items():
            learner = next(lr for lr in learners if key.endswith(lr.user.name))
            nets[key] = check_whole_run(learner, run, clusters[name])
            text = streamed(run)
            if name == "02_broadcast_explorer":
                assert "on 4 ranks the chain" in text and "hierarchical" in text, text[-2000:]
            else:
                assert "rank correlation" in text and "overlap off: Spearman" in text, text[-2000:]
        mine = [nets[lr.user.name] for lr in learners]  # side by side: no network namespace shared
        shared = len(set().union(*mine)) < sum(map(len, mine))
        assert not shared, f"{name}: two learners' engines shared a network namespace: {mine}"
    print(f"\nwhole notebooks, {SIDE_BY_SIDE} learners side by side (wall s per notebook; 1-min load at start, end):")
    for name in WHOLE:
        a, t = alone[name], together[name]
        one, both = next(iter(a["runs"].values())), list(t["runs"].values())
        mean = sum(r["s"] for r in both) / len(both)
        print(f"  {name}: alone {one['s']:.0f} s (load {a['load'][0]:.1f}, {a['load'][1]:.1f}); together "
              + ", ".join(f"{r['s']:.0f}" for r in both)
              + f" s (load {t['load'][0]:.1f}, {t['load'][1]:.1f}): {mean / one['s']:.2f}x")
        for i in sorted(range(len(one["cell_s"])), key=lambda i: -one["cell_s"][i])[:3]:  # where the time goes
            print(f"    code cell {i}: alone {one['cell_s'][i]:.0f} s, together "
                  + ", ".join(f"{r['cell_s'][i]:.0f}" for r in both) + " s")


# ---- load held ---------------------------------------------------------------------------------------------
@HUB_TEST
@pytest.mark.parametrize("slurm", ["emulated"], indirect=True)
def test_every_learners_broadcast_sweep_completes_under_load(classroom, slurm_env):
    code = LOAD.format(seconds=LOAD_S)
    alone = classroom[0].run(code, timeout=LOAD_S + 240)
    together = threaded({lr.user.name: (lambda lr=lr: lr.run(code, timeout=LOAD_S + 240)) for lr in classroom})
    for learner in classroom:
        result = together[learner.user.name]
        assert result["sweeps"] >= 1 and result["rows"] == 9 * result["sweeps"], result  # no wrong row (asserted)
        assert result["token"] == [learner.user.name] * 4, result
    rate_alone = alone["sweeps"] / alone["s"]
    rates = [together[lr.user.name]["sweeps"] / together[lr.user.name]["s"] for lr in classroom]
    print(f"\nclass load: {len(classroom)} learners x 4 engines, {LOAD_S} s of broadcast sweeps each: "
          f"alone {rate_alone:.2f} sweeps/s, together " + ", ".join(f"{r:.2f}" for r in rates) +
          f" sweeps/s (slowdown {rate_alone / (sum(rates) / len(rates)):.1f}x per learner)")


# ---- nobody in where they do not belong -----------------------------------------------------------------
PROBE = r"""
import json, os, socket, subprocess, sys
plan = json.loads(sys.argv[1])

def say(what, result):  # one line per check, as it happens: a probe that hangs shows where
    print(json.dumps({what: result}), flush=True)

for path in plan["files"]:
    try:
        open(path).read(1)
        say(path, "read")
    except PermissionError:
        say(path, "denied")
for netns in plan["netns"]:
    done = subprocess.run(["nsenter", f"--net={netns}", "--", "true"], capture_output=True, text=True, timeout=30)
    say(netns, "entered" if done.returncode == 0 else "refused: " + done.stderr.strip()[-120:])
if plan["ipc"]:
    try:
        socket.socket(socket.AF_UNIX).connect(plan["ipc"])
        say("ipc", "connected")
    except OSError as err:
        say("ipc", f"refused: {err}")
import ipyparallel as ipp
for name, key in plan["keys"].items():
    info = dict(plan["client"], key=key)  # the other's address and ports; a key of its own or none
    try:
        client = ipp.Client(info, timeout=plan["wait"])
        say(name, f"connected: engines {client.ids}")
        client.close()
    except Exception as err:
        say(name, f"refused: {type(err).__name__}: {err}"[:200])
"""


def probe(learner, plan: dict) -> dict:
    """What ``learner`` gets trying each thing in ``plan`` (PROBE, run as that user)."""
    try:
        done = learner.user.run(str(Path(learner.hub.python.bin) / "python"), "-c", PROBE, json.dumps(plan),
                                timeout=120)
    except subprocess.TimeoutExpired as err:
        raise AssertionError(f"the probe hung; it got as far as: {err.stdout}") from None
    assert done.returncode == 0, done.stderr[-3000:]
    return {k: v for line in done.stdout.splitlines() for k, v in json.loads(line).items()}


@HUB_TEST
@pytest.mark.parametrize("slurm", ["emulated"], indirect=True)
def test_a_learner_cannot_reach_anothers_engines_files_or_networks(classroom, slurm_env):
    slurm = slurm_env
    owner, other = classroom[0], classroom[1]
    started = owner.run(SLURM_ENGINES, timeout=240)
    try:
        mine = owner.run(WHAT_IS_MINE)
        client = mine["slurm_client"]
        assert client.get("key") and client["interface"].startswith("tcp://10.77.0."), client  # beyond loopback
        files = [*mine["security"], mine["tuning"]]
        assert any(f.endswith("-client.json") for f in files) and any(f.endswith("-engine.json") for f in files)
        # private by IPython's modes too, not only by the home directory's: the directory 0700, the files
        # with the key 0600 (ipyparallel's cluster file, 0644, holds no key)
        security = os.path.dirname(mine["security"][0])
        assert stat.S_IMODE(os.stat(security).st_mode) == 0o700
        for path in mine["security"]:
            private = stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0
            assert private or client["key"] not in Path(path).read_text(), (path, oct(os.stat(path).st_mode))
            assert private == os.path.basename(path).startswith("ipcontroller-"), path
        netns = [f"/proc/{mine['keeper']}/fd/{fd}" for fd in mine["fds"]] + [f"/proc/{mine['keeper']}/ns/net"]
        ipc = next(str(p) for p in Path(mine["ipc"]).iterdir() if p.is_socket())
        plan = {"files": files, "netns": netns, "ipc": ipc, "client": client, "wait": 8,
                "keys": {"unsigned": "", "wrong key": os.urandom(16).hex()}}
        seen = probe(other, plan)
        assert {seen[path] for path in files} == {"denied"}, seen
        assert all(seen[ns].startswith("refused") for ns in netns), seen
        assert seen["ipc"].startswith("refused") and "Permission denied" in seen["ipc"], seen
        assert seen["unsigned"].startswith("refused: TimeoutError"), seen
        assert seen["wrong key"].startswith("refused: TimeoutError"), seen
        # the same request with the key, from the same network, is answered: the refusals were the key's doing
        seen = probe(other, dict(plan, files=[], netns=[], ipc="", keys={"the key": client["key"]}))
        assert seen["the key"] == "connected: engines [0, 1]", seen
        assert owner.run("print(json.dumps(slurm_engines.ids))") == [0, 1]  # nothing got in
    finally:
        owner.run("slurm_engines.stop(); print(json.dumps(1))")
    deadline = time.monotonic() + CLEANUP_S
    while started["job"] in slurm.jobs() and time.monotonic() < deadline:
        time.sleep(0.5)


# ---- culled and killed -----------------------------------------------------------------------------------
def scratch_of(uid: int) -> list[str]:
    """MPI scratch files owned by uid: in this machine's /tmp and /dev/shm and in every Slurm node's
    private /dev/shm (reached through a slurmd's root)."""
    roots = {"/"} | {f"/proc/{p.pid}/root" for p in psutil.process_iter(["name"]) if p.info["name"] == "slurmd"}
    found = []
    for root in roots:
        for prefix in MPI_SCRATCH:
            folder, stem = os.path.split(prefix)
            try:
                names = os.listdir(root + folder)
            except OSError:
                continue
            for name in names:
                path = os.path.join(root + folder, name)
                with contextlib.suppress(OSError):
                    if name.startswith(stem) and os.stat(path).st_uid == uid:
                        found.append(path)
    return found


def gone_within(learner, slurm, seconds: float) -> float:
    """Seconds until the learner has no process, Slurm job or MPI scratch file left; fails past ``seconds``."""
    t0 = time.monotonic()
    while True:
        processes = []
        for proc in learner.user.processes():
            with contextlib.suppress(psutil.Error):  # gone meanwhile
                if alive(proc):  # a zombie is gone, only not yet waited for
                    processes.append(" ".join(proc.cmdline()[:3]))
        left = {"processes": processes, "jobs": learner.jobs(slurm), "scratch": scratch_of(learner.uid)}
        if not any(left.values()):
            return time.monotonic() - t0
        assert time.monotonic() - t0 < seconds, f"{learner.user.name} left after {seconds} s: {left}"
        time.sleep(0.5)


@HUB_TEST
@pytest.mark.parametrize("slurm", ["emulated"], indirect=True)
def test_a_culled_or_killed_server_leaves_nothing_and_spares_the_others(classroom, slurm_env):
    slurm = slurm_env
    culled, killed, bystander = classroom[0], classroom[1], classroom[2]
    took = {}
    try:
        for learner in (culled, killed, bystander):
            learner.slurm_job = learner.run(SLURM_ENGINES, timeout=240)["job"]
            assert learner.run(SWEEP_02)["token"] == [learner.user.name] * 4  # engines that hold MPI state
            assert learner.jobs(slurm), learner.user.name
        assert scratch_of(culled.uid) or scratch_of(killed.uid), "no MPI scratch file to see removed"
        # an idle culler and a teacher's "stop" both stop a server through the hub's API (DELETE .../server)
        culled.close_kernel()
        culled.hub.stop_server(user=culled.user)
        took["culled"] = gone_within(culled, slurm, CLEANUP_S)
        # the server's process killed: the job ends with it, and Slurm kills what is left of the job
        server = next(p for p in killed.user.processes() if "jupyterhub-singleuser" in " ".join(p.cmdline()))
        killed.close_kernel()
        server.kill()
        took["killed"] = gone_within(killed, slurm, CLEANUP_S)
        # the other learner's kernel, emulated cluster and Slurm engines carried on
        assert bystander.run(SWEEP_02)["token"] == [bystander.user.name] * 4
        assert bystander.run("print(json.dumps(slurm_engines.ids))") == [0, 1]
        assert bystander.slurm_job in bystander.jobs(slurm)
        bystander.run("slurm_engines.stop(); print(json.dumps(1))")
        deadline = time.monotonic() + CLEANUP_S
        while bystander.slurm_job in slurm.jobs() and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:  # a failure above must not leave the others' engines' jobs running for the next tests
        for learner in (killed, bystander):
            with contextlib.suppress(Exception):
                learner.run("slurm_engines.stop(); print(json.dumps(1))", timeout=60)
    print(f"\nclass cleanup: everything of the learner gone {took['culled']:.1f} s after the hub stopped the "
          f"server, {took['killed']:.1f} s after its process was killed")


# ---- within limits ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("slurm", ["emulated"], indirect=True)
def test_more_engines_than_the_slurm_partition_holds_are_refused_with_slurms_reason(slurm_env, ipython_dir):
    slurm = slurm_env
    before = set(slurm.jobs())  # the class's servers, when its tests ran first
    t0 = time.monotonic()
    with pytest.raises(EngineProblem) as refused:  # 2 per node: 6 nodes, the partition has 2
        start_engines(12, launcher="slurm", partition=slurm.partition, gpus_per_node=2, time="00:05:00",
                      start_timeout=30)
    message = str(refused.value)
    assert "Slurm cannot run 12 engines as asked (6 node(s) x 2 ranks" in message, message
    assert "Requested node configuration is not available" in message, message
    assert time.monotonic() - t0 < 20  # at once, not after start_timeout
    assert set(slurm.jobs()) <= before  # nothing was submitted


def rank0_waits_alone():
    from mpi4py import MPI

    if MPI.COMM_WORLD.rank == 0:
        MPI.COMM_WORLD.barrier()  # the others never come


def cpu_seconds(procs) -> float:
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()  # /proc/PID/stat: user + system
            total += t.user + t.system
    return total


def test_more_local_engines_than_the_cores_serve_are_refused_at_once(ipython_dir):
    limit = local_engine_limit()[0]
    t0 = time.monotonic()
    with pytest.raises(EngineProblem, match=rf"start_engines\({limit + 1}\): at most {limit} engines run here"):
        start_engines(limit + 1)
    assert time.monotonic() - t0 < 5
    assert not psutil.Process().children(recursive=True), "a refused start started something"
    # in a JupyterLab that is a Slurm job, the job's CPUs count; a site may set its own limit
    assert local_engine_limit({"SLURM_CPUS_ON_NODE": "1"})[0] == 4
    assert local_engine_limit({"GPULAB_MAX_ENGINES": "32"}) == (32, "GPULAB_MAX_ENGINES")


# Four idle engines and their controller measured about 0.01 CPU-s per second (the controller's 500 ms
# heartbeat and the engines' answers). The bound is five times that: on a loaded 2-core CI machine each
# wake-up costs more (cache misses, scheduling), but a busy-polling engine would take 0.5-1 per second.
IDLE_WINDOW_S, IDLE_BOUND = 5.0, 0.05


def test_idle_engines_and_their_controller_use_next_to_no_cpu(ipython_dir):
    from tests.cluster.procs import cluster_processes

    with start_engines(4) as engines:
        engines.run(os.getpid)
        time.sleep(2)  # start-up's imports and the first task's replies are over
        procs = [p for p in cluster_processes(ipython_dir) if "gpulab.cluster.processes" not in " ".join(p.cmdline())]
        assert len(procs) >= 6, procs  # controller, mpiexec, hydra's proxy, 4 engines
        before = cpu_seconds(procs)
        time.sleep(IDLE_WINDOW_S)
        used = cpu_seconds(procs) - before
    print(f"\nidle: 4 engines + controller + mpiexec used {used:.3f} CPU-s in {IDLE_WINDOW_S:g} s "
          f"({100 * used / IDLE_WINDOW_S:.1f}% of a core)")
    assert used < IDLE_BOUND * IDLE_WINDOW_S, f"{used:.3f} CPU-s in {IDLE_WINDOW_S:g} s"


def test_a_rank_stuck_in_a_collective_is_stopped_at_the_runs_timeout(ipython_dir):
    with start_engines(2) as engines:
        stuck = psutil.Process(engines.placement[0]["pid"])
        samples, t0 = [], time.monotonic()

        def sample():  # the stuck rank's CPU while it waits, until it is gone
            while psutil.pid_exists(stuck.pid) and time.monotonic() - t0 < 60:
                samples.append((time.monotonic() - t0, cpu_seconds([stuck])))
                time.sleep(0.25)

        sampler = threading.Thread(target=sample)
        sampler.start()
        with pytest.raises(EngineTimeout, match="The engines on this machine were killed"):
            engines.run(rank0_waits_alone, timeout=5, what="a lonely barrier")
        raised = time.monotonic() - t0
        sampler.join()
        gone = time.monotonic() - t0
        assert gone - raised < 3, f"the stuck rank lived {gone - raised:.1f} s past the timeout"
        busy = [(t, c) for t, c in samples if c > 0]
        burn = (busy[-1][1] - busy[0][1]) / (busy[-1][0] - busy[0][0]) if len(busy) > 1 else 0
        engines.restart()
        assert engines.run(os.getpid, timeout=30)
    print(f"\nstuck in a collective: the waiting rank used {burn:.2f} CPU-s per s (a busy-polling core, shared "
          f"with the machine's load); EngineTimeout {raised:.1f} s and the rank gone {gone:.1f} s after the run "
          f"started (timeout 5 s)")
