"""start_engines(nodes=...): the notebook's engines on an emulated cluster, the kernel where it is."""

from __future__ import annotations

import pytest

from gpulab.cluster import start_engines
from gpulab.cluster.ipp_engines import HEARTBEAT_MS
from tests.cluster.procs import heartbeat_check_ms, stop_leftovers
from tests.emulated.util import leftovers, require_cluster

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(autouse=True)
def _cluster_possible():
    require_cluster()


def where_am_i():
    import os

    from mpi4py import MPI

    shared = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    return MPI.COMM_WORLD.rank, shared.size, os.stat("/proc/self/ns/net").st_ino


def test_engines_on_emulated_nodes(ipython_dir):
    with start_engines(4, nodes=2, link="1gbit", placement="round-robin", cell_timeout=None) as engines:
        state = dict(engines.emulated.state)
        got = engines.run(where_am_i, timeout=60)
        assert [rank for rank, _, _ in got] == [0, 1, 2, 3]
        assert [size for _, size, _ in got] == [2, 2, 2, 2]
        netns = [ns for _, _, ns in got]
        assert netns[0] == netns[2] == state["inodes"][0] and netns[1] == netns[3] == state["inodes"][1]
        # the controller talks to engines and client over unix sockets: no TCP listener at all
        import psutil

        controller = psutil.Process(engines.cluster.controller.pid)
        assert [c for c in controller.net_connections("inet") if c.status == psutil.CONN_LISTEN] == []
        assert engines.run(heartbeat_check_ms) == [HEARTBEAT_MS + 500] * 4  # its pings as fast as a local one's
        engines.view.execute("import numpy as np; from mpi4py import MPI; "
                             "x = MPI.COMM_WORLD.bcast(np.arange(5) if MPI.COMM_WORLD.rank == 0 else None)")
        assert [list(x) for x in engines.view["x"]] == [[0, 1, 2, 3, 4]] * 4
    assert stop_leftovers(ipython_dir, grace=3) == []
    assert leftovers(state) == []
