"""Native MPI_Bcast with and without the MPICH selection file that `gpulab tune bcast --export mpich` writes.

    python benchmarks/bcast_export.py            # 4 emulated nodes x 1 rank, 1 Gbit/s links (~15 min)

Step 1 tunes on the emulated cluster: MPICH's own algorithms, each forced in a
job of its own (``gpulab tune bcast --only-native --export mpich``). Step 2
times the plain MPI_Bcast (``gpulab bench bcast --algorithms mpi``) without
and with the file, in ROUNDS interleaved rounds (each point keeps its fastest
round: other jobs on the machine only add time). Writes
docs/results/bcast_export.json and .png and the selection file beside them;
prints whether the targets hold: at least 1.5x faster at 32 MiB, nowhere more
than 1.1x slower.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
SIZES = "1K,16K,256K,1M,4M,8M,32M"
CLUSTER = ["-n", "4", "--nodes", "4", "--link", "1gbit"]
ROUNDS = 3
SELECTION = RESULTS / "bcast_export_selection.json"


def gpulab(args: list[str], env: dict | None = None) -> None:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    print("$ gpulab " + " ".join(args) + "".join(f"  [{k}={v}]" for k, v in (env or {}).items()), flush=True)
    subprocess.run([sys.executable, "-m", "gpulab.cli", *args], check=True, env=full, cwd=ROOT)


def main() -> int:
    RESULTS.mkdir(parents=True, exist_ok=True)
    tune_json = RESULTS / "bcast_export_tune.json"
    gpulab(["tune", "bcast", *CLUSTER, "--sizes", SIZES, "--only-native", "--chunks", "64K,256K,1M",
            "--time-budget", "0.5", "--export", "mpich", str(SELECTION), "--json", str(tune_json), "--quiet"])
    best: dict = {"without": {}, "with": {}}
    for _ in range(ROUNDS):
        for label, env in (("without", {}), ("with", {"MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE": str(SELECTION)})):
            out = RESULTS / f"bcast_export_{label}.tmp.json"
            gpulab(["bench", "bcast", *CLUSTER, "--algorithms", "mpi", "--sizes", SIZES, "--iters", "10",
                    "--warmup", "2", "--time-budget", "3", "--quiet", "--json", str(out)], env)
            for r in json.loads(out.read_text())["records"]:
                assert r["valid"], r
                keep = best[label].get(r["nbytes"])
                best[label][r["nbytes"]] = min(r["avg_us"], keep) if keep else r["avg_us"]
            out.unlink()
    table = json.loads(tune_json.read_text())["4"]["native_table"]
    rows = [{"nbytes": n, "without_us": best["without"][n], "with_us": best["with"][n],
             "speedup": best["without"][n] / best["with"][n],
             "chosen": next(r["algorithm"] for r in table["ranges"]
                            if r["lo"] <= n and (r["hi"] is None or n < r["hi"]))}
            for n in sorted(best["without"])]
    ok = rows[-1]["speedup"] >= 1.5 and all(r["speedup"] >= 1 / 1.1 for r in rows)
    record = {"command": "python benchmarks/bcast_export.py", "cluster": "4 emulated nodes x 1 rank, 1 Gbit/s",
              "rounds": ROUNDS, "rows": rows, "targets_hold": ok, "load_after": os.getloadavg()}
    (RESULTS / "bcast_export.json").write_text(json.dumps(record, indent=1))
    print(f"{'size':>8} {'without (us)':>14} {'with (us)':>12} {'speed-up':>9}  chosen")
    for r in rows:
        print(f"{r['nbytes']:>8} {r['without_us']:14.1f} {r['with_us']:12.1f} {r['speedup']:9.2f}  {r['chosen']}")
    _plot(rows)
    print(f"targets (>= 1.5x at 32 MiB, nowhere slower than 1.1x): {'hold' if ok else 'DO NOT hold'}")
    return 0 if ok else 1


def _plot(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    sizes = [r["nbytes"] for r in rows]
    ax.loglog(sizes, [r["without_us"] for r in rows], "o-", label="MPI_Bcast, MPICH's own rules")
    ax.loglog(sizes, [r["with_us"] for r in rows], "s-", label="MPI_Bcast with the exported file")
    ax.set(xlabel="message size (bytes)", ylabel="time per call (us)", title="4 nodes x 1, 1 Gbit/s")
    ax.legend()
    bx.semilogx(sizes, [r["speedup"] for r in rows], "o-")
    bx.axhline(1.0, color="grey", lw=0.8)
    bx.set(xlabel="message size (bytes)", ylabel="speed-up (without / with)", title="what the file changes")
    fig.tight_layout()
    fig.savefig(RESULTS / "bcast_export.png", dpi=110)


if __name__ == "__main__":
    sys.exit(main())
