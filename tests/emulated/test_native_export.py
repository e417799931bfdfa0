"""gpulab tune bcast --export mpich on an emulated 4 x 1 cluster: MPICH reads the file, stays bit-exact, obeys it.

Which algorithm MPI_Bcast ran is read off the wire: each rank counts the bytes
its node's interface sent during the broadcasts (/proc/net/dev of its network
namespace). A binomial tree from rank 0 on 4 nodes sends 2N, 0, N, 0 bytes per
rank, a chain N, N, N, 0: the file's choice is in effect when the bytes match
those of a job forced to that choice. No timing is asserted here (that is
benchmarks/bcast_export.py).

Run as a script, this file is the probe every rank runs:
    python tests/emulated/test_native_export.py SIZE...
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SIZES = (64 << 10, 1 << 20)  # from 64 KiB the barrier and TCP acknowledgements add a few percent to the bytes counted
NODES = 4


def _probe(sizes: list[int]) -> None:
    """Every rank: broadcast a pattern at each size, check it bit for bit, count the bytes this node sent."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD

    def sent() -> int:
        with open("/proc/net/dev") as f:
            return sum(int(line.split(":", 1)[1].split()[8]) for line in f.readlines()[2:]
                       if line.split(":", 1)[0].strip() != "lo")

    out = []
    for n in sizes:
        expected = (np.arange(n, dtype=np.uint32) * 2654435761 >> 13).astype(np.uint8)
        buf = expected.copy() if comm.rank == 0 else np.zeros(n, np.uint8)
        comm.Barrier()
        before = sent()
        comm.Bcast(buf, root=0)
        comm.Barrier()
        tx = (sent() - before) / n  # in message sizes; TCP/IP headers add a few percent
        exact = bool(np.array_equal(buf, expected))
        out.append({"nbytes": n, "tx": comm.gather(tx, root=0), "exact": comm.gather(exact, root=0)})
    if comm.rank == 0:
        print("PROBE " + json.dumps(out), flush=True)


if __name__ == "__main__":
    _probe([int(x) for x in sys.argv[1:]])
    sys.exit(0)

# below the probe: the probe runs as a script in each rank and needs none of these
from gpulab.bcast.measurement import export, native_variants  # noqa: E402
from gpulab.bcast.selection.tuning import range_of  # noqa: E402
from tests.emulated.util import require_cluster  # noqa: E402
from tests.mpi_harness import ROOT  # noqa: E402

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(autouse=True)
def _cluster_possible():
    require_cluster()


def _env(extra: dict) -> dict:
    """This environment without a cluster name or MPICH variables of its own, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "GPULAB_CLUSTER" and not k.startswith("MPIR_CVAR_")}
    return {**env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **extra}


def _probe_on_cluster(cluster, sizes, env: dict) -> list[dict]:
    run = subprocess.run(cluster.mpiexec_command(NODES, [__file__, *map(str, sizes)]), capture_output=True,
                         text=True, timeout=180, env=_env(env))
    assert run.returncode == 0, f"probe job failed (exit {run.returncode}): {run.stderr[-3000:]}"
    line = next((x for x in run.stdout.splitlines() if x.startswith("PROBE ")), None)
    assert line, f"rank 0 printed no result: {run.stdout[-2000:]} {run.stderr[-2000:]}"
    return json.loads(line[len("PROBE "):])


def _same_traffic(a: list[float], b: list[float]) -> bool:
    """Bytes sent per rank, in message sizes: equal within TCP/IP's headers and retransmissions."""
    return all(abs(x - y) <= 0.15 * max(1.0, y) for x, y in zip(a, b))


def _ranks_differ(a: list[float], b: list[float]) -> bool:
    return any(abs(x - y) > 0.5 for x, y in zip(a, b))


def test_exported_mpich_file_is_accepted_exact_and_in_effect(tmp_path):
    from gpulab.emulated import EmulatedCluster

    chosen = tmp_path / "selection.json"
    record = tmp_path / "tune.json"
    tune = subprocess.run(
        [sys.executable, "-m", "gpulab.cli", "tune", "bcast", "-n", str(NODES), "--nodes", str(NODES),
         "--link", "100mbit", "--sizes", ",".join(map(str, SIZES)), "--only-native",
         "--native", "mpi:binomial,mpi:pipelined_tree/kary/1", "--chunks", "64K", "--time-budget", "0.02",
         "--export", "mpich", str(chosen), "--json", str(record), "--quiet"],
        capture_output=True, text=True, timeout=400, env=_env({}), cwd=ROOT)
    assert tune.returncode == 0, tune.stderr[-3000:]
    assert f"MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE={chosen}" in tune.stdout
    table = json.loads(record.read_text())[str(NODES)]["native_table"]
    rules = json.loads(chosen.read_text())
    assert "collective=allreduce" in rules, "MPICH needs every collective's rules in the file"

    # a second file from a table that picks the chain at every size: a choice unlike MPICH's own
    chain = tmp_path / "chain.json"
    forced_table = {"p": NODES, "ranges": [{"lo": 0, "hi": None, "algorithm": "mpi:pipelined_tree/kary/1@64K"}]}
    chain.write_text(json.dumps(export.mpich_rules({NODES: forced_table}, rules)))

    with EmulatedCluster(nodes=NODES, ranks_per_node=1, link="100mbit") as cluster:
        plain = _probe_on_cluster(cluster, SIZES, {})
        with_file = _probe_on_cluster(cluster, SIZES, {"MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE": str(chosen)})
        with_chain = _probe_on_cluster(cluster, SIZES, {"MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE": str(chain)})
        forced = {}
        for r in table["ranges"]:
            env = {k: v for k, v in native_variants.environment(r["algorithm"]).items() if k.startswith("MPIR_")}
            forced[r["algorithm"]] = _probe_on_cluster(cluster, SIZES, env)
        forced_chain = _probe_on_cluster(cluster, SIZES, native_variants.environment("mpi:pipelined_tree/kary/1@64K"))

    for runs in (plain, with_file, with_chain, *forced.values(), forced_chain):
        for point in runs:
            bad = [rank for rank, ok in enumerate(point["exact"]) if not ok]
            assert not bad, f"{point['nbytes']} B: ranks {bad} received different bytes"
    for i, n in enumerate(SIZES):
        r = range_of(table, n)
        assert _same_traffic(with_file[i]["tx"], forced[r["algorithm"]][i]["tx"]), \
            (f"{n} B: the file chose {r['algorithm']}, but each rank sent {with_file[i]['tx']} message sizes, "
             f"against {forced[r['algorithm']][i]['tx']} when that is forced")
        assert _same_traffic(with_chain[i]["tx"], forced_chain[i]["tx"]), (n, with_chain[i], forced_chain[i])
        assert _ranks_differ(with_chain[i]["tx"], plain[i]["tx"]), \
            f"{n} B: the chain's file left MPI_Bcast's traffic as it was ({plain[i]['tx']}): not in effect"
