"""The scoreboard's claim (i): the broadcast paper's training result in miniature, on an emulated cluster.

    python benchmarks/emulated_training.py 4x1            # 4 nodes x 1 rank, 100 Mbit/s links
    python benchmarks/emulated_training.py 2x2 [LINK]     # 2 nodes x 2 ranks (LINK e.g. 1gbit)
    python benchmarks/emulated_training.py scale          # only the model at the paper's scale

Data-parallel training of the serial GPT (3.2 MB of float32 gradient) whose gradient
synchronisation is Reduce to rank 0 followed by a broadcast
(``gpulab.workloads.reduce_bcast_training``), once with MPI_Bcast and once with gpulab's
``auto``, which decides from the cost model fitted on the same cluster (as claim (d) of
emulated_bcast.py). Each step is split into compute / reduce / broadcast, with a barrier
between the phases so none absorbs another's waiting; the tables give the median over steps
(after WARMUP) of the slowest rank, with the 10-90% spread. Both runs must end
with bit-identical parameters. The model then predicts the same synchronisation at the paper's
scale (VGG-16's 138 M float32 gradients, up to 128 GPUs, 16 per node, profile "kesch").
Writes docs/results/emulated_training_<config>[_<link>].json and .png (the scale part:
emulated_training_scale.json/.png).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
sys.path.insert(0, str(ROOT))

import emulated_bcast  # noqa: E402  (the benchmark next to this one: its fit)

from gpulab.bcast.cost.link_floor import at_most_link_rate  # noqa: E402
from gpulab.emulated import EmulatedCluster  # noqa: E402
from gpulab.launch import inside_mpi_job, mpiexec_command  # noqa: E402

CONFIGS = {"4x1": (4, 1), "2x2": (2, 2)}
STEPS, WARMUP = 12, 2
BROADCASTS = ("mpi", "auto")
PAPER = dict(profile="kesch", network="vgg16", ranks=(16, 32, 64, 128), ranks_per_node=16)
PHASES = ("compute_s", "reduce_s", "bcast_s", "step_s")  # per rank and step, in seconds, as train() records them


def train_in_ranks(out: str, algorithm: str) -> None:
    """Inside the MPI job: train, then rank 0 writes every rank's records, the digest and auto's decision."""
    from mpi4py import MPI

    from gpulab.bcast.selection.auto import select
    from gpulab.workloads.reduce_bcast_training import train

    comm = MPI.COMM_WORLD
    params, records = train(comm, STEPS, algorithm, barriers=True)
    flat = np.concatenate([p.ravel() for p in params.values()])
    every = comm.gather(records)
    if comm.rank == 0:
        decision = select(flat.nbytes, comm) if algorithm == "auto" else None
        Path(out).write_text(json.dumps({
            "algorithm": algorithm, "gradient_bytes": flat.nbytes, "ranks": every,
            "digest": hashlib.sha256(flat.tobytes()).hexdigest(),
            "chose": decision and {"algorithm": decision.name, "options": decision.options,
                                   "reason": decision.reason}}))
    elif algorithm == "auto":
        select(flat.nbytes, comm)  # collective on some communicators: every rank takes part


def summarise(run: dict) -> dict:
    """Per phase: median, 10th and 90th percentile over steps of the slowest rank's time (ms)."""
    per_step = {ph: [] for ph in PHASES}
    for step in range(WARMUP, STEPS):
        rows = [ranks[step] for ranks in run["ranks"]]
        for ph in PHASES[:-1]:
            per_step[ph].append(max(r[ph] for r in rows))
        per_step["step_s"].append(max(r["compute_s"] + r["reduce_s"] + r["bcast_s"] for r in rows))
    return {ms_key(ph): {q: float(np.percentile(v, pct)) * 1e3 for q, pct in (("p10", 10), ("median", 50), ("p90", 90))}
            for ph, v in per_step.items()}


def ms_key(phase: str) -> str:
    """The summary's key for a phase: its unit is milliseconds ("step_s" -> "step_ms")."""
    return phase.removesuffix("_s") + "_ms"


