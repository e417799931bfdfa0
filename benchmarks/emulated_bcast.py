"""The broadcast paper's experiments on an emulated cluster: measured (max over ranks) beside the model.

    python benchmarks/emulated_bcast.py crossover   # (a) 4 nodes x 1, 1 Gbit/s: chain, binomial,
                                                    #     scatter-allgather, MPI_Bcast against size
    python benchmarks/emulated_bcast.py chunks      # (b) 4 nodes x 1: the chain's chunk size scanned
                                                    #     at 32 MiB against the model's best chunk
    python benchmarks/emulated_bcast.py placement   # (c) 4 nodes x 2: flat binomial vs hierarchical
                                                    #     (binomial or chain between nodes), block vs round-robin
    python benchmarks/emulated_bcast.py placement_2x2  # 2 nodes x 2, p < 8: MPI_Bcast's node-aware
                                                    #     composition against flat binomial and hierarchical
    python benchmarks/emulated_bcast.py auto        # (d) 4 nodes x 1: `auto` (fitted model) vs MPI_Bcast
    python benchmarks/emulated_bcast.py tuned       # (d) the same, `auto` from a table that
                                                    #     `gpulab tune bcast` measured on the cluster (~7 min)

Each experiment brings up its own EmulatedCluster (root or user namespaces), fits the cost
model there by ping-pong (two levels: inside a node, between nodes), measures every point of
its ``runs`` in ``ROUNDS`` interleaved rounds, the order turning each round (the scoreboard's
``times`` job, ``gpulab.scoreboard.on_ranks``: ``measure_bcast`` as ``gpulab bench bcast``
calls it), and writes docs/results/emulated_<experiment>.json and .png. Each record's
``max_us`` is the median over rounds of the slowest rank's mean time and ``max_us_rounds``
every round's, from which the scoreboard draws intervals and paired ratios. The load
average before and after the job is recorded: other jobs may share the cores.
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

from gpulab.bcast.cost.link_floor import at_most_link_rate  # noqa: E402
from gpulab.bcast.measurement.measure import applicable_options  # noqa: E402
from gpulab.emulated import EmulatedCluster  # noqa: E402
from gpulab.engine.perf.trust import cpu_ticks, stolen  # noqa: E402
from gpulab.launch import inside_mpi_job, mpiexec_command  # noqa: E402
from gpulab.records import metadata as run_metadata  # noqa: E402
from gpulab.stats import median_interval  # noqa: E402

FIT_SIZES = [8, 1024, 16384, 65536, 262144, 1 << 20, 4 << 20]
K, M = 1 << 10, 1 << 20
ROUNDS = 6  # per point: the fewest samples whose range holds the median with 95% (order statistics)
BENCH = {"iters": 5, "warmup": 1, "time_budget": 3.0, "rounds": ROUNDS}  # per point and round
FLAT = ["chain", "binomial", "scatter_allgather_ring", "mpi"]
LARGE = [M, 8 * M, 32 * M]
EXPERIMENTS = {
    "crossover": dict(nodes=4, ranks=4, link="1gbit", placements=["block"], x="size",
                      runs=[dict(sizes=[64 * K, 256 * K, M, 4 * M, 8 * M, 32 * M], algorithms=FLAT,
                                 options={"chunk_bytes": 256 * K})]),
    "chunks": dict(nodes=4, ranks=4, link="1gbit", placements=["block"], x="chunk",
                   runs=[dict(sizes=[32 * M], algorithms=["chain"], options={"chunk_bytes": c})
                         for c in (16 * K, 64 * K, 256 * K, M, 4 * M)]),
    "placement": dict(nodes=4, ranks=8, link="1gbit", placements=["block", "round-robin"], x="size",
                      runs=[dict(sizes=LARGE, algorithms=["binomial", "hierarchical", "mpi"], options={}),
                            dict(sizes=LARGE, algorithms=["hierarchical"],
                                 options={"inter": "chain", "inter_options": {"chunk_bytes": 256 * K}})]),
    "placement_2x2": dict(nodes=2, ranks=4, link="1gbit", placements=["block", "round-robin"], x="size",
                          runs=[dict(sizes=[M, 8 * M], algorithms=["binomial", "hierarchical", "mpi"], options={})]),
    "auto": dict(nodes=4, ranks=4, link="1gbit", placements=["block"], x="size",
                 runs=[dict(sizes=LARGE, algorithms=["auto", "mpi"], options={})]),
    "tuned": dict(nodes=4, ranks=4, link="1gbit", placements=["block"], x="size", tune="1M,8M,32M",
                  runs=[dict(sizes=LARGE, algorithms=["auto", "mpi"], options={})]),
}
TUNE = ["--time-budget", "2", "--no-fit"]  # the table's decisions; the model is the one fitted above


def fit_in_ranks(out: str) -> None:
    """Inside the MPI job: the two-level fit, written by rank 0."""
    from mpi4py import MPI

    from gpulab.bcast.measurement import experiments

    machine = experiments.fit(MPI.COMM_WORLD, FIT_SIZES, time_budget=0.01)
    if MPI.COMM_WORLD.rank == 0:
        Path(out).write_text(json.dumps(machine))


def label(record: dict) -> str:
    """The algorithm with what distinguishes it: auto's choice, hierarchical's inter level, a chunk size."""
    from gpulab.bcast.sizes import format_size

    options = record.get("options") or {}
    if "chose" in record:
        return f"auto ({record['chose']['algorithm']}, {record['chose']['source']})"
    if record["algorithm"] == "hierarchical":
        inter = options.get("inter", "binomial")
        chunk = (options.get("inter_options") or {}).get("chunk_bytes")
        return f"hierarchical, {inter} between nodes" + (f" {format_size(chunk)}" if chunk else "")
    chunk = options.get("chunk_bytes")
    return record["algorithm"] + (f" {format_size(chunk)}" if chunk and record["algorithm"] == "chain" else "")


def predictions(machine: dict, records: list[dict], rank_nodes: list[int]) -> None:
    """Each record's predicted time (what auto chose, for auto), by the model fitted on the same cluster,
    with each message of a flat tree or chain priced at the link its ranks' placement gives it."""
    from gpulab.bcast.cost.hockney import Machine, predict

    m = Machine.from_dict(machine)
    for r in records:
        name, options = (r["chose"]["algorithm"], r["chose"]["options"]) if "chose" in r else \
            (r["algorithm"], r.get("options") or {})
        options = {k: v for k, v in options.items() if v is not None and k not in ("path", "staging_chunk_bytes")}
        try:
            r["predicted_us"] = predict(name, r["nbytes"], r["p"], m, rank_nodes=rank_nodes, **options) * 1e6
        except (TypeError, ValueError):
            r["predicted_us"] = None
        r["label"] = label(r)


