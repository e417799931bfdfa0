"""Cluster configuration without starting anything: the Slurm batch script (rendered by ipyparallel
itself, no Slurm needed), the controller address and the local mpiexec command."""

import pytest
from ipyparallel.cluster.launcher import SlurmEngineSetLauncher

from gpulab.cluster import SLURM_TEMPLATE, slurm_script
from gpulab.cluster.start import cluster_config


def test_script_shows_partition_account_gpus_and_time():
    text = slurm_script(8, partition="gpu", account="proj42", gpus_per_node=4, time="01:00:00")
    for line in ["#SBATCH --partition=gpu", "#SBATCH --account=proj42", "#SBATCH --nodes=2",
                 "#SBATCH --ntasks=8", "#SBATCH --ntasks-per-node=4", "#SBATCH --gpus-per-node=4",
                 "#SBATCH --time=01:00:00", "srun --mpi=pmi2 --kill-on-bad-exit=1 --cpu-bind=none {program_and_args}"]:
        assert line in text.splitlines(), line
    assert "export MPIR_CVAR_CH4_NETMOD=ofi" in text  # the mpich wheel under Slurm's pmi2 (see gpulab.cluster.slurm)


def test_ranks_per_node_rounds_nodes_up():
    assert "#SBATCH --nodes=3" in slurm_script(5, partition="p", gpus_per_node=8, ranks_per_node=2)


def test_ipyparallel_renders_the_template_with_the_engine_command(tmp_path):
    kind, config, ip, location = cluster_config(8, "slurm", partition="gpu", account="proj42", gpus_per_node=4,
                                      ranks_per_node=None, time="00:10:00", template=SLURM_TEMPLATE)
    assert kind == "slurm" and ip == "*" and location  # compute nodes must reach the controller
    launcher = SlurmEngineSetLauncher(config=config, work_dir=str(tmp_path), profile_dir=str(tmp_path),
                                      cluster_id="gpulab-1-abc")
    launcher.write_batch_script(8)
    text = (tmp_path / "slurm_engine.sbatch").read_text()
    assert "#SBATCH --job-name=gpulab-engines-gpulab-1-abc" in text
    assert "#SBATCH --ntasks=8" in text and "#SBATCH --nodes=2" in text
    srun = [line for line in text.splitlines() if line.startswith("srun")][0]
    assert "ipyparallel.engine" in srun and srun.endswith("--mpi")  # engine id = MPI rank
    assert "{" not in text  # every field filled


def test_controller_listens_on_localhost_unless_asked():
    assert cluster_config(2)[2:] == ("127.0.0.1", "")
    assert cluster_config(2, controller_ip="10.0.0.5")[2] == "10.0.0.5"
    with pytest.raises(ValueError, match="launcher"):
        cluster_config(2, "pbs")


def test_local_launcher_uses_gpulab_mpiexec_with_flags(monkeypatch):
    monkeypatch.setenv("GPULAB_MPIEXEC", "srun --mpi=pmix")
    monkeypatch.setenv("GPULAB_MPIEXEC_ARGS", "--cpu-bind=none")
    kind, config, ip, _ = cluster_config(4)
    assert kind == "mpi" and ip == "127.0.0.1"
    assert config.MPIEngineSetLauncher.mpi_cmd == ["srun", "--mpi=pmix"]
    assert config.MPIEngineSetLauncher.mpi_args == ["--cpu-bind=none"]


def test_empty_directives_are_left_out_for_the_sites_defaults():
    text = slurm_script(4, gpus_per_node=0, ranks_per_node=2, time="", mpi="pmix")
    assert not [line for line in text.splitlines() if line.endswith("=") or "--gpus-per-node" in line], text
    assert "#SBATCH --ntasks=4" in text
    assert "srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=none {program_and_args}" in text
    assert "MPIR_CVAR_CH4_NETMOD" not in text  # only the mpich wheel under pmi2 needs it


def test_environment_points_start_engines_at_slurm(monkeypatch):
    import gpulab.cluster.start as start_module

    seen = {}
    monkeypatch.setattr(start_module, "cluster_config", lambda n, launcher, ip, **slurm: seen.update(
        launcher=launcher, ip=ip, **slurm) or (_ for _ in ()).throw(RuntimeError("stop here")))
    for name, value in {"GPULAB_LAUNCHER": "slurm", "GPULAB_CONTROLLER_IP": "10.1.2.3", "GPULAB_SLURM_PARTITION": "gpu",
                        "GPULAB_GPUS_PER_NODE": "8", "GPULAB_RANKS_PER_NODE": "2", "GPULAB_SLURM_MPI": "pmix"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(RuntimeError, match="stop here"):
        start_module.start_engines(4)
    assert (seen["launcher"], seen["ip"], seen["partition"], seen["gpus_per_node"], seen["ranks_per_node"],
            seen["mpi"], seen["account"]) == ("slurm", "10.1.2.3", "gpu", 8, 2, "pmix", "")
    with pytest.raises(RuntimeError, match="stop here"):
        start_module.start_engines(4, launcher="slurm", partition="other", mpi="pmi2")
    assert (seen["partition"], seen["mpi"]) == ("other", "pmi2")  # arguments win over the environment


def test_sbatch_from_inside_a_job_drops_the_enclosing_jobs_settings():
    from gpulab.cluster.slurm import submit_command

    assert submit_command({"PATH": "/bin", "SLURM_CONF": "/etc/slurm.conf"}) == ["sbatch"]
    inside_a_job = {"SLURM_JOB_ID": "7", "SLURM_EXPORT_ENV": "HOME", "SLURM_CONF": "x", "SBATCH_EXPORT": "NONE"}
    assert submit_command(inside_a_job) == ["env", "--unset=SBATCH_EXPORT", "--unset=SLURM_EXPORT_ENV",
                                            "--unset=SLURM_JOB_ID", "sbatch"]
