"""What the testbed writes into its directory: slurm.conf, gres.conf, the fake GPUs, the task prolog, the Epilog.

Each node is a ``Node(name, address, port)``. Nodes declare ``cpus`` CPUs and ``gpus`` fake GPUs (GRES
backed by character devices like /dev/null, so Slurm sets CUDA_VISIBLE_DEVICES in jobs) whatever the
machine has (``SlurmdParameters=config_overrides``). No cgroups, no systemd, no accounting:
``proctrack/linuxproc`` and ``task/none``. ``KillOnBadExit=1``: a task that fails ends its step, so an
MPI abort cannot leave srun waiting for the other tasks. An ``Epilog`` removes an ended job's MPI
scratch files that no process of its user still holds (``EPILOG``), as a site's node clean-up does. A
``TaskProlog`` gives every task the testbed's ``task_env`` (by default ``FI_TCP_IFACE=lo``: libfabric's
TCP between nodes stays on the loopback the nodes share), as a site's node set-up names its fabric
interface.
"""

from __future__ import annotations

import os
import socket
import stat
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.testbeds.slurm.testbed import SlurmTestbed

SLURMCTLD_PORT, SLURMD_PORT = 6817, 6818  # Slurm's own: every emulated node has its ports to itself
# The node clean-up a site's Epilog does: a cancelled job's MPI ranks die by signal and leave their scratch
# files (/dev/shm/mpich_shm_*, hydra's /tmp files) on every node they ran on, where nothing of the job is
# left to remove them. Run by slurmd as root, in the node's mount namespace (its private /dev/shm).
EPILOG = """#!{python}
import os
import sys
import psutil
from gpulab.procfs import MPI_SCRATCH, mpi_scratch_held, remove_files
try:
    uid = int(os.environ["SLURM_JOB_UID"])
    theirs = set()
    for prefix in MPI_SCRATCH:
        folder, stem = os.path.split(prefix)
        for entry in os.scandir(folder):
            if entry.name.startswith(stem) and entry.stat(follow_symlinks=False).st_uid == uid:
                theirs.add(entry.path)
    # the user's other jobs on this node (a JupyterLab and its engines) keep what they still hold
    held = mpi_scratch_held(p.pid for p in psutil.process_iter(["uids"])
                            if p.info["uids"] and p.info["uids"].real == uid)
    remove_files(theirs - held)
except Exception as err:  # an Epilog that fails drains the node: report, never fail
    print(f"gpulab epilog: {{err}}", file=sys.stderr)
"""


@dataclass
class Node:
    name: str
    address: str = "127.0.0.1"
    port: int = 0  # 0: a free port is picked
    wrap: list[str] = field(default_factory=list)  # command prefix for this node's slurmd


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def slurm_conf(bed: SlurmTestbed) -> str:
    host = socket.gethostname()
    d = bed.dir
    lines = [
        "ClusterName=gpulabtest",
        f"SlurmctldHost={host}({bed.controller_address})",
        f"SlurmctldPort={bed.ctld_port}",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={bed.munge_socket}",
        "SlurmUser=root", "SlurmdUser=root",
        f"StateSaveLocation={d}/state", f"SlurmdSpoolDir={d}/spool/%n",
        f"SlurmctldPidFile={d}/slurmctld.pid", f"SlurmdPidFile={d}/slurmd-%n.pid",
        f"SlurmctldLogFile={d}/slurmctld.log", f"SlurmdLogFile={d}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        "SlurmdParameters=config_overrides", "ReturnToService=2", "MpiDefault=none",
        "SchedulerType=sched/builtin", "MinJobAge=10", "KillWait=2", "InactiveLimit=0", "KillOnBadExit=1",
        f"TaskProlog={d}/task_prolog.sh",  # MinJobAge: why a job ended stays visible between 2-s polls
        f"Epilog={d}/epilog.py",
        "MessageTimeout=10", "MailProg=/bin/true", "SlurmdTimeout=60", "SlurmctldTimeout=60",
        "UnkillableStepTimeout=30",
        "GresTypes=gpu" if bed.gpus else "",
    ]
    gres = f" Gres=gpu:{bed.gpus}" if bed.gpus else ""
    for node in bed.nodes:
        lines.append(f"NodeName={node.name} NodeHostname={host} NodeAddr={node.address} Port={node.port} "
                     f"CPUs={bed.cpus} RealMemory=1000{gres} State=UNKNOWN")
    lines.append(f"PartitionName={bed.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(line for line in lines if line) + "\n"


def gres_conf(bed: SlurmTestbed) -> str:
    # fake GPUs: Slurm only needs a file per device to count and index them
    return "".join(f"NodeName={node.name} Name=gpu File={bed.dir}/gpus/{node.name}/gpu[0-{bed.gpus - 1}]\n"
                   for node in bed.nodes)


def write_config(bed: SlurmTestbed) -> None:
    """The nodes' spool directories and fake GPUs, slurm.conf, gres.conf, the task prolog and the Epilog."""
    for node in bed.nodes:
        (bed.dir / "spool" / node.name).mkdir(exist_ok=True)
        if bed.gpus:
            (bed.dir / "gpus" / node.name).mkdir(parents=True, exist_ok=True)
            for i in range(bed.gpus):  # character devices like /dev/null: Slurm checks the type
                os.mknod(bed.dir / "gpus" / node.name / f"gpu{i}", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    bed.conf.write_text(slurm_conf(bed))
    prolog = bed.dir / "task_prolog.sh"  # slurmstepd exports what it prints as "export K=V"
    prolog.write_text("#!/bin/sh\n" + "".join(f"echo export {k}={v}\n" for k, v in bed.task_env.items()))
    prolog.chmod(0o755)
    epilog = bed.dir / "epilog.py"
    epilog.write_text(EPILOG.format(python=sys.executable))
    epilog.chmod(0o755)
    if bed.gpus:
        (bed.dir / "gres.conf").write_text(gres_conf(bed))
