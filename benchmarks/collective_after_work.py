"""What one collective costs depends on the work before it: the same all-reduce, timed as the engine
model's fit times it, after kernels that do and do not stream memory.

    python benchmarks/collective_after_work.py                    # 4 ranks on this machine
    python benchmarks/collective_after_work.py --ranks 8
    python benchmarks/collective_after_work.py --link 1gbit       # 2 emulated nodes x 2 ranks, block placement

The fit (``gpulab.engine.perf.probes.collective_costs``) times each collective right after a short
kernel of cache-resident work (``work_kernel``: small matmuls, about 0.2 ms) as the time the call
adds to the kernel alone. The engine's layers stream their activations (MBs per rank) between two
collectives. Here every rank times an all-reduce (16 KiB, 256 KiB, 1 MiB; groups of 2 and of all
ranks) after each of these kernels, the fit's way (20 steps of kernel + call against 20 of the
kernel alone, the least of 5 alternated repetitions):

* ``fit``: the fit's kernel;
* ``long``: the fit's kernel 12 times (cache-resident, about as long as the 8 MiB one here);
* ``stream N MiB``: the fit's kernel and an elementwise pass over N MiB (three passes: *, +, tanh).

Writes docs/results/collective_after_work_<setting>.json and a plot beside it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mpi_job import small_benchmark, write_record  # noqa: E402

SIZES = (1 << 14, 1 << 18, 1 << 20)
STREAMS_MIB = (2, 8)


def kernels(rank: int) -> dict:
    import numpy as np

    from gpulab.engine.perf.probes import work_kernel

    fit = work_kernel(rank)
    out = {"fit": fit, "long": lambda: [fit() for _ in range(12)]}
    for mib in STREAMS_MIB:
        big = np.random.default_rng(rank).random((mib << 20) // 4, dtype=np.float32)
        out[f"stream {mib} MiB"] = lambda big=big: (fit(), np.tanh(big * 0.5 + big))
    return out


def in_ranks() -> None:
    import numpy as np
    from mpi4py import MPI

    from gpulab.engine.parallel import collectives as coll
    from gpulab.engine.perf.probes import added_by, per_step

    comm = MPI.COMM_WORLD
    work = kernels(comm.rank)
    kernel_ms = {name: per_step(comm, fn) * 1e3 for name, fn in work.items()}
    points = []
    for g in sorted({2, comm.size}):
        group = comm.Split(comm.rank // g, comm.rank)
        for nbytes in SIZES:
            x = np.ones(nbytes // 4, dtype=np.float32)
            for name, fn in work.items():
                added, _ = added_by(comm, lambda: coll.all_reduce(x, group), fn, reps=5)  # noqa: B023
                points.append({"group": g, "nbytes": nbytes, "kernel": name, "call_ms": added * 1e3})
        group.Free()
    if comm.rank == 0:
        print(json.dumps({"kernel_ms": kernel_ms, "points": points}))


def plot(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(record["kernel_ms"])
    cases = sorted({(p["group"], p["nbytes"]) for p in record["points"]})
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        ys = [next(p["call_ms"] for p in record["points"] if (p["group"], p["nbytes"]) == c and p["kernel"] == name)
              for c in cases]
        ax.bar([i + k * width for i in range(len(cases))], ys, width,
               label=f"after {name} (kernel {record['kernel_ms'][name]:.1f} ms, all ranks at once)")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cases))],
                  [f"groups of {g}\n{n >> 10} KiB" for g, n in cases], fontsize=8)
    ax.set_ylabel("ms the all-reduce adds")
    ax.set_title(f"one all-reduce after different work: {record['setting']}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    record = small_benchmark(__file__, __doc__, in_ranks)
    if record is None:
        return 0
    write_record(record, "collective_after_work", plot)
    for p in record["points"]:
        print(f"groups of {p['group']} {p['nbytes'] >> 10:5d} KiB after {p['kernel']:12s} {p['call_ms']:6.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
