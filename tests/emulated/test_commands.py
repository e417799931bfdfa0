"""The commands on an emulated cluster: gpulab cluster up/show/down, bench/tune/train --nodes, the two-level fit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil
import pytest

from gpulab.emulated import EmulatedCluster, link_bytes_per_s
from tests.emulated.util import leftovers, require_cluster
from tests.mpi_harness import ROOT, run_mpi

pytestmark = pytest.mark.timeout(300)

TINY_TRAIN = ["--batch-size", "8", "--block-size", "16", "--n-layer", "1", "--n-head", "2", "--n-embd", "16",
              "--warmup", "2", "--sample", "0", "--no-progress", "--log-every", "5"]


@pytest.fixture(autouse=True)
def _cluster_possible():
    require_cluster()


def gpulab(*args, timeout=240, env=None):
    full = {k: v for k, v in os.environ.items() if k not in ("GPULAB_TRAIN_LAUNCHED", "GPULAB_CLUSTER")}
    full.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **(env or {}))
    return subprocess.run([sys.executable, "-m", "gpulab.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=full, cwd=ROOT)


def test_cluster_up_show_down():
    name = f"test{os.getpid()}"
    up = gpulab("cluster", "up", "--name", name, "--nodes", "2", "--link", "100mbit", "--placement", "round-robin")
    assert up.returncode == 0, up.stderr
    try:
        state = EmulatedCluster.attach(name).state
        show = gpulab("cluster", "show", name)
        assert "node 2: 10.77.0.2/24 eth0 UP; tbf" in show.stdout and "rate 100Mbit" in show.stdout, show.stdout
        again = gpulab("cluster", "up", "--name", name, "--nodes", "2")
        assert again.returncode == 1 and "already up" in again.stderr
        job = gpulab("bench", "bcast", "-n", "4", "--sizes", "1K", "--algorithms", "chain", "--iters", "2",
                     "--warmup", "1", "--rounds", "2", "--quiet", "--json", "/dev/stdout", env={"GPULAB_CLUSTER": name})
        assert job.returncode == 0, job.stderr
        assert '"placement": "round-robin"' in job.stdout and '"nodes": 2' in job.stdout
    finally:
        down = gpulab("cluster", "down", name)
    assert down.returncode == 0 and f"{name}: down" in down.stdout, down.stderr
    assert leftovers(state) == []
    gone = gpulab("cluster", "show", name)
    assert gone.returncode == 1 and f"no emulated cluster {name!r} is up" in gone.stderr


def test_bench_records_the_topology(tmp_path):
    out = tmp_path / "bench.json"
    run = gpulab("bench", "bcast", "-n", "4", "--nodes", "2", "--link", "unlimited", "--placement", "round-robin",
                 "--sizes", "1K,64K", "--algorithms", "chain,hierarchical,mpi", "--inter", "chain",
                 "--chunk-bytes", "16K", "--iters", "2", "--warmup", "1", "--rounds", "2", "--quiet", "--json",
                 str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(out.read_text())
    meta = report["metadata"]
    hierarchical = [r for r in report["records"] if r["algorithm"] == "hierarchical"]
    assert all(r["valid"] for r in report["records"])
    assert [r["options"] for r in hierarchical] == [{"inter": "chain", "inter_options": {"chunk_bytes": 16384}}] * 2
    assert meta["emulated"] and meta["nodes"] == 2 and meta["ranks_per_node"] == 2
    assert meta["placement"] == "round-robin" and meta["link"] == "unlimited" and "TCP" in meta["transport"]
    assert meta["rank_nodes"] == [0, 1, 0, 1]


def test_bench_without_nodes_records_one_machine(tmp_path):
    out = tmp_path / "bench.json"
    run = gpulab("bench", "bcast", "-n", "2", "--sizes", "1K", "--algorithms", "chain", "--iters", "2",
                 "--warmup", "1", "--rounds", "2", "--quiet", "--json", str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    meta = json.loads(out.read_text())["metadata"]
    assert not meta["emulated"] and meta["nodes"] == 1 and meta["ranks_per_node"] == 2


def test_bad_link_is_refused():
    run = gpulab("bench", "bcast", "-n", "2", "--nodes", "2", "--link", "fast")
    assert run.returncode == 2 and "link rate must look like" in run.stderr


def test_tune_fit_on_two_nodes_records_two_levels(tmp_path):
    out = tmp_path / "fit.json"
    run = gpulab("tune", "fit", "-n", "2", "--nodes", "2", "--link", "1gbit", "--sizes", "1K,64K,256K",
                 "--time-budget", "0.002", "--no-save", "--quiet", "--json", str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())["2"]
    assert result["metadata"]["nodes"] == 2 and result["metadata"]["link"] == "1gbit"
    assert result["model"]["ranks_per_node"] == 1  # two nodes of one rank: every pair is 'inter'


def test_train_on_two_nodes(tmp_path):
    run = gpulab("train", "--mesh", "1,1,1,2", "--nodes", "2", "--link", "1gbit", "--steps", "6",
                 "--out", str(tmp_path / "ck.npz"), *TINY_TRAIN)
    assert run.returncode == 0, run.stderr[-3000:]
    line = next(line for line in run.stdout.splitlines() if line.startswith("summary "))
    topology = json.loads(line[len("summary "):])["topology"]
    assert topology["emulated"] and topology["nodes"] == 2 and topology["ranks_per_node"] == 1


def test_the_cost_model_fits_two_levels_on_the_cluster():
    link = "200mbit"
    with EmulatedCluster(nodes=2, ranks_per_node=2, link=link):
        # up to 4 MiB: the link's rate, not tbf's burst or TCP's start, decides the slope
        results = run_mpi(4, "tests.emulated.cases:two_level_fit", sizes=[8, 1024, 65536, 1 << 20, 4 << 20],
                          timeout=200)
    fit = results[0]
    wire = 1 / link_bytes_per_s(link)  # seconds per byte on the link
    assert fit["ranks_per_node"] == 2
    assert 0.7 * wire < fit["inter_beta"] < 1.6 * wire, (fit["inter_beta"], wire)
    assert fit["intra_beta"] < 0.3 * wire, (fit["intra_beta"], wire)
    # every algorithm gets a prediction; none beats one transfer of 4 MiB over the fitted link, and
    # between nodes a pipeline (chain) beats a tree that sends the whole message twice (binomial)
    predicted = fit["predicted_s"]
    assert all(t >= 0.95 * (4 << 20) * fit["inter_beta"] for t in predicted.values()), predicted
    assert predicted["binomial"] > 1.5 * predicted["chain"], predicted
    # a sender's concurrent messages share its link (shared memory's single copy does not apply):
    # linear's three sends from the root cost three transfers, not one
    assert not fit["machine"]["inter"]["receiver_copies"]
    assert predicted["linear"] > 2.5 * (4 << 20) * fit["inter_beta"], predicted


def test_a_killed_keeper_leaves_nothing_and_the_name_can_be_reused():
    import signal
    import time

    name = f"stale{os.getpid()}"
    assert gpulab("cluster", "up", "--name", name, "--nodes", "2", "--link", "unlimited").returncode == 0
    try:
        state = EmulatedCluster.attach(name).state
        os.kill(state["pid"], signal.SIGKILL)  # the keeper, not its creator (which has exited)
        deadline = time.monotonic() + 10
        while any("process" in item for item in leftovers(state)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [item for item in leftovers(state) if "temporary directory" not in item] == []
        assert "not up (stale state file)" in gpulab("cluster", "show", name).stdout
        again = gpulab("cluster", "up", "--name", name, "--nodes", "2", "--link", "unlimited")
        assert again.returncode == 0, again.stderr
        new_state = EmulatedCluster.attach(name).state
        assert not os.path.exists(state["tmpdir"])  # the new 'up' cleared the killed keeper's directory
        # (namespace inode numbers are reused: the old cluster's may now belong to the new one)
    finally:
        down = gpulab("cluster", "down", name)
    assert down.returncode == 0, down.stderr
    assert leftovers(new_state) == []


def test_a_cluster_coming_up_while_another_goes_down_is_registered(monkeypatch):
    # 'down' removed the state directory once it was empty, and an 'up' that had made the directory but
    # not yet written its state file into it then failed (FileNotFoundError; seen with three test workers)
    going, coming = f"going{os.getpid()}", f"coming{os.getpid()}"
    assert gpulab("cluster", "up", "--name", going, "--nodes", "2", "--link", "unlimited").returncode == 0
    write_launcher = EmulatedCluster._write_launcher

    def going_down_meanwhile(self, tmpdir):
        down = gpulab("cluster", "down", going)
        assert down.returncode == 0, down.stderr
        return write_launcher(self, tmpdir)

    monkeypatch.setattr(EmulatedCluster, "_write_launcher", going_down_meanwhile)
    EmulatedCluster(nodes=2, link="unlimited", name=coming, export=False).start(detached=True)
    cluster = EmulatedCluster.attach(coming)
    try:
        assert cluster.alive()
    finally:
        cluster.stop()
    assert leftovers(cluster.state) == []


def test_down_waits_for_the_keeper_to_exit_not_only_to_let_go_of_the_namespaces(monkeypatch, tmp_path):
    # the keeper closes the namespaces, then removes its files and exits: the test above once found it
    # still running, in the switch's namespace, right after stop(). A stand-in keeper takes 1 s to exit.
    keeper = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                               "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1), sys.exit(0)))\n"
                               "print('ready', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert keeper.stdout.readline() == "ready\n"
    cluster = EmulatedCluster(nodes=2, export=False)
    cluster.state, cluster.state_file = {"pid": keeper.pid, "tmpdir": str(tmp_path / "gone")}, None
    monkeypatch.setattr(EmulatedCluster, "alive", lambda self: False)  # the namespaces are already let go
    try:
        cluster.stop()
        assert keeper.poll() is not None or psutil.Process(keeper.pid).status() == psutil.STATUS_ZOMBIE
    finally:
        keeper.kill()
        keeper.wait()
        keeper.stdout.close()


def test_a_start_that_fails_once_the_keeper_is_up_leaves_nothing(monkeypatch):
    # the failure above left the keeper, its namespaces and its directory behind
    state = {}

    def failing(self, tmpdir):
        state.update(self.state)
        raise OSError("no space left on device (planted)")

    monkeypatch.setattr(EmulatedCluster, "_write_launcher", failing)
    name = f"failing{os.getpid()}"
    with pytest.raises(OSError, match="planted"):
        EmulatedCluster(nodes=2, link="unlimited", name=name, export=False).start(detached=True)
    assert leftovers(state) == []
    assert "no emulated cluster" in gpulab("cluster", "show", name).stderr


def test_where_no_cluster_can_be_made_commands_say_why_and_run_on_one_machine(monkeypatch, capsys):
    import argparse

    from gpulab.emulated.topology import topology_context

    monkeypatch.setattr("gpulab.emulated.cluster.tool", lambda name: None)
    monkeypatch.delenv("PMI_RANK", raising=False)
    args = argparse.Namespace(nodes=2, link="1gbit", placement="block")
    with topology_context(args) as cluster:
        assert cluster is None
        from gpulab.launch import mpiexec_command

        assert "nsenter" not in " ".join(mpiexec_command(2, ["-c", "pass"]))
    err = capsys.readouterr().err
    assert "an emulated cluster needs ip, tc, nsenter, unshare" in err and "single machine instead" in err
