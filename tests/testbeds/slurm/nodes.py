"""Where a node's slurmd runs: on this machine with a private /dev/shm, or in a node of an emulated cluster.

By default all nodes are slurmd's on 127.0.0.1 with their own ports, started with ``slurmd -N NAME``;
Slurm then treats them as separate nodes (MPI's node-local rank follows Slurm's layout), although they
share the machine's network; each slurmd runs in its own mount namespace with a private /dev/shm
(``own_shm``), so MPI's shared-memory segments stay within a node and vanish with it. ``Node.wrap`` is
the hook for running a node's slurmd elsewhere (a network namespace: a command prefix such as
``nsenter --net=/run/netns/n1 ...``).

``emulated=True`` puts the nodes on an emulated cluster (``gpulab.emulated``) of N + 1 network
namespaces joined by ``link`` (``on_emulated_cluster``): slurmd K runs in node K (10.77.0.K, port 6818,
its private /dev/shm as above, MPI between nodes over its ``eth0``: ``FI_TCP_IFACE=eth0``), slurmctld
and munged in the last one, the "login" node, which has no slurmd. Slurm's commands must run where they
reach slurmctld and where the nodes reach them (srun listens for its tasks' I/O): ``env()`` puts
wrappers first on PATH that run them in the login node when called from the machine's own network (as
root, which nsenter needs) and as they are inside the nodes (a batch script's srun). munged's socket,
the configuration and ZeroMQ's ipc:// sockets are files, which every namespace sees. ``stop()`` takes
the namespaces down last; if the testbed's process is killed, the cluster's keeper ends every daemon
and job with them (only the directory stays).
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

from gpulab.emulated import EmulatedCluster
from gpulab.emulated.netns import node_address

if TYPE_CHECKING:
    from tests.testbeds.slurm.testbed import SlurmTestbed

CLIENTS = ["sbatch", "srun", "salloc", "squeue", "scancel", "sinfo", "scontrol"]  # wrapped in emulated mode


def own_shm(size: str) -> list[str]:
    """A command prefix that gives a slurmd (and its jobs) a private /dev/shm, gone when they are.

    MPI's shared-memory segments of one node stay on that node: two nodes on one machine
    cannot meet in each other's segments, and segments of killed jobs do not outlive the node.
    """
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f"mount -t tmpfs -o size={size},mode=1777 gpulab-shm /dev/shm && exec \"$@\"", "own-shm"]


def on_emulated_cluster(bed: SlurmTestbed) -> list[str]:
    """Start the emulated cluster under the testbed's nodes: node K for slurmd K, the last node (login) for
    slurmctld and munged, so that the keeper ends them if the testbed's process is killed; write the
    wrappers of Slurm's commands. Returns the command prefix that runs in the login node."""
    login = len(bed.nodes) + 1
    # own_cores=False: each slurmd counts its node's CPUs itself, and the testbed declares them all
    bed.emulated = EmulatedCluster(nodes=login, link=bed.link, mode="root", export=False, own_cores=False).start()
    for k, node in enumerate(bed.nodes, start=1):
        node.address, node.wrap = node_address(k), bed.emulated.on_node(k, [])
    bed.controller_address = node_address(login)
    bed.bin.mkdir()
    machine = os.readlink("/proc/self/ns/net")  # "net:[INODE]": the network Slurm's users call from
    enter = bed.emulated.on_node(login, [])
    for name in CLIENTS:
        real = shutil.which(name)
        if real is None:  # salloc or scontrol missing: the tests need neither
            continue
        wrapper = bed.bin / name
        wrapper.write_text(f"""#!/bin/sh
# {name} of the test Slurm: from the machine's own network in its login node ({bed.controller_address}),
# from inside a node (a job's srun) as it is
if [ "$(readlink /proc/self/ns/net)" = "{machine}" ]; then exec {" ".join(enter)} {real} "$@"; fi
exec {real} "$@"
""")
        wrapper.chmod(0o755)
    return enter
