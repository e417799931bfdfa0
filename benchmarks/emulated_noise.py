"""The emulated cluster's own run-to-run spread at 1 Gbit/s, and how the ranks' waiting changes it.

    python benchmarks/emulated_noise.py                       # 5 runs napping, 3 spinning, interleaved (~25 min)
    python benchmarks/emulated_noise.py --runs nap=5 --rounds 1 --out docs/results/emulated_noise_one_pass.json

Each run is one whole ``gpulab bench bcast -n 4 --nodes 4 --link 1gbit --algorithms chain,binomial,mpi,auto
--sizes 8M,32M --iters 3 --warmup 1`` (a fresh cluster, fresh ranks, its own rounds until each point's
interval is within 5%, as a learner runs it), with ``GPULAB_BCAST_WAIT`` set to each way a pipeline's ranks
may wait (``gpulab.bcast.runtime.waiting``), the ways taking turns so that a busy moment hits both. Beside
each run: where the machine's CPU time went while it ran (/proc/stat: the ranks' user and system time, the
kernel's network work in softirq, idle, stolen by the hypervisor) and the load before it. Writes
docs/results/emulated_noise.json (every run's rows) and .png; docs/emulated_bcast.md reads them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpulab import host, stats  # noqa: E402
from gpulab.records import provenance  # noqa: E402

RESULTS = ROOT / "docs" / "results"
BENCH = ["gpulab", "bench", "bcast", "-n", "4", "--nodes", "4", "--link", "1gbit",
         "--algorithms", "chain,binomial,mpi,auto", "--sizes", "8M,32M", "--iters", "3", "--warmup", "1"]
LINK_BYTES_PER_S = 125e6  # 1 Gbit/s
CPU_KINDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_ticks() -> list[int]:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def one_run(mode: str, extra: list[str]) -> dict:
    """One bench command with the ranks waiting ``mode``'s way: its rows (ms), the CPU's split, the load."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        before, ticks, start = host.snapshot(4), cpu_ticks(), time.perf_counter()
        subprocess.run([*BENCH, *extra, "--json", str(out), "--quiet"], check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                       env={**os.environ, "GPULAB_BCAST_WAIT": mode})
        seconds = time.perf_counter() - start
        delta = [b - a for a, b in zip(ticks, cpu_ticks())]
        record = json.loads(out.read_text())
    rows = {f"{r['algorithm']} {r['nbytes'] >> 20}M": {"avg_ms": r["avg_us"] / 1e3, "max_ms": r["max_us"] / 1e3,
                                                        "rounds": r.get("rounds"), "stopped": r.get("stopped"),
                                                        "avg_interval_us": r.get("avg_interval_us")}
            for r in record["records"]}
    return {"mode": mode, "rows": rows, "seconds": round(seconds, 1), "load_before": before.load,
            "cpu": {kind: round(t / max(sum(delta), 1), 3) for kind, t in zip(CPU_KINDS, delta)},
            "bcast_wait": record["metadata"].get("bcast_wait")}


def summary(runs: list[dict], mode: str) -> dict:
    """Per mode: the chain at 32 MiB against one link transfer, slowest over fastest, the ratios' medians."""
    mine = [r for r in runs if r["mode"] == mode]
    link_ms = (32 << 20) / LINK_BYTES_PER_S * 1e3
    chain = [r["rows"]["chain 32M"]["avg_ms"] for r in mine]
    ratio = {name: stats.median_interval([r["rows"][f"{a} 32M"]["avg_ms"] / r["rows"][f"{b} 32M"]["avg_ms"]
                                          for r in mine]).to_dict()
             for name, (a, b) in {"chain/binomial 32M": ("chain", "binomial"), "auto/mpi 32M": ("auto", "mpi")}.items()}
    return {"runs": len(mine), "chain_32M_ms": chain, "link_transfer_ms": round(link_ms, 1),
            "chain_32M_over_link": [round(c / link_ms, 3) for c in chain],
            "slowest_over_fastest": round(max(chain) / min(chain), 3),
            "chain_32M_interval": stats.median_interval(chain).to_dict(), **ratio,
            "softirq_share": [r["cpu"]["softirq"] for r in mine], "idle_share": [r["cpu"]["idle"] for r in mine]}


def plot(runs: list[dict], modes: list[str], path: Path) -> None:
    from matplotlib.figure import Figure

    link_ms = (32 << 20) / LINK_BYTES_PER_S * 1e3
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    for k, mode in enumerate(modes):
        for j, name in enumerate(("chain", "binomial", "mpi", "auto")):
            values = [r["rows"][f"{name} 32M"]["avg_ms"] for r in runs if r["mode"] == mode]
            x = j * (len(modes) + 1) + k
            ax.scatter([x] * len(values), values, s=14, color=f"C{k}", label=mode if j == 0 else None)
    ax.axhline(link_ms, color="grey", lw=0.8, ls="--", label="one link transfer")
    ax.axhline(1.3 * link_ms, color="grey", lw=0.8, ls=":", label="1.3x one link transfer")
    ax.set_xticks([j * (len(modes) + 1) + (len(modes) - 1) / 2 for j in range(4)],
                  ["chain", "binomial", "MPI_Bcast", "auto"])
    ax.set_ylabel("ms per 32 MiB broadcast (avg over ranks)")
    ax.set_title("4 emulated nodes at 1 Gbit/s: every run, by how the ranks wait", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="nap=5,spin=3",
                        help="runs per way of waiting, taking turns (default nap=5,spin=3)")
    parser.add_argument("--rounds", type=int, help="rounds per run (default: the bench's own, until narrow)")
    parser.add_argument("--out", type=Path, default=RESULTS / "emulated_noise.json")
    args = parser.parse_args()
    counts = {mode: int(n) for mode, n in (part.split("=") for part in args.runs.split(","))}
    modes = list(counts)
    extra = ["--rounds", str(args.rounds)] if args.rounds else []
    runs = []
    for i in range(max(counts.values())):
        for mode in modes if i % 2 == 0 else modes[::-1]:
            if i >= counts[mode]:
                continue
            runs.append(one_run(mode, extra))
            run = runs[-1]
            print(f"run {i + 1}/{counts[mode]} {mode}: chain 32M {run['rows']['chain 32M']['avg_ms']:.1f} ms, "
                  f"softirq {run['cpu']['softirq']:.0%}, idle {run['cpu']['idle']:.0%}, "
                  f"load before {run['load_before']:.1f}", flush=True)
    record = {"provenance": provenance("the emulated cluster's run-to-run spread: the same gpulab bench bcast command "
                                       "run again and again, per way the ranks wait"),
              "bench_command": " ".join(BENCH + extra), "modes": modes, "runs": runs,
              "summary": {mode: summary(runs, mode) for mode in modes}}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    plot(runs, modes, args.out.with_suffix(".png"))
    print(json.dumps(record["summary"], indent=1))


if __name__ == "__main__":
    main()