def measure(spec: dict, placement: str) -> dict:
    with EmulatedCluster(nodes=spec["nodes"], link=spec["link"], placement=placement) as cluster, \
            tempfile.TemporaryDirectory() as tmp:
        # inside the block: $GPULAB_CLUSTER sends the bench's own mpiexec to the cluster too
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        fit_out, tuning = os.path.join(tmp, "fit.json"), os.path.join(tmp, "tuning.json")
        # the fit on two ranks of node 1 and one of node 2 would miss round-robin's layout: fit on
        # the same ranks and placement the broadcast uses
        ranks = spec["ranks"]
        subprocess.run(mpiexec_command(ranks, [__file__, "fit", fit_out]), check=True, env=env, cwd=ROOT)
        machine = at_most_link_rate(json.loads(Path(fit_out).read_text()), cluster.topology(ranks)["link_bytes_per_s"])
        # auto decides from this cluster's fit (the "model" source of gpulab.bcast.selection.auto)
        Path(tuning).write_text(json.dumps({"version": 1, "models": {str(ranks): machine}, "tables": {}}))
        env["GPULAB_TUNING_TABLE"] = tuning
        commands = []
        if spec.get("tune"):  # the autotuner measures every algorithm here and writes auto's table
            command = [sys.executable, "-m", "gpulab.cli", "tune", "bcast", "-n", str(ranks), "--sizes",
                       spec["tune"], *TUNE, "--quiet"]
            subprocess.run(command, check=True, env=env, cwd=ROOT)
            commands.append(" ".join(["gpulab tune bcast"] + command[5:-1]))
        points = [[a, n, applicable_options(a, run["options"])]
                  for run in spec["runs"] for n in run["sizes"] for a in run["algorithms"]]
        args, out = json.dumps({"points": points, **BENCH}), os.path.join(tmp, "times.json")
        load_before, ticks = os.getloadavg(), cpu_ticks()
        subprocess.run(mpiexec_command(ranks, ["-m", "gpulab.scoreboard.on_ranks", "times", args, out]), check=True,
                       env=env, cwd=ROOT)
        steal = stolen(ticks)
        records = [{**r, "load_before": load_before, "load_after": os.getloadavg(), "cpu_steal": steal}
                   for r in json.loads(Path(out).read_text())]
        commands.append(f"python -m gpulab.scoreboard.on_ranks times ({len(points)} points, {BENCH['rounds']} "
                        f"rounds of {BENCH['iters']} timed broadcasts after {BENCH['warmup']} warm-up)")
        print(f"{commands[-1]}: load {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}, "
              f"{steal:.0%} of the CPU time stolen by the hypervisor", flush=True)
        metadata = {**run_metadata(ranks), **cluster.topology(ranks), "emulated": True, "rounds": BENCH["rounds"]}
        topology = cluster.topology(ranks)
    machine.get("notes", {}).pop("samples", None)
    predictions(machine, records, metadata["rank_nodes"])
    return {"commands": commands, "topology": topology, "metadata": metadata, "model": machine, "records": records}


