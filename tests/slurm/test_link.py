"""On the emulated testbed, MPI between Slurm's nodes crosses the emulated link: a 4 MiB broadcast from
n1 to n2 under srun takes as long as a 100 Mbit/s link needs for it, and n1's link counted the bytes.
(On the loopback testbed the same broadcast takes a few milliseconds.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from gpulab.emulated import link_bytes_per_s
from gpulab.emulated.netns import tool

NBYTES, ROUNDS, LINK = 4 << 20, 3, "100mbit"
BCAST = rf"""
import json, os, time
import numpy as np
from mpi4py import MPI
world = MPI.COMM_WORLD
buf = np.full({NBYTES}, 7 if world.rank == 0 else 0, np.uint8)
times = []
for _ in range({ROUNDS}):
    world.Barrier()
    t0 = time.perf_counter()
    world.Bcast(buf, root=0)
    world.Barrier()
    times.append(time.perf_counter() - t0)
nodes = world.gather(os.environ["SLURMD_NODENAME"])
if world.rank == 0:
    print(json.dumps({{"nodes": nodes, "times": times, "received": bool(world.bcast(None, root=1))}}))
else:
    world.bcast(bool((buf == 7).all()), root=1)
"""


def sent_bytes(cluster, k: int) -> int:
    """What node k's eth0 sent so far (its tbf qdisc counts every byte that leaves the node)."""
    out = subprocess.run(cluster.on_node(k, [tool("tc"), "-s", "qdisc", "show", "dev", "eth0"]),
                         capture_output=True, text=True, check=True).stdout
    return int(re.search(r"Sent (\d+) bytes", out).group(1))


@pytest.mark.parametrize("slurm", ["emulated"], indirect=True)
def test_mpi_between_slurm_nodes_crosses_the_emulated_link(slurm_env):
    cluster = slurm_env.emulated
    testbed_link = cluster.link
    cluster.set_link(LINK)
    try:
        before = sent_bytes(cluster, 1)
        done = subprocess.run(["srun", "-N", "2", "-n", "2", "--mpi=pmi2", "--kill-on-bad-exit=1", sys.executable,
                               "-c", BCAST], env={**slurm_env.env(), "MPIR_CVAR_CH4_NETMOD": "ofi"},
                              capture_output=True, text=True, timeout=120)
        sent = sent_bytes(cluster, 1) - before
    finally:
        cluster.set_link(testbed_link)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["nodes"] == ["n1", "n2"] and result["received"], result
    on_the_link_s = NBYTES / link_bytes_per_s(LINK)
    assert min(result["times"]) > 0.9 * on_the_link_s, (result["times"], on_the_link_s)
    assert sent >= ROUNDS * NBYTES, f"n1's link sent {sent} bytes for {ROUNDS} broadcasts of {NBYTES}"
    print(f"\n4 MiB broadcast n1 -> n2 under srun over a {LINK} link: "
          f"{', '.join(f'{t * 1e3:.0f}' for t in result['times'])} ms "
          f"(the link alone: {on_the_link_s * 1e3:.0f} ms); n1 sent {sent / 2**20:.1f} MiB")
