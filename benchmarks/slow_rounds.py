"""Why one grid's rounds come out 100 ms apart on the emulated links: each round's iteration beside
the TCP segments the nodes retransmitted during it.

    python benchmarks/slow_rounds.py --link 100mbit --nodes 4          # 4 emulated nodes x 2 ranks, block
    python benchmarks/slow_rounds.py --link 1gbit --nodes 4
    MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=ring python benchmarks/slow_rounds.py --link 100mbit --nodes 4
    GPULAB_TCP_CONGESTION=bbr python benchmarks/slow_rounds.py --link 100mbit --nodes 4   # if the machine allows it

At 4 x 2 block, 100 Mbit/s, under TCP's BBR, the data-parallel grid (1, 1, 1, 8) comes out up to
100 ms apart from round to round while (2, 1, 2, 2) stays steady (docs/engine_model_accuracy.md,
"The emulated nodes run TCP reno"). Each emulated link is a ``tbf`` that queues at most 50 ms of
its rate and drops what comes beyond (``gpulab.emulated.netns``); a lost segment costs TCP a
retransmission and its sender a smaller window. For ``ROUNDS`` rounds, alternating, each rank times
one grid as the accuracy benchmark does (``perf.timing.measure``, overlap off, the median of 3
iterations after 1), and every node counts the segments TCP retransmitted in that round
(``RetransSegs`` in its network namespace's /proc/net/snmp).

Writes docs/results/slow_rounds_<setting>.json and a plot beside it; with MPICH's all-reduce forced
(``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM``, read at MPI_Init) slow_rounds_allreduce-<algorithm>_<setting>,
with the nodes' TCP congestion control other than the default reno (``GPULAB_TCP_CONGESTION``,
``gpulab.emulated.EmulatedCluster``) ..._tcp-<name>_<setting>.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mpi_job import small_benchmark, tcp_congestion, write_record  # noqa: E402

ROUNDS = 8


def tcp_counts() -> tuple[int, int]:
    """(segments TCP retransmitted, retransmission timeouts) so far in this process's network namespace
    (one emulated node): a timeout waits out at least 200 ms, a fast retransmit a round trip."""
    counts = []
    for path, table, name in (("/proc/net/snmp", "Tcp:", "RetransSegs"),
                              ("/proc/net/netstat", "TcpExt:", "TCPTimeouts")):
        with open(path) as f:
            names, values = [line.split()[1:] for line in f if line.startswith(table)]
        counts.append(int(values[names.index(name)]))
    return counts[0], counts[1]


def in_ranks() -> None:
    from mpi4py import MPI

    from benchmarks.emulated_engine import BATCH, overlap_for
    from gpulab.engine.perf.timing import bench_config, measure

    comm, cfg = MPI.COMM_WORLD, bench_config()
    if comm.size % 4:
        raise SystemExit("slow_rounds.py needs a multiple of 4 ranks")
    node = os.stat("/proc/self/ns/net").st_ino  # ranks of one node share its namespace and its count
    shapes = [(1, 1, 1, comm.size), (2, 1, 2, comm.size // 4)]
    rounds = []
    for r in range(ROUNDS):
        for shape in shapes:
            before = tcp_counts()
            row = measure(comm, cfg, shape, BATCH, overlap_for("off"), iters=3, warmup=1)
            counts = comm.gather((node, [b - a for a, b in zip(before, tcp_counts())]))
            if comm.rank == 0:
                by_node = dict(counts)  # one count per namespace
                rounds.append({"shape": list(shape), "round": r + 1, "iter_ms": row["iter_s"] * 1e3,
                               "iters_ms": [t * 1e3 for t in row["iter_s_all"]],
                               "compute_ms": row["summary"]["compute_s"] * 1e3,  # rank 0's timeline
                               "groups_ms": {g: v["flight_s"] * 1e3 for g, v in row["summary"]["groups"].items()},
                               "retransmitted": sum(c[0] for c in by_node.values()),
                               "timeouts": sum(c[1] for c in by_node.values()), "nodes": len(by_node)})
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "rounds": rounds, "tcp_congestion": tcp_congestion()}))


def plot(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    for shape in dict.fromkeys(tuple(r["shape"]) for r in record["rounds"]):
        rows = [r for r in record["rounds"] if tuple(r["shape"]) == shape]
        ax.plot([r["retransmitted"] for r in rows], [r["iter_ms"] for r in rows], "o", label=str(shape))
    ax.set_xlabel("TCP segments retransmitted in the round (all nodes)")
    ax.set_ylabel("ms an iteration")
    ax.set_title(f"each round of two grids, overlap off: {record['setting']}, all-reduce: {record['allreduce']}, "
                 f"TCP {record.get('tcp_congestion', '?')}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    from gpulab.emulated.cluster import DEFAULT_CONGESTION

    record = small_benchmark(__file__, __doc__, in_ranks)
    if record is None:
        return 0
    forced, tcp = os.environ.get("MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM"), record["tcp_congestion"]
    record["allreduce"] = f"{forced} (forced)" if forced else "MPICH's choice"
    stem = "_".join(["slow_rounds", *([f"allreduce-{forced}"] if forced else []),
                     *([f"tcp-{tcp}"] if tcp != DEFAULT_CONGESTION else [])])
    write_record(record, stem, plot)
    for r in record["rounds"]:
        print(f"round {r['round']} {tuple(r['shape'])}  {r['iter_ms']:7.1f} ms (iterations "
              f"{', '.join(f'{t:.0f}' for t in r['iters_ms'])})  {r['retransmitted']:3d} segments retransmitted, "
              f"{r['timeouts']} timeouts ({r['nodes']} nodes); rank 0 computed {r['compute_ms']:.0f} ms, "
              + ", ".join(f"{g} {t:.0f}" for g, t in r["groups_ms"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