def measure(nodes: int, rpn: int, link: str) -> dict:
    ranks = nodes * rpn
    with EmulatedCluster(nodes=nodes, ranks_per_node=rpn, link=link) as cluster, \
            tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        fit_out, tuning = os.path.join(tmp, "fit.json"), os.path.join(tmp, "tuning.json")
        print(f"fitting the cost model on {cluster.describe()}", flush=True)
        subprocess.run(mpiexec_command(ranks, [emulated_bcast.__file__, "fit", fit_out]), check=True, env=env,
                       cwd=ROOT)
        topology = cluster.topology(ranks)
        machine = at_most_link_rate(json.loads(Path(fit_out).read_text()), topology["link_bytes_per_s"])
        machine.get("notes", {}).pop("samples", None)
        Path(tuning).write_text(json.dumps({"version": 1, "models": {str(ranks): machine}, "tables": {}}))
        env["GPULAB_TUNING_TABLE"] = tuning
        runs = []
        for algorithm in BROADCASTS:
            out = os.path.join(tmp, f"{algorithm}.json")
            load_before = os.getloadavg()
            print(f"training {STEPS} steps on {ranks} ranks, broadcast {algorithm}", flush=True)
            subprocess.run(mpiexec_command(ranks, [__file__, "train", out, algorithm]), check=True, env=env,
                           cwd=ROOT, timeout=900)
            run = json.loads(Path(out).read_text())
            run.update(load_before=load_before, load_after=os.getloadavg(), summary=summarise(run))
            runs.append(run)
    if runs[0]["digest"] != runs[1]["digest"]:
        raise SystemExit("the two broadcasts trained different parameters: the synchronisation is wrong")
    from gpulab.records import provenance

    return {"provenance": provenance(__doc__, f"python benchmarks/emulated_training.py {nodes}x{rpn} {link}"),
            "command": f"python benchmarks/emulated_training.py {nodes}x{rpn} {link}", "topology": topology,
            "model": machine, "steps": STEPS, "warmup": WARMUP, "identical_parameters": True,
            "predicted_bcast_ms": predicted_bcast(machine, runs, ranks, topology), "runs": runs}


def predicted_bcast(machine: dict, runs: list[dict], p: int, topology: dict) -> dict:
    """The fitted model's time for each run's broadcast of the gradient (what auto chose, for auto)."""
    from gpulab.bcast.cost.hockney import Machine, predict

    m = Machine.from_dict(machine)
    out = {}
    for run in runs:
        name, options = (run["chose"]["algorithm"], run["chose"]["options"]) if run["chose"] else ("mpi", {})
        options = {k: v for k, v in options.items() if v is not None}
        out[run["algorithm"]] = predict(name, run["gradient_bytes"], p, m, **options) * 1e3
    return out


