"""An emulated multi-node cluster on one Linux machine: network namespaces as nodes.

    from gpulab.emulated import EmulatedCluster
    with EmulatedCluster(nodes=4, ranks_per_node=2, link="1gbit", placement="block") as cluster:
        subprocess.run(cluster.mpiexec_command(8, ["-m", "my_program"]))
        # or anything that calls gpulab.launch.mpiexec_command (gpulab bench/tune/train, run_mpi)

Each node is a network namespace with one interface (``eth0``, 10.77.0.K/24)
whose veth peer is a port of a Linux bridge in a switch namespace; ``tbf``
limits the rate of both ends (``link="1gbit"``, ``"10gbit"``, ``"100mbit"`` or
``None``/``"unlimited"``). MPI ranks on one node share memory, as on one machine;
between nodes MPICH is forced onto TCP (``UCX_TLS=tcp,self``), because UCX
would otherwise move data between namespaces through shared memory and the
links would carry nothing. ``Split_type(COMM_TYPE_SHARED)`` gives one
communicator per emulated node. Where the machine has at least as many cores as
there are nodes, each node's processes run on their own share of them
(``taskset``; ``own_cores=False`` lets every node use every core), as separate
machines would.

Set up as root, or unprivileged inside a user namespace (``unshare -r``) where
the kernel allows it (``mode="auto"`` tries root, then user). Where neither
works, :class:`ClusterUnavailable` says why; the commands then print the
reason and run on the single machine.

Nothing is left behind: the namespaces are held open by one keeper process
(``gpulab.emulated.netns``) and are never bind-mounted, so they vanish with
the keeper, which tears everything down when its creator ends, however it
ends (normal exit, exception, Ctrl-C, kill -9).

The cluster writes where its jobs run (hosts, launcher, links) to a state file that
``gpulab.jobsite`` reads: ``gpulab.launch`` and the records never import this package.
Modules: ``cluster`` (EmulatedCluster: up, down, reaching the nodes, launching),
``links`` (rates, faults), ``jobs`` (``run`` and its diagnosis), ``netns`` (the keeper),
``topology`` (the commands' --nodes/--link/--placement flags).
"""

from gpulab.emulated.cluster import MPI_ENV, TRANSPORT, ClusterNameTaken, EmulatedCluster, check_tools, hydra_mpiexec
from gpulab.emulated.jobs import ClusterJobFailed
from gpulab.emulated.links import link_bytes_per_s, parse_link
from gpulab.jobsite import ENV_STATE, ENV_TOPOLOGY, PLACEMENTS, STATE_DIR, ClusterUnavailable, rank_nodes

__all__ = ["ENV_STATE", "ENV_TOPOLOGY", "MPI_ENV", "PLACEMENTS", "STATE_DIR", "TRANSPORT", "ClusterJobFailed",
           "ClusterNameTaken", "ClusterUnavailable", "EmulatedCluster", "check_tools", "hydra_mpiexec",
           "link_bytes_per_s", "parse_link", "rank_nodes"]
