"""The emulated cluster: set-up and teardown, real links, nodes found by Split_type, nothing left behind.

Needs root or unprivileged user namespaces (skipped with the reason otherwise; under CI=true a
missing capability fails instead). Buffers are tiny except in the one timing test.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpulab.emulated import ClusterUnavailable, EmulatedCluster, link_bytes_per_s, parse_link, rank_nodes
from gpulab.emulated.cluster import node_cpus
from tests.emulated.util import leftovers, reap_orphans, require_cluster, root_netns_links
from tests.mpi_harness import ROOT, run_mpi

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def _cluster_possible():
    require_cluster()


def test_link_and_placement_parsing():
    assert parse_link("1gbit") == "1gbit" and parse_link("unlimited") is None and parse_link(None) is None
    assert link_bytes_per_s("1gbit") == 125e6 and link_bytes_per_s("100mbit") == 12.5e6
    with pytest.raises(ValueError, match="link rate"):
        parse_link("fast")
    assert rank_nodes(4, 8, 2, "block") == [1, 1, 2, 2, 3, 3, 4, 4]
    assert rank_nodes(4, 8, 2, "round-robin") == [1, 2, 3, 4, 1, 2, 3, 4]
    assert rank_nodes(2, 3, None, "block") == [1, 1, 2]
    with pytest.raises(ValueError, match="placement"):
        EmulatedCluster(nodes=2, placement="scatter")


def test_nodes_split_the_cores_between_them():
    assert node_cpus(2, [0, 1]) == [[0], [1]]
    assert node_cpus(1, [0, 1]) == [[0, 1]]
    assert node_cpus(2, [0, 1, 2]) == [[0, 1], [2]]
    assert node_cpus(2, [4, 5, 6, 7]) == [[4, 5], [6, 7]]
    assert node_cpus(4, [0, 1]) is None  # more nodes than cores: no split keeps them apart
    assert node_cpus(4, [0, 1], tie=True) == [[0], [1], [0], [1]]  # tied: node k on core k mod cores
    assert node_cpus(3, [4, 6], tie=True) == [[4], [6], [4]] and node_cpus(2, [0, 1], tie=True) == [[0], [1]]


def test_set_up_show_and_tear_down():
    before = root_netns_links()
    with EmulatedCluster(nodes=3, link="1gbit") as cluster:
        state = dict(cluster.state)
        shown = cluster.describe()
        assert os.environ["GPULAB_CLUSTER"] == cluster.state_file
        assert cluster.links_down() == []
        for k in (1, 2, 3):  # jumbo frames at both ends of every link (gpulab.emulated.netns.MTU)
            ends = [subprocess.run(command, capture_output=True, text=True, check=True).stdout for command in
                    (cluster.on_node(k, ["ip", "link", "show", "eth0"]),
                     cluster.on_switch(["ip", "link", "show", f"n{k}"]))]
            assert all(" mtu 9000 " in end for end in ends), ends
    for k in (1, 2, 3):
        assert f"node {k}: 10.77.0.{k}/24 eth0 UP; tbf" in shown and "rate 1Gbit" in shown
    assert "GPULAB_CLUSTER" not in os.environ
    assert leftovers(state) == []
    assert root_netns_links() == before  # nothing was ever created in this namespace


def test_link_rate_changes_on_the_running_cluster():
    def rates(cluster):
        node = subprocess.run(cluster.on_node(2, ["tc", "qdisc", "show", "dev", "eth0"]), capture_output=True,
                              text=True, check=True).stdout
        port = subprocess.run(cluster.on_switch(["tc", "qdisc", "show", "dev", "n2"]), capture_output=True,
                              text=True, check=True).stdout
        return node, port

    with EmulatedCluster(nodes=2, link="1gbit") as cluster:
        cluster.set_link("100mbit")
        assert all("tbf" in q and "rate 100Mbit" in q for q in rates(cluster)), rates(cluster)
        assert cluster.topology(2)["link_bytes_per_s"] == 12.5e6
        cluster.set_link("unlimited")
        cluster.set_link("unlimited")  # twice: nothing left to remove is not an error
        assert not any("tbf" in q for q in rates(cluster)), rates(cluster)
        cluster.set_link("10gbit")
        assert all("rate 10Gbit" in q for q in rates(cluster)), rates(cluster)
        assert "rate 10Gbit" in cluster.describe()


def test_tcp_congestion_control_is_set_in_every_node_or_refused_with_what_is_allowed(monkeypatch):
    """``congestion``: TCP's congestion control inside every node (what the links measure depends on it),
    else $GPULAB_TCP_CONGESTION, else reno; "machine" leaves what a new namespace inherits; a name a
    namespace may not use is refused with the ones it may."""
    def in_node(cluster, k):
        return subprocess.run(cluster.on_node(k, ["cat", "/proc/sys/net/ipv4/tcp_congestion_control"]),
                              capture_output=True, text=True, check=True).stdout.strip()

    monkeypatch.delenv("GPULAB_TCP_CONGESTION", raising=False)
    with EmulatedCluster(nodes=2, link="1gbit") as cluster:
        assert cluster.state["tcp_congestion"] == "reno"
        assert [in_node(cluster, k) for k in (1, 2)] == ["reno", "reno"]
        assert "TCP reno" in cluster.describe()
    with EmulatedCluster(nodes=2, link=None, congestion="machine") as cluster:
        with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:  # what a new namespace inherits
            inherited = f.read().strip()
        assert in_node(cluster, 1) == inherited == cluster.state["tcp_congestion"]
    monkeypatch.setenv("GPULAB_TCP_CONGESTION", "machine")
    with EmulatedCluster(nodes=2, link=None) as cluster:
        assert in_node(cluster, 2) == inherited
        state = dict(cluster.state)
    assert leftovers(state) == []
    with pytest.raises(ClusterUnavailable, match="'no-such' cannot be set inside a node.*may use only .*reno"):
        EmulatedCluster(nodes=2, link=None, congestion="no-such").start()


def test_exception_inside_the_block_tears_down_and_a_second_cluster_starts():
    with pytest.raises(RuntimeError, match="boom"):
        with EmulatedCluster(nodes=2, link=None) as cluster:
            state = dict(cluster.state)
            raise RuntimeError("boom")
    assert leftovers(state) == []
    with EmulatedCluster(nodes=2, link=None) as again:
        assert again.alive()
        state = dict(again.state)
    assert leftovers(state) == []


def test_missing_tools_give_a_clear_message(monkeypatch):
    monkeypatch.setattr("gpulab.emulated.cluster.tool", lambda name: None)
    with pytest.raises(ClusterUnavailable, match="needs ip, tc, nsenter, unshare"):
        EmulatedCluster(nodes=2).start()


def test_a_transfer_between_nodes_takes_size_over_rate_and_one_inside_does_not():
    nbytes, link = 4 << 20, "100mbit"
    expected = nbytes / link_bytes_per_s(link)  # 0.34 s
    with EmulatedCluster(nodes=2, ranks_per_node=2, link=link):
        results = run_mpi(4, "tests.emulated.cases:transfer_times", nbytes=nbytes, pairs=[[0, 1], [0, 2]],
                          timeout=120)
    inside, between = results[1]["0->1"], results[2]["0->2"]
    # TCP and Ethernet headers cost about 5 %; shared memory would take a few milliseconds
    assert 0.8 * expected < between < 2.5 * expected, (between, expected)
    assert inside < 0.25 * expected, (inside, expected)


@pytest.mark.parametrize("placement", ["block", "round-robin"])
def test_split_type_finds_the_emulated_nodes(placement):
    with EmulatedCluster(nodes=3, ranks_per_node=2, link=None, placement=placement) as cluster:
        results = run_mpi(6, "tests.emulated.cases:where", timeout=120)
        expected = cluster.topology(6)["rank_nodes"]
    assert [r["local_size"] for r in results] == [2] * 6
    first_seen = list(dict.fromkeys(expected))  # hierarchical numbers nodes by their lowest rank
    assert results[0]["node_of_rank"] == [first_seen.index(k) for k in expected]
    assert len({r["netns"] for r in results}) == 3
    topology = json.loads(results[0]["topology"])
    assert topology["nodes"] == 3 and topology["ranks_per_node"] == 2 and topology["placement"] == placement


@pytest.mark.parametrize("own_cores", [True, False])
def test_each_node_runs_on_its_own_cores(own_cores):
    every = sorted(os.sched_getaffinity(0))
    split = node_cpus(2) if own_cores else None  # on 2 cores: node 1 on core 0, node 2 on core 1
    with EmulatedCluster(nodes=2, ranks_per_node=2, link=None, placement="round-robin",
                         own_cores=own_cores) as cluster:
        results = run_mpi(4, "tests.emulated.cases:where", timeout=120)
        expected, shown = cluster.topology(4)["rank_nodes"], cluster.describe()
        assert cluster.state["cpus"] == split, "taskset missing: the nodes share every core"
    for rank, (r, node) in enumerate(zip(results, expected)):
        own = split[node - 1] if split else every
        assert r["cpus"] == own, f"rank {rank} on node {node} runs on cores {r['cpus']}, not {own}"
    for k in (1, 2):
        cores = split[k - 1] if split else None
        says = f"core{'s' if len(cores) > 1 else ''} {','.join(map(str, cores))};" if cores else "every core;"
        assert f"node {k}:" in shown and says in shown.split(f"node {k}:")[1].split("\n")[0], shown


def test_tied_cores_from_the_environment_place_every_node_as_node_cpus_says(monkeypatch):
    monkeypatch.setenv("GPULAB_TIE_CORES", "1")
    tied = node_cpus(4, tie=True)  # on 2 cores: nodes 1 and 3 on core 0, nodes 2 and 4 on core 1
    with EmulatedCluster(nodes=4, ranks_per_node=1, link=None) as cluster:
        results = run_mpi(4, "tests.emulated.cases:where", timeout=120)
        expected = cluster.topology(4)["rank_nodes"]
        assert cluster.state["cpus"] == tied and cluster.topology(4)["node_cpus"] == tied
    for rank, (r, node) in enumerate(zip(results, expected)):
        assert r["cpus"] == tied[node - 1], f"rank {rank} on node {node} runs on {r['cpus']}, not {tied[node - 1]}"


def test_every_algorithm_is_bit_exact_across_nodes():
    with EmulatedCluster(nodes=2, ranks_per_node=2, link=None, placement="round-robin"):
        results = run_mpi(4, "tests.emulated.cases:all_algorithms_bit_exact", timeout=150)
    from gpulab.bcast import ALGORITHMS

    assert len(results[0]) == len(ALGORITHMS) * 2 * 4


def test_hierarchical_crosses_between_nodes_once_per_node():
    with EmulatedCluster(nodes=2, ranks_per_node=2, link=None, placement="round-robin") as cluster:
        results = run_mpi(4, "tests.emulated.cases:hierarchical_crossings", timeout=120)
        node = cluster.topology(4)["rank_nodes"]  # [1, 2, 1, 2]
    crossings = [(s, d) for s, d, _ in results[0]["messages"] if node[s] != node[d]]
    assert crossings == [(0, 1)], results[0]["messages"]


CREATOR = textwrap.dedent("""
    import json, os, signal, subprocess, sys, tempfile, time
    from gpulab.emulated import EmulatedCluster
    # Ctrl-C as a user's Python gets it: a Python started by a process that ignores SIGINT keeps ignoring it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ready = sys.argv[1]
    with EmulatedCluster(nodes=2, ranks_per_node=2, link="100mbit") as cluster:
        print(json.dumps(cluster.state), flush=True)
        out = tempfile.mkdtemp(dir=os.path.dirname(ready))
        job = subprocess.Popen(cluster.mpiexec_command(4, ["-m", "tests.mpi_worker", out,
                               "tests.emulated.cases:sleep_forever", "{}"]),
                               env={**os.environ, "GPULAB_TEST_READY": ready})
        while not all(os.path.exists(f"{ready}.{r}") for r in range(4)):
            time.sleep(0.1)
        print("READY", flush=True)
        while True:
            time.sleep(1)
