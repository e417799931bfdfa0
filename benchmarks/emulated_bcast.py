"""Broadcast on an emulated cluster: measured (max over ranks) beside the two-level model's prediction.

    python benchmarks/emulated_bcast.py crossover     # 4 nodes x 1 rank, 1 Gbit/s: chain, binomial,
                                                      # scatter-allgather, MPI_Bcast vs size
    python benchmarks/emulated_bcast.py placement     # 4 nodes x 2 ranks: flat binomial vs hierarchical,
                                                      # block vs round-robin, chain between nodes

Each experiment brings up its own EmulatedCluster (root or user namespaces), fits the cost
model there by ping-pong (two levels: inside a node, between nodes), measures with
``gpulab bench bcast`` and writes docs/results/emulated_<experiment>.json and .png.
The load average before and after is recorded: other jobs may share the cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
sys.path.insert(0, str(ROOT))

from gpulab.emulated import EmulatedCluster  # noqa: E402
from gpulab.launch import inside_mpi_job, mpiexec_command  # noqa: E402

FIT_SIZES = [8, 1024, 16384, 65536, 262144, 1 << 20, 4 << 20]
EXPERIMENTS = {
    "crossover": dict(nodes=4, ranks=4, placement="block", link="1gbit",
                      sizes="16K,256K,1M,4M,8M,32M", algorithms="chain,binomial,scatter_allgather_ring,mpi",
                      variants=[{}]),
    "placement": dict(nodes=4, ranks=8, placement=None, link="1gbit", sizes="1M,8M,32M",
                      algorithms="binomial,hierarchical,mpi",
                      variants=[{"placement": "block"}, {"placement": "round-robin"}]),
}


def fit_in_ranks(out: str) -> None:
    """Inside the MPI job: the two-level fit, written by rank 0."""
    from mpi4py import MPI

    from gpulab.bcast import experiments

    machine = experiments.fit(MPI.COMM_WORLD, FIT_SIZES, time_budget=0.01)
    if MPI.COMM_WORLD.rank == 0:
        Path(out).write_text(json.dumps(machine))


def predictions(machine: dict, records: list[dict]) -> None:
    from gpulab.bcast.model import Machine, predict

    m = Machine.from_dict(machine)
    for r in records:
        options = {k: v for k, v in (r.get("options") or {}).items() if v is not None}
        try:
            r["predicted_us"] = predict(r["algorithm"], r["nbytes"], r["p"], m, **options) * 1e6
        except (TypeError, ValueError):
            r["predicted_us"] = None


def measure(nodes: int, ranks: int, placement: str, link: str, sizes: str, algorithms: str,
            extra: list[str] = ()) -> dict:
    load_before = os.getloadavg()
    with EmulatedCluster(nodes=nodes, link=link, placement=placement) as cluster, \
            tempfile.TemporaryDirectory() as tmp:
        # inside the block: $GPULAB_CLUSTER sends the bench's own mpiexec to the cluster too
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        fit_out, bench_out = os.path.join(tmp, "fit.json"), os.path.join(tmp, "bench.json")
        # the fit on two ranks of node 1 and one of node 2 would miss round-robin's layout: fit on
        # the same ranks and placement the broadcast uses
        subprocess.run(mpiexec_command(ranks, [__file__, "fit", fit_out]), check=True, env=env, cwd=ROOT)
        command = [sys.executable, "-m", "gpulab.cli", "bench", "bcast", "-n", str(ranks), "--sizes", sizes,
                   "--algorithms", algorithms, "--iters", "5", "--warmup", "1", "--time-budget", "3",
                   "--quiet", "--json", bench_out, *extra]
        subprocess.run(command, check=True, env=env, cwd=ROOT)
        machine = json.loads(Path(fit_out).read_text())
        bench = json.loads(Path(bench_out).read_text())
        topology = cluster.topology(ranks)
    assert bench["metadata"]["emulated"], "the bench did not run on the emulated cluster"
    machine.get("notes", {}).pop("samples", None)
    predictions(machine, bench["records"])
    bench["metadata"].update(load_before=load_before, load_after=os.getloadavg())
    return {"command": " ".join(["gpulab bench bcast"] + command[5:]), "topology": topology,
            "metadata": bench["metadata"], "model": machine, "records": bench["records"]}


def table(runs: list[dict]) -> str:
    from gpulab.bcast.sizes import format_size

    lines = ["| placement | algorithm | size | measured max over ranks (ms) | predicted (ms) "
             "| one link transfer (ms) |",
             "|---|---|---|---|---|---|"]
    for run in runs:
        rate = run["topology"]["link_bytes_per_s"]
        for r in run["records"]:
            pred = f"{r['predicted_us'] / 1e3:.1f}" if r.get("predicted_us") else "-"
            lines.append(f"| {run['topology']['placement']} | {r['algorithm']} | {format_size(r['nbytes'])} | "
                         f"{r['max_us'] / 1e3:.1f} | {pred} | {r['nbytes'] / rate * 1e3:.1f} |")
    return "\n".join(lines)


def plot(runs: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4.2), squeeze=False)
    for ax, run in zip(axes[0], runs):
        algorithms = list(dict.fromkeys(r["algorithm"] for r in run["records"]))
        for i, name in enumerate(algorithms):
            rows = sorted((r for r in run["records"] if r["algorithm"] == name), key=lambda r: r["nbytes"])
            x = [r["nbytes"] for r in rows]
            line, = ax.plot(x, [r["max_us"] / 1e3 for r in rows], "o-", label=f"{name} measured")
            if any(r.get("predicted_us") for r in rows):
                ax.plot(x, [(r.get("predicted_us") or float("nan")) / 1e3 for r in rows], "--",
                        color=line.get_color(), label=f"{name} predicted")
        rate = run["topology"]["link_bytes_per_s"]
        xs = sorted({r["nbytes"] for r in run["records"]})
        ax.plot(xs, [x / rate * 1e3 for x in xs], ":", color="black", label="one link transfer")
        ax.set(xscale="log", yscale="log", xlabel="message size (bytes)", ylabel="time (ms, max over ranks)",
               title=f"{run['topology']['nodes']} nodes x {run['topology']['ranks_per_node']}, "
                     f"{run['topology']['placement']}, {run['topology']['link']}")
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str]) -> int:
    if argv[0] == "fit":
        assert inside_mpi_job()
        fit_in_ranks(argv[1])
        return 0
    name = argv[0]
    spec = EXPERIMENTS[name]
    runs = []
    for variant in spec["variants"]:
        placement = variant.get("placement", spec["placement"])
        runs.append(measure(spec["nodes"], spec["ranks"], placement, spec["link"], spec["sizes"],
                            spec["algorithms"]))
    out = RESULTS / f"emulated_{name}.json"
    out.write_text(json.dumps(runs, indent=1))
    plot(runs, RESULTS / f"emulated_{name}.png", f"broadcast on an emulated cluster ({name})")
    print(table(runs))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
