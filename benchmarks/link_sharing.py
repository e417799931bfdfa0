"""Groups that cross the same link at once share it: one group's all-gather timed alone and with
every group of its layout calling at the same moment, as the engine model's fit times them.

    python benchmarks/link_sharing.py --link 100mbit                      # 2 emulated nodes x 2 ranks, block
    python benchmarks/link_sharing.py --link 100mbit --placement round-robin
    python benchmarks/link_sharing.py                                     # 4 ranks on this machine

The fit (``gpulab.engine.perf.probes.collective_costs``) times each layout of groups (g ranks, s
apart) with all its groups calling together after a barrier. Where two groups cross the one link
between two nodes, that is two flows sharing it. In training the groups need not reach the link in
step: ranks that share a core take turns, so one group may send while another computes. For every
layout with more than one group, every rank times an all-gather of 64 KiB, 256 KiB and 1 MiB (the
gathered buffer): ``together``, every group calling; ``alone``, only the group of rank 0 calling while
the others wait at the next barrier. Each is the slowest calling rank's time after a barrier, the
least and the median of 7. Where the link is what limits the call, ``together`` takes up to as many
times ``alone`` as there are groups crossing it.

Writes docs/results/link_sharing_<setting>.json and a plot beside it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mpi_job import ratio_plot, small_benchmark, write_record  # noqa: E402

SIZES = (1 << 16, 1 << 18, 1 << 20)
REPS = 7
MODES = ("together", "alone")


def in_ranks() -> None:
    import time

    import numpy as np
    from mpi4py import MPI

    from gpulab.engine.perf.probes import group_layouts, strided_group

    comm = MPI.COMM_WORLD
    points = []
    for g, s in group_layouts(comm.size, strided=True):
        if g == comm.size:  # one group: nothing shares its links
            continue
        color = strided_group(comm.rank, g, s)
        group = comm.Split(color, comm.rank)
        for nbytes in SIZES:
            gathered = np.ones(nbytes // 4, dtype=np.float32)
            part = gathered[:gathered.size // g].copy()  # apart: MPI forbids aliased buffers
            for mode in MODES:
                calls = mode == "together" or color == strided_group(0, g, s)
                times = []
                for _ in range(REPS):
                    comm.Barrier()
                    start = time.perf_counter()
                    if calls:
                        group.Allgather(part, gathered)
                    took = time.perf_counter() - start if calls else 0.0
                    times.append(comm.allreduce(took, op=MPI.MAX))
                points.append({"group_size": g, "stride": s, "groups": comm.size // g, "nbytes": nbytes,
                               "mode": mode, "least_ms": min(times) * 1e3,
                               "median_ms": float(np.median(times)) * 1e3})
        group.Free()
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "points": points}))


def ratios(record: dict) -> list[dict]:
    """``together`` over ``alone`` per layout and size, on the least times."""
    least = {(p["group_size"], p["stride"], p["nbytes"], p["mode"]): p for p in record["points"]}
    return [{"group_size": g, "stride": s, "groups": p["groups"], "nbytes": n,
             "together_over_alone": p["least_ms"] / least[(g, s, n, "alone")]["least_ms"]}
            for (g, s, n, mode), p in least.items() if mode == "together"]


def plot(record: dict, path: Path) -> None:
    curves: dict = {}
    for r in record["ratios"]:
        label = f"{r['groups']} groups of {r['group_size']}, {r['stride']} apart"
        curves.setdefault(label, []).append((r["nbytes"], r["together_over_alone"]))
    ratio_plot(path, curves, xlabel="KiB gathered", ylabel="all groups at once / one alone",
               title=f"an all-gather with every group calling against one group alone: {record['setting']}")


def main() -> int:
    record = small_benchmark(__file__, __doc__, in_ranks)
    if record is None:
        return 0
    record["ratios"] = ratios(record)
    write_record(record, "link_sharing", plot)
    for p in record["points"]:
        print(f"{p['groups']} groups of {p['group_size']}, {p['stride']} apart  {p['nbytes'] >> 10:5d} KiB "
              f"{p['mode']:8s} least {p['least_ms']:8.2f} ms  median {p['median_ms']:8.2f}")
    for r in record["ratios"]:
        print(f"{r['groups']} groups of {r['group_size']}, {r['stride']} apart  {r['nbytes'] >> 10:5d} KiB  "
              f"together {r['together_over_alone']:.2f}x alone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
