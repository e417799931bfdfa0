"""`auto` with no tuning run against MPI_Bcast on the emulated cluster (4 nodes x 1 rank, 1 Gbit/s).

    python benchmarks/auto_untuned.py            # writes docs/results/auto_untuned.json, prints the table
    python benchmarks/auto_untuned.py --sizes 1K,64K,1M,8M,32M --link 1gbit

No tuning file ($GPULAB_TUNING_TABLE points at a missing one) and no machine
profile: what `auto` knows is the node layout (Split_type) and the link rate
the cluster publishes to every rank ($GPULAB_TOPOLOGY). Each size is measured
by ``gpulab bench bcast --algorithms auto,mpi`` ('mpi' = the bare comm.Bcast);
the ratio auto / mpi is what section 3 of issue 29 asks about (at most 0.7 at
8 and 32 MiB, at most 1.1 at every size). The bench runs ``--rounds`` times in
the same cluster (auto and mpi alternate inside each round) and each point keeps
its median round: a 1 KiB broadcast over the emulated links takes about 70 us, and
one burst of another process's work in a block of iterations moves one round by
tens of percent. The load average before and after is recorded: other jobs may
share the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "auto_untuned.json"
sys.path.insert(0, str(ROOT))

from mpi_job import job_env, rank0_json  # noqa: E402

from gpulab.emulated import EmulatedCluster  # noqa: E402

INTERLEAVED_UP_TO = 64 << 10  # sizes where a block of iterations is too noisy to tell 1.1x apart


def interleaved(sizes: list[int], calls: int) -> None:
    """In the ranks: ``calls`` pairs of barrier-separated broadcasts, bare then auto, then auto then
    bare (the order alternates, so neither always follows the other), each call's time on the
    slowest rank; prints {size: {entry: median call in us, "p90": ..., "calls": n}} on rank 0.
    Per-call medians over thousands of alternating calls: a burst of other work or a retransmission
    on the emulated link moves a few calls, not a block of them."""
    import numpy as np
    from mpi4py import MPI

    import gpulab.bcast

    comm, out = MPI.COMM_WORLD, {}
    for nbytes in sizes:
        buf = np.zeros(nbytes, np.uint8)
        runs = {"bare": lambda b=buf: comm.Bcast(b, 0), "auto": lambda b=buf: gpulab.bcast.bcast(b, 0, comm)}
        times = {name: np.empty(calls) for name in runs}
        for run in runs.values():  # warm-up: auto decides and remembers
            for _ in range(10):
                run()
        for i in range(calls):
            for name in (("bare", "auto") if i % 2 == 0 else ("auto", "bare")):
                comm.Barrier()
                t0 = MPI.Wtime()
                runs[name]()
                times[name][i] = MPI.Wtime() - t0
        slowest = {name: np.empty(calls) if comm.rank == 0 else None for name in runs}
        for name in runs:
            comm.Reduce(times[name], slowest[name], op=MPI.MAX, root=0)
        if comm.rank == 0:
            us = {name: v * 1e6 for name, v in slowest.items()}
            out[nbytes] = {**{name: float(np.median(v)) for name, v in us.items()},
                           "p90": {name: float(np.percentile(v, 90)) for name, v in us.items()},
                           "pair_ratio_median": float(np.median(us["auto"] / us["bare"])), "calls": calls}
    if comm.rank == 0:
        print(json.dumps(out))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1K,64K,1M,8M,32M")
    parser.add_argument("--link", default="1gbit")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--iters", default="20")
    parser.add_argument("--rounds", type=int, default=5, help="bench runs; each point keeps its median round")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--pairs", type=int, default=3000, help="alternating calls of each entry, sizes <= 64 KiB")
    parser.add_argument("--interleaved", help=argparse.SUPPRESS)  # in the ranks: sizes, comma-separated
    args = parser.parse_args()
    if args.interleaved:
        interleaved([int(x) for x in args.interleaved.split(",")], calls=args.pairs)
        return 0
    from gpulab.bcast.sizes import parse_size

    small = [n for n in (parse_size(x) for x in args.sizes.split(",")) if n <= INTERLEAVED_UP_TO]
    with EmulatedCluster(nodes=args.nodes, link=args.link, placement="block"), \
            tempfile.TemporaryDirectory() as tmp:
        env = job_env(GPULAB_TUNING_TABLE=os.path.join(tmp, "no-tuning-file.json"), GPULAB_MACHINE="")
        command = [sys.executable, "-m", "gpulab.cli", "bench", "bcast", "-n", str(args.nodes), "--sizes", args.sizes,
                   "--algorithms", "auto,mpi", "--iters", args.iters, "--warmup", "1", "--time-budget", "3",
                   "--rounds", "6", "--quiet", "--json"]
        load_before = os.getloadavg()
        rounds = []
        for i in range(args.rounds):
            out = os.path.join(tmp, f"bench{i}.json")
            subprocess.run([*command, out], check=True, env=env, cwd=ROOT)
            rounds.append(json.loads(Path(out).read_text()))
        side_by_side = {}
        if small:  # the same comparison timed call by call, the two entries alternating
            pairs = rank0_json(__file__, args.nodes, ["--interleaved", ",".join(map(str, small)),
                                                      "--pairs", str(args.pairs)], env=env)
            side_by_side = {int(k): v for k, v in pairs.items()}
    bench = rounds[0]
    assert bench["metadata"]["emulated"], "the bench did not run on the emulated cluster"
    records = [r for b in rounds for r in b["records"]]

    def median_us(algorithm: str, nbytes: int) -> float:
        return statistics.median(r["max_us"] for r in records if r["algorithm"] == algorithm and r["nbytes"] == nbytes)

    rows = []
    for r in bench["records"]:
        if r["algorithm"] == "auto":
            auto_us, mpi_us = median_us("auto", r["nbytes"]), median_us("mpi", r["nbytes"])
            rows.append({"nbytes": r["nbytes"], "auto_us": auto_us, "mpi_us": mpi_us, "ratio": auto_us / mpi_us,
                         "chose": r["chose"], "rounds": args.rounds})
            if r["nbytes"] in side_by_side:
                pair = side_by_side[r["nbytes"]]
                rows[-1]["interleaved"] = {**pair, "ratio": pair["auto"] / pair["bare"]}
    from gpulab.records import provenance

    result = {"provenance": provenance(__doc__),
              "command": " ".join(["gpulab bench bcast"] + command[5:-2]) + f" (on {args.nodes} emulated nodes "
                                   f"x 1, {args.link}, no tuning file; {args.rounds} rounds, each point's median)",
              "load_before": load_before, "load_after": os.getloadavg(), "cpus": os.cpu_count(),
              "metadata": bench["metadata"], "rows": rows, "records": records}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(table(rows))
    print(f"wrote {args.out}")
    return 0


def table(rows: list[dict]) -> str:
    from gpulab.bcast.sizes import format_size

    lines = ["| size | auto (ms, slowest rank, median round) | MPI_Bcast (ms) | auto / MPI_Bcast | "
             "call by call: auto / MPI_Bcast, medians (us) | auto chose (source) |", "|---|---|---|---|---|---|"]
    for r in rows:
        chose = r["chose"]
        options = "".join(f" {k}={v}" for k, v in sorted(chose["options"].items()))
        lines.append(f"| {format_size(r['nbytes'])} | {r['auto_us'] / 1e3:.2f} | {r['mpi_us'] / 1e3:.2f} | "
                     f"{r['ratio']:.2f} | {_interleaved(r)} | {chose['algorithm']}{options} ({chose['source']}) |")
    return "\n".join(lines)


def _interleaved(row: dict) -> str:
    pair = row.get("interleaved")
    return "" if pair is None else f"{pair['ratio']:.2f} ({pair['auto']:.1f} / {pair['bare']:.1f})"


if __name__ == "__main__":
    sys.exit(main())