""")


def creator_state(pid: int) -> str:
    """What the creator was doing when something was left behind: its state and signal masks, or gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return f"the creator (pid {pid}) has exited"
    return f"the creator (pid {pid}) still runs: " + "; ".join(
        line for line in status if line.startswith(("State", "SigIgn", "SigCgt", "SigBlk")))


def what_they_do(found: list[str]) -> str:
    """For each process left behind: its command, state, parent, kernel wait channel and open
    descriptors, so that a rare failure names what the process was waiting for."""
    pids = sorted({int(line.split()[1]) for line in found if line.startswith("process ")})
    described = []
    for pid in pids:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
            status = {k: v.strip() for k, _, v in (line.partition(":") for line in
                                                  Path(f"/proc/{pid}/status").read_text().splitlines())}
            wchan = Path(f"/proc/{pid}/wchan").read_text()
            fds = {}
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    fds[fd] = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:  # closed meanwhile
                    continue
        except OSError as error:
            described.append(f"{pid}: {error}")
            continue
        described.append(f"{pid} [{command}] state {status.get('State')} ppid {status.get('PPid')} "
                         f"wchan {wchan} fds {fds}")
    return "; ".join(described)


@pytest.fixture
def subreaper():
    """Orphans (the keeper, mpiexec) come to this process, which reaps them: no zombies kept."""
    libc = ctypes.CDLL(None)
    libc.prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    yield
    reap_orphans()
    libc.prctl(36, 0)


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT", "SIGTERM"])
def test_nothing_is_left_behind_when_the_creator_dies(how, tmp_path, subreaper):
    creator = subprocess.Popen([sys.executable, "-c", CREATOR, str(tmp_path / "ready")], cwd=ROOT,
                               stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    try:
        state = json.loads(creator.stdout.readline())
        assert creator.stdout.readline().strip() == "READY"
        ranks = [int(Path(f"{tmp_path / 'ready'}.{r}").read_text()) for r in range(4)]
        creator.send_signal(getattr(signal, how))
        deadline = time.monotonic() + 20
        while leftovers(state) and time.monotonic() < deadline:
            reap_orphans()
            time.sleep(0.1)
        left = leftovers(state)
        assert left == [], f"{left}; {creator_state(creator.pid)}; {what_they_do(left)}"
        creator.wait(timeout=20)
        reap_orphans()
        for pid in ranks:
            assert not os.path.exists(f"/proc/{pid}") or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]
    finally:
        if creator.poll() is None:
            creator.kill()
            creator.wait()


NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]

USER_MODE_SCRIPT = textwrap.dedent("""
    import json, subprocess, sys
    from gpulab.emulated import EmulatedCluster
    with EmulatedCluster(nodes=2, ranks_per_node=1, link="100mbit", mode="user") as cluster:
        shown = cluster.describe()
        job = subprocess.run(cluster.mpiexec_command(2, ["-c", "from mpi4py import MPI; c = MPI.COMM_WORLD; "
            "sizes = c.gather(c.Split_type(MPI.COMM_TYPE_SHARED).size); c.rank or print(*sizes, c.size)"]),
            capture_output=True, text=True, timeout=150)
        print(json.dumps({"state": cluster.state, "shown": shown, "out": job.stdout, "err": job.stderr[-2000:]}))
""")


def _run_user_mode(prefix: list[str], python: str, env: dict, cwd) -> None:
    done = subprocess.run([*prefix, python, "-c", USER_MODE_SCRIPT], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=170)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["state"]["mode"] == "user" and "rate 100Mbit" in result["shown"], result["shown"]
    assert result["out"].split() == ["1", "1", "2"], result["out"] + result["err"]  # one rank per node
    assert leftovers(result["state"]) == []


def test_user_namespace_mode(tmp_path):
    """mode="user" for the current user: the keeper in a user namespace, tbf and MPI inside it."""
    env = {k: v for k, v in os.environ.items() if k != "GPULAB_CLUSTER"}
    _run_user_mode([], sys.executable, {**env, "PYTHONPATH": str(ROOT)}, tmp_path)


