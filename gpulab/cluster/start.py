"""``start_engines``: where the engines run (this machine, a Slurm job, an emulated cluster) and starting them.

See ``gpulab.cluster`` for the whole story; the handle it returns is ``gpulab.cluster.ipp_engines.Engines``.
"""

from __future__ import annotations

import os
import shlex
import socket
from pathlib import Path

import ipyparallel as ipp
from traitlets.config import Config

from gpulab.cluster.ipc_sockets import IpcSockets
from gpulab.cluster.ipp_engines import CONTROLLER_ARGS, PROFILE, EngineProblem, Engines
from gpulab.cluster.processes import stop_stale_clusters
from gpulab.cluster.slurm import SLURM_TEMPLATE, request_problem, slurm_config
from gpulab.launch import THREAD_LIMITS, find_mpiexec


def cluster_config(n: int, launcher: str = "local", controller_ip: str | None = None, emulated=None,
                   ipc_prefix: str | None = None, **slurm) -> tuple[str, Config, str, str]:
    """(engine launcher name, ipyparallel config, controller ip, controller location) for start_engines.

    ``emulated``: engines on that emulated cluster, the controller on unix sockets at ``ipc_prefix``."""
    if emulated is not None:
        # engines on the emulated nodes; the controller and the client stay in this namespace and
        # all of them talk over unix sockets (ZeroMQ ipc://), which every namespace reaches
        config = Config()
        config.MPIEngineSetLauncher.mpi_cmd = emulated.mpiexec_prefix()
        config.MPIEngineSetLauncher.mpi_args = emulated.mpiexec_args(n)
        config.MPIEngineSetLauncher.environment = dict(THREAD_LIMITS)
        config.Cluster.controller_args = ["--transport=ipc", *CONTROLLER_ARGS]
        return "mpi", config, ipc_prefix, ""
    if launcher == "local":
        config = Config()
        # the same launcher as gpulab's MPI jobs: GPULAB_MPIEXEC may carry flags ("srun --mpi=pmix")
        config.MPIEngineSetLauncher.mpi_cmd = shlex.split(find_mpiexec())
        config.MPIEngineSetLauncher.mpi_args = shlex.split(os.environ.get("GPULAB_MPIEXEC_ARGS", ""))
        config.MPIEngineSetLauncher.environment = dict(THREAD_LIMITS)  # n ranks share few cores
        config.Cluster.controller_args = list(CONTROLLER_ARGS)
        return "mpi", config, controller_ip or "127.0.0.1", ""
    if launcher == "slurm":
        # engines on compute nodes must reach the controller: by default listen on all interfaces
        # (messages are signed with the cluster's key) and tell them this host's name
        ip = controller_ip or "*"
        config = slurm_config(n, **slurm)
        config.Cluster.controller_args = list(CONTROLLER_ARGS)
        return "slurm", config, ip, socket.getfqdn() if ip in ("*", "0.0.0.0") else ip
    raise ValueError(f"launcher must be 'local' or 'slurm', got {launcher!r}")


# Engines per core that a machine still serves: idle engines cost next to nothing, but every rank in a
# collective busy-polls a core, and past a few per core a broadcast's time is the scheduler's
ENGINES_PER_CORE = 4


def local_engine_limit(environ=None) -> tuple[int, str]:
    """(most local engines, what that is from): $GPULAB_MAX_ENGINES, else ENGINES_PER_CORE x the cores this
    process may use (a Slurm job's CPUs on this node: a JupyterLab spawned by batchspawner)."""
    environ = os.environ if environ is None else environ
    if environ.get("GPULAB_MAX_ENGINES"):
        return int(environ["GPULAB_MAX_ENGINES"]), "GPULAB_MAX_ENGINES"
    cores, where = len(os.sched_getaffinity(0)), "this machine's cores"
    if environ.get("SLURM_CPUS_ON_NODE", "").isdigit():
        cores, where = min(cores, int(environ["SLURM_CPUS_ON_NODE"])), "the CPUs of this Slurm job"
    return ENGINES_PER_CORE * cores, f"{ENGINES_PER_CORE} per core, {cores} core(s): {where}"


def too_many_engines(n: int, environ=None) -> str:
    """Why n local engines are more than this machine (or job) serves, or ""."""
    limit, why = local_engine_limit(environ)
    if n <= limit:
        return ""
    return (f"start_engines({n}): at most {limit} engines run here ({why}); more would leave each a sliver of "
            "a core and everyone on this machine waiting. Ask for fewer, or run them as a Slurm job "
            "(launcher='slurm'); a site may set GPULAB_MAX_ENGINES.")


def _env(name: str, default=None, kind=str):
    value = os.environ.get(name, "")
    return kind(value) if value else default


