"""Where a job runs, as the floor reads it (gpulab.jobsite): launches onto a cluster's state file, records."""

import json
import sys

import pytest

import gpulab.launch
from gpulab import jobsite

STATE = {"emulated": True, "nodes": 2, "ranks_per_node": None, "placement": "round-robin", "link": "1gbit",
         "link_bytes_per_s": 125e6, "transport": "TCP", "mode": "root", "hosts": ["10.9.0.1", "10.9.0.2"],
         "mpi_env": {"UCX_TLS": "tcp,self"}, "mpiexec": ["nsenter", "--net=/x", "--", "mpiexec", "-launcher", "ssh"],
         "pid": 1, "fds": [999999], "inodes": [1]}


@pytest.fixture
def state_file(tmp_path, monkeypatch):
    monkeypatch.delenv(jobsite.ENV_STATE, raising=False)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(STATE))
    return str(path)


def test_a_launch_goes_where_the_entered_clusters_state_file_says(state_file):
    jobsite.enter(state_file)
    try:
        argv = gpulab.launch.mpiexec_command(3, ["-c", "pass"])
    finally:
        jobsite.leave(state_file)
    assert argv[:8] == [*STATE["mpiexec"], "-n", "3"]
    assert argv[8:10] == ["-hosts", "10.9.0.1:1,10.9.0.2:1"]  # round-robin: one slot per node in turn
    assert argv[10:13] == ["-genv", "UCX_TLS", "tcp,self"] and argv[13:15] == ["-genv", jobsite.ENV_TOPOLOGY]
    assert json.loads(argv[15]) == {"emulated": True, "nodes": 2, "ranks_per_node": 2, "placement": "round-robin",
                                    "link": "1gbit", "link_bytes_per_s": 125e6, "transport": "TCP",
                                    "rank_nodes": [1, 2, 1], "mode": "root", "node_cpus": None}
    assert argv[16:] == [sys.executable, "-c", "pass"]
    assert "nsenter" not in gpulab.launch.mpiexec_command(3, ["-c", "pass"])  # left: this machine again


def test_a_cluster_named_in_the_environment_that_is_gone_is_an_error_not_a_local_run(state_file, monkeypatch):
    monkeypatch.setenv(jobsite.ENV_STATE, state_file)
    with pytest.raises(jobsite.ClusterUnavailable, match="no longer up"):
        gpulab.launch.mpiexec_command(2, ["-c", "pass"])
    monkeypatch.setenv(jobsite.ENV_STATE, "no-such-cluster")
    with pytest.raises(jobsite.ClusterUnavailable, match="no emulated cluster 'no-such-cluster' is up"):
        gpulab.launch.mpiexec_command(2, ["-c", "pass"])


def test_block_placement_fills_a_node_before_the_next():
    assert jobsite.rank_nodes(4, 8, 2, "block") == [1, 1, 2, 2, 3, 3, 4, 4]
    assert jobsite.rank_nodes(2, 3, None, "block") == [1, 1, 2]
    assert jobsite.placement_hosts(4, 3, 2, "block") == ([(1, 2), (2, 2)], 2)


def test_records_say_where_the_job_ran_launched_by_slurm_or_on_a_plain_machine(monkeypatch):
    monkeypatch.setattr(jobsite, "_RECORDED", None)
    for name in (jobsite.ENV_TOPOLOGY, "SLURM_JOB_ID", "SLURM_JOB_NUM_NODES", "SLURM_NTASKS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    plain = jobsite.topology_metadata()
    assert (plain["emulated"], plain["nodes"], plain["ranks_per_node"]) == (False, None, None)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "4")
    assert (jobsite.topology_metadata()["nodes"], jobsite.topology_metadata()["ranks_per_node"]) == (2, 4)
    launched = jobsite.topology(STATE, 4)
    monkeypatch.setenv(jobsite.ENV_TOPOLOGY, json.dumps(launched))  # as every rank on the cluster gets it
    assert jobsite.topology_metadata() == {k: launched[k] for k in jobsite.FIELDS}
