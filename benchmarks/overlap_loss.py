"""What overlapping one all-reduce with compute gains or loses, unclipped: the numbers behind the engine
model's overlap efficiency (``probes.overlap_efficiency``), which clips a loss to 0.

    python benchmarks/overlap_loss.py                  # 4 ranks on this machine
    python benchmarks/overlap_loss.py --link 1gbit     # 2 emulated nodes x 2 ranks, block placement

Every rank runs the probe itself (``probes.overlap_times``), per progress mode ("poll": MPI_Test
between kernels; "thread": gpulab's progress thread) and per size (256 KiB, 1 MiB; the fit times
1 MiB): 20 matmuls of 256^3 (``compute``), the all-reduce over all ranks (``comm``) and the
all-reduce in flight behind the matmuls (``both``), each the least over 9 barrier-started
repetitions of the slowest rank. ``both - compute - comm`` is what
overlapping saved (negative) or cost (positive); eta = -that / the shorter of the two, as the probe
computes it before clipping. Writes docs/results/overlap_loss_<setting>.json and a plot beside it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mpi_job import small_benchmark, write_record  # noqa: E402

SIZES = (1 << 18, 1 << 20)


def in_ranks() -> None:
    from mpi4py import MPI

    from gpulab.engine.perf.probes import overlap_times

    comm = MPI.COMM_WORLD
    points = []
    for progress in ("poll", "thread"):
        for nbytes in SIZES:
            t_comp, t_comm, t_both = overlap_times(comm, progress, nbytes)
            points.append({"progress": progress, "nbytes": nbytes, "compute_s": t_comp, "comm_s": t_comm,
                           "both_s": t_both, "eta_unclipped": (t_comp + t_comm - t_both) / min(t_comp, t_comm)})
    if comm.rank == 0:
        print(json.dumps({"points": points}))


def plot(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = record["points"]
    fig, ax = plt.subplots(figsize=(7, 3.4))
    xs = range(len(points))
    ax.bar([x - 0.2 for x in xs], [(p["compute_s"] + p["comm_s"]) * 1e3 for p in points], 0.4,
           label="compute, then the all-reduce")
    ax.bar([x + 0.2 for x in xs], [p["both_s"] * 1e3 for p in points], 0.4, label="the all-reduce behind the compute")
    ax.set_xticks(list(xs), [f"{p['progress']}\n{p['nbytes'] >> 10} KiB" for p in points])
    ax.set_ylabel("ms (slowest rank, least of 9)")
    ax.set_title(f"overlap gained or lost: {record['setting']}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    record = small_benchmark(__file__, __doc__, in_ranks, timeout=600)
    if record is None:
        return 0
    points = record["points"]
    write_record(record, "overlap_loss", plot)
    for p in points:
        lost = (p["both_s"] - p["compute_s"] - p["comm_s"]) * 1e3
        print(f"{p['progress']:6s} {p['nbytes'] >> 10:5d} KiB: compute {p['compute_s'] * 1e3:5.2f} ms, all-reduce "
              f"{p['comm_s'] * 1e3:5.2f}, behind the compute {p['both_s'] * 1e3:5.2f}: overlap "
              f"{'cost' if lost > 0 else 'saved'} {abs(lost):.2f} ms (eta unclipped {p['eta_unclipped']:+.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
