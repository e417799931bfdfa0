"""A collective and its non-blocking twin are different algorithms: MPI_Allreduce against
MPI_Iallreduce started and waited for at once, and against the engine's gradient buckets.

    python benchmarks/nonblocking_collectives.py                       # 4 ranks on this machine
    python benchmarks/nonblocking_collectives.py --link 1gbit --placement round-robin
    python benchmarks/nonblocking_collectives.py --link 1gbit --nodes 4 --placement block

When the engine overlaps, it issues MPI_Iallreduce (the data-parallel buckets, the dX all-reduce),
MPI_Ireduce_scatter_block and MPI_Iallgather. MPICH selects the algorithms of these apart from the
blocking calls' (its MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM and the rest): the same bytes between the
same ranks can take longer or shorter. Every rank times, over all ranks, at 256 KiB, 1 MiB, 4 MiB and
6 MiB: each blocking call, its twin started and waited for (no work in between: only the algorithm
differs), and for the all-reduce the buffer split into 1 MiB buckets all in flight together, as the
engine's overlap sends gradients; each the slowest rank's time, after a barrier, the least and the
median of 7. The engine's fit times both kinds (``gpulab.engine.perf.probes.collective_costs``) and
the model prices what overlaps as the non-blocking call it is.

Writes docs/results/nonblocking_collectives_<setting>.json and a plot beside it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mpi_job import ratio_plot, small_benchmark, write_record  # noqa: E402

SIZES = (1 << 18, 1 << 20, 4 << 20, 6 << 20)
BUCKET = 1 << 20
REPS = 7


def calls(comm, x):
    """name -> the call on ``x`` over ``comm``: each blocking collective, its twin, the buckets."""
    from mpi4py import MPI

    p, n = comm.size, x.size
    part, gathered = x[:n // p].copy(), x[:(n // p) * p].copy()  # apart: MPI forbids aliased buffers
    bucket = BUCKET // x.itemsize
    return {
        "all_reduce": lambda: comm.Allreduce(MPI.IN_PLACE, x),
        "iall_reduce": lambda: comm.Iallreduce(MPI.IN_PLACE, x).Wait(),
        "iall_reduce in 1 MiB buckets": lambda: MPI.Request.Waitall(
            [comm.Iallreduce(MPI.IN_PLACE, x[i:i + bucket]) for i in range(0, n, bucket)]),
        "all_gather": lambda: comm.Allgather(part, gathered),
        "iall_gather": lambda: comm.Iallgather(part, gathered).Wait(),
        "reduce_scatter": lambda: comm.Reduce_scatter_block(gathered, part),
        "ireduce_scatter": lambda: comm.Ireduce_scatter_block(gathered, part).Wait(),
    }


def in_ranks() -> None:
    import time

    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    points = []
    for nbytes in SIZES:
        x = np.ones(nbytes // 4, dtype=np.float32)
        for name, call in calls(comm, x).items():
            times = []
            for _ in range(REPS):
                comm.Barrier()
                start = time.perf_counter()
                call()
                times.append(comm.allreduce(time.perf_counter() - start, op=MPI.MAX))
            points.append({"call": name, "nbytes": nbytes, "least_ms": min(times) * 1e3,
                           "median_ms": float(np.median(times)) * 1e3})
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "points": points}))


def ratios(record: dict) -> list[dict]:
    """Each twin (and the buckets) against its blocking call, per size, on the least times."""
    least = {(p["call"], p["nbytes"]): p["least_ms"] for p in record["points"]}
    out = []
    for (call, nbytes), t in least.items():
        if call.startswith("i"):
            blocking = call[1:].split(" ")[0]
            out.append({"call": call, "nbytes": nbytes, "over_blocking": t / least[(blocking, nbytes)]})
    return out


def plot(record: dict, path: Path) -> None:
    curves: dict = {}
    for r in record["ratios"]:
        curves.setdefault(r["call"], []).append((r["nbytes"], r["over_blocking"]))
    ratio_plot(path, curves, xlabel="KiB over all ranks", ylabel="time / the blocking call's",
               title=f"non-blocking collectives against blocking ones: {record['setting']}")


def main() -> int:
    record = small_benchmark(__file__, __doc__, in_ranks)
    if record is None:
        return 0
    record["ratios"] = ratios(record)
    write_record(record, "nonblocking_collectives", plot)
    for p in record["points"]:
        print(f"{p['call']:30s} {p['nbytes'] >> 10:5d} KiB  least {p['least_ms']:8.2f} ms"
              f"  median {p['median_ms']:8.2f}")
    for r in record["ratios"]:
        print(f"{r['call']:30s} {r['nbytes'] >> 10:5d} KiB  {r['over_blocking']:.2f}x the blocking call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
