"""How far one all-reduce on the emulated cluster moves from job to job, timed as the engine model's fit
times it and back to back, beside the link's floor.

    python benchmarks/emulated_allreduce_drift.py                 # 3 jobs, 1 Gbit/s
    python benchmarks/emulated_allreduce_drift.py --jobs 5 --link 100mbit --out /tmp/drift.json

Each job brings up a fresh emulated cluster of 2 nodes x 2 ranks (block placement) and times an
all-reduce over all 4 ranks (so across the link) at 256 KiB, 550 KB (the col all-reduce of the
engine's grid (1, 4, 1, 1)) and 1 MiB, two ways: the fit's (``probes.added_by``: 20 steps of a short
kernel and the call against 20 of the kernel alone, the least of 3 each, as ``probes.collective_costs``)
and 24 calls back to back (per call, the median of 5 loops). The floor: every byte of the vector
into each node at the link's rate (``benchmarks/emulated_engine.py``'s ``link_floor``). Writes a JSON
record and a plot beside it (docs/results/emulated_allreduce_drift.json, .png).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mpi_job import rank0_json  # noqa: E402

RESULTS = ROOT / "docs" / "results" / "emulated_allreduce_drift.json"
SIZES = (1 << 18, 550_000, 1 << 20)
CALLS = 24  # col all-reduces per iteration of grid (1, 4, 1, 1)


def in_ranks() -> None:
    import numpy as np
    from mpi4py import MPI

    from gpulab.engine.parallel import collectives as coll
    from gpulab.engine.perf.probes import added_by, work_kernel

    comm = MPI.COMM_WORLD
    group = comm.Split(0, comm.rank)  # as the fit and the engine: a split communicator
    work, out = work_kernel(comm.rank), []
    for nbytes in SIZES:
        x = np.ones(nbytes // 4, dtype=np.float32)
        fit_way, _ = added_by(comm, lambda: coll.all_reduce(x, group), work, reps=3)  # noqa: B023
        loops = []
        for _ in range(5):
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(CALLS):
                group.Allreduce(MPI.IN_PLACE, x)
            loops.append(comm.allreduce(time.perf_counter() - start, op=MPI.MAX) / CALLS)
        out.append({"nbytes": nbytes, "fit_way_s": fit_way, "back_to_back_s": float(np.median(loops))})
    if comm.rank == 0:
        print(json.dumps(out))


def plot(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    for k, nbytes in enumerate(SIZES):
        for shift, (key, color, label) in enumerate((("fit_way_s", "tab:blue", "the fit's way"),
                                                     ("back_to_back_s", "tab:orange", "back to back"))):
            ys = [job["points"][k][key] * 1e3 for job in record["jobs"]]
            ax.scatter([k + 0.15 * (2 * shift - 1)] * len(ys), ys, color=color, label=label if k == 0 else None)
        if record["floor_s_per_byte"]:
            floor = nbytes * record["floor_s_per_byte"] * 1e3
            ax.hlines(floor, k - 0.35, k + 0.35, color="black", linestyles="dashed",
                      label="link floor" if k == 0 else None)
    ax.set_xticks(range(len(SIZES)), [f"{n / 1e3:.0f} KB" for n in SIZES])
    ax.set_ylabel("ms per all-reduce")
    ax.set_ylim(bottom=0)
    ax.set_title(f"all-reduce over 4 ranks, 2 emulated nodes at {record['link']}: {len(record['jobs'])} jobs",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=3, help="separate jobs, each on a fresh cluster (default 3)")
    parser.add_argument("--link", default="1gbit", help="link rate, e.g. 100mbit, 1gbit (default 1gbit)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--in-ranks", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.in_ranks:
        in_ranks()
        return 0
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    from gpulab.emulated import ClusterUnavailable, EmulatedCluster, parse_link
    from gpulab.emulated.links import link_bytes_per_s

    try:
        link = parse_link(args.link)
    except ValueError as err:
        parser.error(str(err))
    jobs = []
    for j in range(args.jobs):
        print(f"job {j + 1}/{args.jobs}: a fresh 2 x 2 cluster at {link}", flush=True)
        try:
            with EmulatedCluster(nodes=2, ranks_per_node=2, link=link, placement="block"):
                points = rank0_json(__file__, 4, ["--in-ranks"], timeout=600)
        except ClusterUnavailable as err:
            print(f"error: no emulated cluster on this machine: {err}", file=sys.stderr)
            return 2
        jobs.append({"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "points": points,
                     "load_after": os.getloadavg()[0]})
        print("  " + ", ".join(f"{p['nbytes'] / 1e3:.0f} KB: fit's way {p['fit_way_s'] * 1e3:.2f} ms, back to back "
                               f"{p['back_to_back_s'] * 1e3:.2f} ms" for p in points), flush=True)
    rate = link_bytes_per_s(link)
    from gpulab.records import provenance

    record = {"provenance": provenance(__doc__),
              "command": "python benchmarks/emulated_allreduce_drift.py " + " ".join(sys.argv[1:]),
              "cluster": "emulated: 2 nodes x 2 ranks, block placement", "link": link, "cpus": os.cpu_count(),
              "floor_s_per_byte": 1 / rate if rate else None, "jobs": jobs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))
    plot(record, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png').name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