def start_engines(n: int = 4, *, launcher: str | None = None, controller_ip: str | None = None,
                  profile: str = PROFILE, partition: str | None = None, account: str | None = None,
                  gpus_per_node: int | None = None, ranks_per_node: int | None = None, time: str | None = None,
                  mpi: str | None = None, slurm_template: str = SLURM_TEMPLATE,
                  cell_timeout: float | None = 300, start_timeout: float = 120,
                  nodes: int | None = None, link: str | None = "1gbit", placement: str = "block") -> Engines:
    """Start a controller and n MPI engines; return the connected ``Engines`` handle.

    launcher="local": ``mpiexec -n n`` on this machine (the mpiexec beside this
    Python, or $GPULAB_MPIEXEC). launcher="slurm": one sbatch job from
    slurm_template with partition, account, gpus_per_node, ranks_per_node, time
    and mpi (srun's --mpi plugin, "pmi2" for the mpich wheel).
    The controller listens on 127.0.0.1 unless controller_ip asks for more
    ("*" = all interfaces, the default for Slurm, whose engines run elsewhere).
    A %%px cell running longer than cell_timeout s ends the engines with its
    stack shown in the notebook (None: no limit); ``Engines.run`` has its own timeout.
    Every limit is written for an idle machine with a core per rank and stretched by
    the ranks and load per core read as the engines start (``gpulab.cluster.time_limits``).
    nodes=N (launcher="local"): the engines run on an emulated cluster of N nodes joined by
    ``link`` ("1gbit", "10gbit", "unlimited"), ranks placed "block" or "round-robin" (see
    gpulab.emulated); ``engines.emulated`` is that cluster, taken down by ``engines.stop()``.
    start_timeout bounds the wait for the engines (a Slurm job that ends before
    they connect fails at once).

    Arguments left at None come from the environment, so that a site (or a
    JupyterHub spawner) can point unchanged notebooks at Slurm:
    GPULAB_LAUNCHER (default "local"), GPULAB_CONTROLLER_IP,
    GPULAB_SLURM_PARTITION, GPULAB_SLURM_ACCOUNT, GPULAB_GPUS_PER_NODE
    (default 4), GPULAB_RANKS_PER_NODE, GPULAB_SLURM_TIME (default 00:30:00),
    GPULAB_SLURM_MPI (default pmi2).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"start_engines needs a positive number of engines, got n={n!r}")
    # an emulated cluster is made on this machine (inside the JupyterLab job under a hub that sends
    # plain start_engines(n) to Slurm)
    launcher = launcher or ("local" if nodes else _env("GPULAB_LAUNCHER", "local"))
    controller_ip = controller_ip or _env("GPULAB_CONTROLLER_IP")
    slurm = {} if launcher != "slurm" else dict(
        partition=_env("GPULAB_SLURM_PARTITION", "") if partition is None else partition,
        account=_env("GPULAB_SLURM_ACCOUNT", "") if account is None else account,
        gpus_per_node=_env("GPULAB_GPUS_PER_NODE", 4, int) if gpus_per_node is None else gpus_per_node,
        ranks_per_node=ranks_per_node or _env("GPULAB_RANKS_PER_NODE", None, int),
        time=_env("GPULAB_SLURM_TIME", "00:30:00") if time is None else time,
        mpi=_env("GPULAB_SLURM_MPI", "pmi2") if mpi is None else mpi, template=slurm_template)
    if launcher == "local" and (problem := too_many_engines(n)):
        raise EngineProblem(problem)
    emulated = ipc_sockets = None
    if nodes:
        if launcher != "local":
            raise ValueError("nodes= emulates a cluster on this machine: it needs launcher='local'")
        from gpulab.emulated import EmulatedCluster

        emulated = EmulatedCluster(nodes=nodes, link=link, placement=placement, export=False).start()
        ipc_sockets = IpcSockets()  # the engines' namespaces reach the controller through the file system
    try:
        engines, config, ip, location = cluster_config(n, launcher, controller_ip, emulated=emulated,
                                                       ipc_prefix=ipc_sockets.prefix if ipc_sockets else None,
                                                       **slurm)
        if launcher == "slurm" and (problem := request_problem(n, **slurm)):  # Slurm's reason, not sbatch's status
            raise EngineProblem(problem)
        profile_dir = ipp.Cluster(profile=profile, load_profile=False).profile_dir
        stop_stale_clusters(profile_dir)
    except BaseException:
        _take_down(emulated, ipc_sockets)
        raise

    def make_cluster():
        # the owner pid in the id lets a later start find clusters of killed kernels
        cluster_id = f"gpulab-{os.getpid()}-{os.urandom(3).hex()}"
        if engines == "slurm":  # the job script beside the engine logs, not in the notebook's directory
            Path(profile_dir, "log").mkdir(parents=True, exist_ok=True)
            config.SlurmEngineSetLauncher.batch_file_name = str(Path(profile_dir, "log", f"{cluster_id}.sbatch"))
        return ipp.Cluster(engines=engines, n=n, profile_dir=profile_dir, cluster_id=cluster_id,
                           controller_ip=ip, controller_location=location, config=config,
                           log_level=40, load_profile=False)  # our errors say more than its logs

    try:
        return Engines(n, make_cluster, launcher, cell_timeout, start_timeout, emulated, ipc_sockets)
    except BaseException:  # Engines stopped its own part; the network is ours to take down
        _take_down(emulated, ipc_sockets)
        raise


def _take_down(emulated, ipc_sockets) -> None:
    if ipc_sockets is not None:
        ipc_sockets.stop()
    if emulated is not None:
        emulated.stop()