def table(runs: list[dict]) -> str:
    from gpulab.bcast.sizes import format_size

    lines = ["| placement | algorithm | size | measured max over ranks (ms): median [95% interval] over rounds "
             "| predicted (ms) | one link transfer (ms) | load before, after |",
             "|---|---|---|---|---|---|---|"]
    for run in runs:
        rate = run["topology"]["link_bytes_per_s"]
        for r in run["records"]:
            pred = f"{r['predicted_us'] / 1e3:.1f}" if r.get("predicted_us") else "-"
            measured = median_interval(r.get("max_us_rounds") or [r["max_us"]]).scaled(1e-3).text()
            lines.append(f"| {run['topology']['placement']} | {r['label']} | {format_size(r['nbytes'])} | "
                         f"{measured} | {pred} | {r['nbytes'] / rate * 1e3:.1f} | "
                         f"{r['load_before'][0]:.1f}, {r['load_after'][0]:.1f} |")
    return "\n".join(lines)


def plot(runs: list[dict], path: Path, title: str, x_axis: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4.2), squeeze=False)
    for ax, run in zip(axes[0], runs):
        key = (lambda r: r["options"]["chunk_bytes"]) if x_axis == "chunk" else (lambda r: r["nbytes"])
        series = {}  # one line per algorithm; in the chunk scan the chunk is the x axis, not part of the name
        for r in run["records"]:
            series.setdefault(r["algorithm"] if x_axis == "chunk" else r["label"], []).append(r)
        for name, rows in series.items():
            rows.sort(key=key)
            x = [key(r) for r in rows]
            spans = [median_interval(r.get("max_us_rounds") or [r["max_us"]]).scaled(1e-3) for r in rows]
            line, = ax.plot(x, [r["max_us"] / 1e3 for r in rows], "o-", label=f"{name} measured")
            ax.fill_between(x, [s.low for s in spans], [s.high for s in spans], color=line.get_color(), alpha=0.2)
            if any(r.get("predicted_us") for r in rows):
                ax.plot(x, [(r.get("predicted_us") or float("nan")) / 1e3 for r in rows], "--",
                        color=line.get_color(), label=f"{name} predicted")
        rate = run["topology"]["link_bytes_per_s"]
        xs = sorted({key(r) for r in run["records"]})
        ax.plot(xs, [(x if x_axis == "size" else run["records"][0]["nbytes"]) / rate * 1e3 for x in xs], ":",
                color="black", label="one link transfer")
        if x_axis == "chunk" and run.get("best_chunk"):
            ax.axvline(run["best_chunk"], color="gray", lw=0.8, label="model's best chunk")
        ax.set(xscale="log", yscale="log", xlabel="message size (bytes)" if x_axis == "size" else "chunk (bytes)",
               ylabel="time (ms, max over ranks)",
               title=f"{run['topology']['nodes']} nodes x {run['topology']['ranks_per_node']}, "
                     f"{run['topology']['placement']}, {run['topology']['link']}")
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str]) -> int:
    if argv[:1] == ["fit"]:
        assert inside_mpi_job()
        fit_in_ranks(argv[1])
        return 0
    if len(argv) not in (1, 2) or argv[0] not in EXPERIMENTS:
        print(f"usage: emulated_bcast.py {{{','.join(EXPERIMENTS)}}} [LINK, e.g. 100mbit]", file=sys.stderr)
        return 2
    spec = dict(EXPERIMENTS[argv[0]])
    name = argv[0] if len(argv) == 1 else f"{argv[0]}_{argv[1]}"
    spec["link"] = argv[1] if len(argv) == 2 else spec["link"]
    runs = [measure(spec, placement) for placement in spec["placements"]]
    if spec["x"] == "chunk":
        from gpulab.bcast.cost.hockney import Machine, best_chunk

        for run in runs:
            nbytes, p = run["records"][0]["nbytes"], run["records"][0]["p"]
            run["best_chunk"] = best_chunk("chain", nbytes, p, Machine.from_dict(run["model"]))
            print(f"model's best chunk at {nbytes} B: {run['best_chunk']} B")
    out = RESULTS / f"emulated_{name}.json"
    out.write_text(json.dumps(runs, indent=1))
    from gpulab.records import write_sidecar

    write_sidecar(out, f"{name}: {__doc__}", f"python benchmarks/emulated_bcast.py {' '.join(argv)}")
    plot(runs, RESULTS / f"emulated_{name}.png", f"broadcast on an emulated cluster ({name})", spec["x"])
    print(table(runs))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
