"""A real, throwaway Slurm on this machine: munged, slurmctld and one slurmd per node, all in the foreground.

For the tests (tests/slurm) and for trying gpulab's Slurm paths without a cluster (needs root; run from
the root of a clone, with the Python that has gpulab installed):

    python -m tests.testbeds.slurm up            # two nodes; prints SLURM_CONF, Ctrl-C stops it
    python -m tests.testbeds.slurm up --emulated --link 1gbit   # the nodes on an emulated cluster
    python -m tests.testbeds.slurm run -- srun -N 2 -n 4 --mpi=pmi2 hostname

    with SlurmTestbed() as slurm:                # from Python (tests/slurm/conftest.py)
        subprocess.run(["sinfo"], env=slurm.env())

Debian's ``slurm-wlm`` and ``munge`` are installed when missing (root and apt-get needed). Everything
lives in one temporary directory: configuration, munge key and socket (a private munged, not the
system's), state, spool and logs. The daemons are this process's children and are waited for;
``stop()`` cancels every job, waits for the queue to empty, stops the daemons and removes the
directory, whatever state the start reached.

Modules, by job: ``install`` (the packages and binaries Slurm needs), ``config`` (the nodes and
what the testbed writes: slurm.conf, gres.conf, the task prolog, the Epilog), ``nodes`` (where a
node's slurmd runs: a private /dev/shm, a node of an emulated cluster), ``testbed`` (the daemons:
start, query, stop), ``__main__`` (the command line).
"""

from tests.testbeds.slurm.config import Node, free_port
from tests.testbeds.slurm.install import SlurmUnavailable, ensure_slurm
from tests.testbeds.slurm.testbed import SlurmTestbed

__all__ = ["Node", "SlurmTestbed", "SlurmUnavailable", "ensure_slurm", "free_port"]
