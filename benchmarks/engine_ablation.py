"""AxoNN's overlap ablation (baseline, +OAR, +ORS, +OAG): measured on 4 ranks here, predicted at scale.

    python benchmarks/engine_ablation.py run       # docs/results/engine_ablation_p4.json (a minute or two)
    python benchmarks/engine_ablation.py report    # its section of docs/engine_overlap.md + engine_ablation_p4.png

The AxoNN paper switches its overlaps on one after the other: OAR (the dX
all-reduce behind the dW matmul), then ORS (the dW reduce-scatter behind the
layers before), then OAG (the next layer's all-gather issued ahead). ``run``
times the same cumulative settings on the engine (``gpulab bench engine``,
interleaved rounds, the median over them with its interval, MPI_Test progress) on grids where each
switch has something to hide: (2, 1, 2, 1) (row and depth) and (1, 2, 2, 1)
(col and depth); and predicts them with the performance model for the 80B GPT
on 1024 Perlmutter GPUs at a grid with tensor parallelism (the model's best
such grid at a global batch of 512 sequences, ``gpulab model compare``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
OUT = RESULTS / "engine_ablation_p4.json"
sys.path.insert(0, str(ROOT))

from gpulab.engine.parallel.overlap import Overlap  # noqa: E402
from gpulab.stats import Interval  # noqa: E402

STEPS = [("baseline", "none"), ("+OAR", "oar"), ("+ORS", "oar,ors"), ("+OAG", "oar,ors,oag")]
SHAPES = "2,1,2,1;1,2,2,1"
AT_SCALE = {"model": "gpt-80b", "machine": "perlmutter", "shape": (8, 1, 8, 16), "batch": 512}


def predicted() -> list[dict]:
    from gpulab.engine.perf.machines import machine
    from gpulab.engine.perf.predict import gpt_config, predict

    cfg, m = gpt_config(AT_SCALE["model"]), machine(AT_SCALE["machine"])
    out = []
    for label, switches in STEPS:
        p = predict(cfg, AT_SCALE["shape"], AT_SCALE["batch"], m, Overlap.parse(switches), recompute=True,
                    flash_attention=True)
        out.append({"step": label, "overlap": switches, "iter_s": p["iter_s"], "exposed_comm_s": p["exposed_comm_s"],
                    "hidden_comm_s": p["hidden_comm_s"]})
    return out


def run(rounds: int = 5) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    raw = RESULTS / "engine_ablation.raw.json"
    cmd = [sys.executable, "-m", "gpulab.cli", "bench", "engine", "-n", "4", "--shapes", SHAPES,
           "--overlap", ";".join(s for _, s in STEPS), "--rounds", str(rounds), "--iters", "5", "--out", str(raw)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    load_before, start = os.getloadavg(), time.time()
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    rows = json.loads(raw.read_text())
    raw.unlink()
    from gpulab.records import provenance

    OUT.write_text(json.dumps({
        "provenance": provenance(__doc__, "python benchmarks/engine_ablation.py run"),
        "command": "python benchmarks/engine_ablation.py run  (runs: gpulab " + " ".join(cmd[3:-1])
                   + f" {raw.relative_to(ROOT)})",
        "date": time.strftime("%Y-%m-%d %H:%M"), "load_before": load_before, "load_after": os.getloadavg(),
        "seconds": time.time() - start, "measured": rows, "predicted": predicted(), "at_scale": AT_SCALE}, indent=1))
    print(f"wrote {OUT}")


TITLE = "## AxoNN's ablation: baseline, +OAR, +ORS, +OAG"
NEXT = "## What the numbers say"  # the section of docs/engine_overlap.md that follows this one


def section() -> str:
    """The ablation's section of docs/engine_overlap.md (markdown), from the recorded JSON."""
    data = json.loads(OUT.read_text())
    labels = {Overlap.parse(s).label(): step for step, s in STEPS}
    medians = all("iter_s_interval" in r for r in data["measured"])  # records of gpulab bench engine's medians
    lines = [f"\n{TITLE}\n",
             f"`{data['command']}` ({data['date']}, {data['seconds']:.0f} s, load average "
             f"{data['load_before'][0]:.1f} before, {data['load_after'][0]:.1f} after): the switches on one "
             "after the other as in the paper; ms per iteration, " + ("the median of " if medians else "best of ")
             + f"{len(data['measured'][0]['iter_s_rounds'])} interleaved rounds"
             + (" with its 95% interval" if medians else "") + " (every round in brackets), exposed "
             "and hidden communication of " + ("the median round" if medians else "that round")
             + ". With a load average far above the 2 cores, the rounds "
             "of one setting spread by 2x or more and the order of the rows is mostly scheduling: read "
             "the measured rows as what the switches do to exposed and hidden time, not as a ranking. "
             "![ablation](results/engine_ablation_p4.png)\n",
             "| grid | step | overlap | ms/iter (rounds) | vs baseline | exposed ms | hidden ms |",
             "|---|---|---|---|---|---|---|"]
    for shape in sorted({tuple(r["shape"]) for r in data["measured"]}):
        rows = [r for r in data["measured"] if tuple(r["shape"]) == shape]
        base = next(r for r in rows if r["overlap_label"] == "none")["iter_s"]
        for r in rows:
            rounds = ", ".join(f"{t * 1e3:.0f}" for t in r["iter_s_rounds"])
            kept = (Interval.from_dict(r["iter_s_interval"]).scaled(1e3).text() if medians
                    else f"{r['iter_s'] * 1e3:.1f}")
            lines.append(f"| {shape} | {labels[r['overlap_label']]} | {r['overlap_label']} | {kept} "
                         f"({rounds}) | {r['iter_s'] / base:.2f} | {r['summary']['exposed_comm_s'] * 1e3:.1f} | "
                         f"{r['summary']['hidden_comm_s'] * 1e3:.1f} |")
    pred, at = data["predicted"], data["at_scale"]
    lines += ["", f"Predicted by the performance model for {at['model']} on 1024 x {at['machine']}, grid "
              f"{tuple(at['shape'])}, global batch {at['batch']} x 2048 tokens, recomputation and flash attention "
              "(`gpulab model predict --mesh " + ",".join(map(str, at["shape"])) + f" --model {at['model']} "
              f"--batch-size {at['batch']} --overlap none|oar|oar,ors|oar,ors,oag`):\n",
              "| step | overlap | s/iter | vs baseline | exposed s | hidden s |", "|---|---|---|---|---|---|"]
    for p in pred:
        lines.append(f"| {p['step']} | {p['overlap']} | {p['iter_s']:.2f} | {p['iter_s'] / pred[0]['iter_s']:.2f} | "
                     f"{p['exposed_comm_s']:.2f} | {p['hidden_comm_s']:.2f} |")
    return "\n".join(lines) + "\n"