@pytest.fixture
def open_tmp():
    """A temporary directory user nobody can enter (pytest's own sit below a private directory)."""
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="gpulab-nobody-")
    os.chmod(path, 0o777)
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


def test_unprivileged_user(open_tmp):
    """As user nobody (no capabilities at all), where the kernel allows unprivileged user namespaces."""
    import shutil

    if os.geteuid() != 0:
        pytest.skip("already unprivileged: test_user_namespace_mode covers it")
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) is needed to run as user nobody")
    if subprocess.run([*NOBODY, "unshare", "-r", "-n", "true"], capture_output=True).returncode != 0:
        reason = "this kernel does not let an unprivileged user create user and network namespaces"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    import sysconfig

    # the interpreter must be reachable for nobody inside a user namespace (a venv under /root is not):
    # take the system's python of the same version with this environment's packages and MPI library
    python = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if subprocess.run([*NOBODY, "unshare", "-r", sys.executable, "-c", ""], capture_output=True).returncode == 0:
        python = sys.executable
    assert os.path.exists(python), f"no interpreter for user nobody ({python})"
    env = {k: v for k, v in os.environ.items() if k != "GPULAB_CLUSTER"}
    env.update(HOME=str(open_tmp), TMPDIR=str(open_tmp), LD_LIBRARY_PATH=os.path.join(sys.prefix, "lib"),
               PATH=os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin", "/bin"]),
               PYTHONPATH=os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]]))
    _run_user_mode(NOBODY, python, env, open_tmp)