def at_scale() -> list[dict]:
    """The model's reduce + broadcast of VGG-16's gradient on the paper's machine, per GPU count."""
    from gpulab.bcast.cost.profiles import profile
    from gpulab.workloads import parameter_count
    from gpulab.workloads.gradient_sync import predicted_sync

    machine, nbytes = profile(PAPER["profile"]), parameter_count(PAPER["network"]) * 4
    return [{**predicted_sync(nbytes, p, machine), "nodes": -(-p // PAPER["ranks_per_node"])} for p in PAPER["ranks"]]


def _spread(summary: dict, phase: str) -> str:
    """A table cell: the phase's median with its 10th-90th percentile range, in ms."""
    s = summary[phase]
    return f"{s['median']:.0f} ({s['p10']:.0f}-{s['p90']:.0f})"


def tables(result: dict) -> str:
    lines = ["| broadcast | compute (ms) | reduce (ms) | broadcast (ms) | iteration (ms) | bcast predicted (ms) "
             "| load before, after |", "|---|---|---|---|---|---|---|"]
    for run in result["runs"]:
        s = run["summary"]
        name = f"auto ({run['chose']['algorithm']})" if run["chose"] else "MPI_Bcast"
        lines.append(f"| {name} | {_spread(s, 'compute_ms')} | {_spread(s, 'reduce_ms')} | {_spread(s, 'bcast_ms')} "
                     f"| {_spread(s, 'step_ms')} "
                     f"| {result['predicted_bcast_ms'][run['algorithm']]:.0f} "
                     f"| {run['load_before'][0]:.1f}, {run['load_after'][0]:.1f} |")
    mpi, auto = (r["summary"]["step_ms"]["median"] for r in result["runs"])
    lines.append(f"\niteration with auto / with MPI_Bcast: {auto / mpi:.2f}")
    return "\n".join(lines)


def scale_table(rows: list[dict]) -> str:
    lines = ["| GPUs | nodes | reduce (ms) | MPI_Bcast's choice | its time (ms) | tuned choice | its time (ms) "
             "| reduce + bcast saved |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['p']} | {r['nodes']} | {r['reduce_ms']:.0f} | {r['mpi_algorithm']} "
                     f"| {r['mpi_bcast_ms']:.0f} | {r['tuned_algorithm']} | {r['tuned_bcast_ms']:.0f} "
                     f"| {r['sync_saving']:.1%} |")
    return "\n".join(lines)


def plot(results: list[dict], scale: list[dict], path: Path) -> None:
    """Stacked bars per broadcast (compute, reduce, broadcast; medians) for each measured config,
    and the model's reduce + broadcast at the paper's scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results) + 1, figsize=(4.5 * (len(results) + 1), 4.2), squeeze=False)
    for ax, result in zip(axes[0], results):
        names = [f"auto\n({r['chose']['algorithm']})" if r["chose"] else "MPI_Bcast" for r in result["runs"]]
        bottom = np.zeros(len(names))
        for ph, label in (("compute_ms", "compute"), ("reduce_ms", "reduce"), ("bcast_ms", "broadcast")):
            values = np.array([r["summary"][ph]["median"] for r in result["runs"]])
            ax.bar(names, values, bottom=bottom, label=label)
            bottom += values
        step = [r["summary"]["step_ms"] for r in result["runs"]]
        ax.errorbar(names, [s["median"] for s in step], fmt="none", color="black", capsize=4,
                    yerr=[[s["median"] - s["p10"] for s in step], [s["p90"] - s["median"] for s in step]])
        t = result["topology"]
        ax.set(ylabel="ms per iteration (median of slowest rank)",
               title=f"{t['nodes']} nodes x {t['ranks_per_node']}, {t['link']}")
        ax.legend(fontsize=7)
    ax = axes[0][-1]
    ps = [r["p"] for r in scale]
    ax.plot(ps, [r["reduce_ms"] + r["mpi_bcast_ms"] for r in scale], "o-", label="reduce + MPI_Bcast's choice")
    ax.plot(ps, [r["reduce_ms"] + r["tuned_bcast_ms"] for r in scale], "s-", label="reduce + tuned broadcast")
    ax.set(xscale="log", xlabel="GPUs (16 per node)", ylabel="reduce + broadcast per iteration (ms, model)",
           title=f"model: VGG-16 gradient, profile {PAPER['profile']}", ylim=(0, None))
    ax.minorticks_off()
    ax.set_xticks(ps, [str(p) for p in ps])
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str]) -> int:
    if argv[:1] == ["train"]:
        assert inside_mpi_job()
        train_in_ranks(argv[1], argv[2])
        return 0
    if not argv or argv[0] not in (*CONFIGS, "scale") or len(argv) > 2:
        print(f"usage: emulated_training.py {{{','.join(CONFIGS)},scale}} [LINK, default 100mbit]", file=sys.stderr)
        return 2
    scale = at_scale()
    from gpulab.records import provenance

    header = provenance(__doc__, "python benchmarks/emulated_training.py scale")
    (RESULTS / "emulated_training_scale.json").write_text(json.dumps({"provenance": header, "paper": PAPER,
                                                                     "rows": scale}, indent=1))
    print(scale_table(scale))
    results = []
    if argv[0] != "scale":
        link = argv[1] if len(argv) == 2 else "100mbit"
        name = f"emulated_training_{argv[0]}" + ("" if link == "100mbit" else f"_{link}")
        results.append(measure(*CONFIGS[argv[0]], link))
        (RESULTS / f"{name}.json").write_text(json.dumps(results[0], indent=1))
        print(tables(results[0]))
        plot(results, scale, RESULTS / f"{name}.png")
    else:
        plot([], scale, RESULTS / "emulated_training_scale.png")
    print("wrote docs/results/emulated_training_*.json and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