def plot() -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    data = json.loads(OUT.read_text())
    labels = {Overlap.parse(s).label(): step for step, s in STEPS}
    shapes = sorted({tuple(r["shape"]) for r in data["measured"]})
    fig = Figure(figsize=(10, 3.8))
    axes = fig.subplots(1, len(shapes) + 1)
    for ax, shape in zip(axes, shapes):
        rows = [r for r in data["measured"] if tuple(r["shape"]) == shape]
        ax.bar([labels[r["overlap_label"]] for r in rows], [r["iter_s"] * 1e3 for r in rows], color="#4c72b0")
        ax.set_title(f"measured, grid {shape}, 4 ranks", fontsize=9)
        ax.set_ylabel("ms per iteration")
    pred, at = data["predicted"], data["at_scale"]
    axes[-1].bar([p["step"] for p in pred], [p["iter_s"] for p in pred], color="#dd8452")
    axes[-1].set_title(f"predicted, {at['model']} on 1024 x {at['machine']}\ngrid {tuple(at['shape'])}, "
                       f"batch {at['batch']}", fontsize=9)
    axes[-1].set_ylabel("s per iteration")
    fig.tight_layout()
    fig.savefig(RESULTS / "engine_ablation_p4.png", dpi=110)


def report() -> None:
    """Draw the plot and put the section into docs/engine_overlap.md, before its closing section."""
    plot()
    doc = ROOT / "docs" / "engine_overlap.md"
    text = doc.read_text()
    if TITLE in text:  # replace the previous record
        text = text[:text.index("\n" + TITLE)] + text[text.index("\n" + NEXT):]
    at = text.index("\n" + NEXT)
    doc.write_text(text[:at] + section() + text[at:])
    print(f"wrote {doc.relative_to(ROOT)} and docs/results/engine_ablation_p4.png")


if __name__ == "__main__":
    {"run": run, "report": report}[sys.argv[1] if len(sys.argv) > 1 else "report"]()
