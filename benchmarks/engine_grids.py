"""Every grid shape of 4 and 8 ranks, overlap off and on, measured, with the model's prediction beside.

    python benchmarks/engine_grids.py run --world 4       # fit + measure: docs/results/engine_grid_p4.json
    python benchmarks/engine_grids.py run --world 8       # (each run stays under 10 minutes on 2 cores)
    python benchmarks/engine_grids.py run --world 4 --out docs/results/engine_accuracy_1x4_machine_run1.json
    python benchmarks/engine_grids.py report              # docs/engine_bench.md + docs/engine_perfmodel.md

``run`` fits the performance model to this machine on the same number of
ranks (``gpulab.engine.perf.fitted_machine``: microbenchmarks, and on one node one
calibration grid that the scoring leaves out) before and after timing every grid shape of the world size with
overlap off and on (``gpulab.engine.perf.timing`` in interleaved rounds, the scoreboard's ``engine`` job
``gpulab.scoreboard.on_ranks``: each row's ``iter_s`` and timeline times are medians over rounds, with
``iter_s_interval`` the 95% interval of the median and ``rounds`` every round's times);
the load of other jobs moves, so the model uses the mean of the two fits. ``report`` renders both world sizes: the
iteration table (benchmark record) and the model's validation (rank
correlation, whether the model's first pick is within 10% of the measured
best). The load average before and after each run is recorded: other jobs
share these cores.
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
sys.path.insert(0, str(ROOT))

from gpulab.engine.perf.calibration import calibrated_on  # noqa: E402
from gpulab.engine.perf.fitted_machine import FittedMachine  # noqa: E402
from gpulab.engine.perf.pick_validation import validate  # noqa: E402
from gpulab.launch import mpiexec_command  # noqa: E402
from gpulab.machines import Description  # noqa: E402

SETTINGS = {"none": "overlap off", "all": "overlap on (all four, MPI_Test progress)"}


def predict_row(row: dict, machine) -> dict:
    """The model's prediction for one measured row of ``gpulab bench engine`` (its config, shape, batch
    size, overlap and sequence length) on a fitted ``machine``."""
    from gpulab.engine import GPTConfig
    from gpulab.engine.parallel.overlap import Overlap
    from gpulab.engine.perf.predict import predict

    cfg = GPTConfig.from_dict(row["config"])
    return predict(cfg, row["shape"], row["batch_size"], machine, Overlap.from_dict(row["overlap"]),
                   seq_len=row.get("seq_len") or cfg.block_size)


def run(args) -> None:
    from gpulab.engine.perf.machines import machine as engine_machine

    RESULTS.mkdir(parents=True, exist_ok=True)
    p = args.world
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    load_before, start = os.getloadavg(), time.time()
    machine_path = RESULTS / f"engine_machine_p{p}.json"
    fits = []

    def fit_once():
        path = RESULTS / f"engine_machine_p{p}.fit{len(fits)}.json"
        subprocess.run(mpiexec_command(p, ["-m", "gpulab.cli", "model", "fit", "--out", str(path)]),
                       check=True, env=env, stdout=subprocess.DEVNULL)
        fits.append(engine_machine(path))
        path.unlink()

    fit_once()
    raw = RESULTS / f"engine_grid_p{p}.raw.json"
    rounds = json.dumps({"shapes": "all", "overlaps": ["none", "all"], "batch_size": 16, "iters": args.iters,
                         "rounds": args.rounds, "warmup": 2})
    subprocess.run(mpiexec_command(p, ["-m", "gpulab.scoreboard.on_ranks", "engine", rounds, str(raw)]), check=True,
                   env=env)
    fit_once()
    machine = FittedMachine.mean(fits)
    machine.save(machine_path)
    rows = json.loads(raw.read_text())
    raw.unlink()
    left_out = calibrated_on(machine)  # the grids the fit measured itself: left out of the error
    for r in rows:
        pred = predict_row(r, machine)
        r["prediction"] = {k: pred[k] for k in ("iter_s", "compute_s", "exposed_comm_s", "hidden_comm_s")}
        r.pop("per_rank", None)
    from gpulab.records import provenance

    command = (f"python benchmarks/engine_grids.py run --world {p} --iters {args.iters} --rounds {args.rounds}"
               + (f" --out {args.out}" if args.out else ""))
    out = {"provenance": provenance(__doc__, command), "world": p, "command": command,
           "cpus": os.cpu_count(),
           "load_before": load_before, "load_after": os.getloadavg(), "minutes": (time.time() - start) / 60,
           "date": time.strftime("%Y-%m-%d %H:%M"), "machine": json.loads(machine_path.read_text()),
           "fits": [{"share": f.share, "sources": f.sources["measured"]} for f in fits],
           "rows": rows, "validation": {s: validate([r for r in rows if r["overlap_label"] == label], left_out)
                                        for s, label in (("none", "none"),
                                                         ("all", "oar+ors+oag+cache+buckets"))}}
    (Path(args.out) if args.out else RESULTS / f"engine_grid_p{p}.json").write_text(json.dumps(out, indent=1))
    for s, v in out["validation"].items():
        print(f"p={p} {s}: spearman {v['spearman']:.2f}, model's pick {v['model_pick']} "
              f"{v['pick_over_best']:.2f}x the measured best {v['measured_best']}")


def _ms(x: float) -> str:
    return f"{x * 1e3:.1f}"


def report(args) -> None:
    runs = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("engine_grid_p*.json"))]
    medians = all("iter_s_interval" in r for run_ in runs for r in run_["rows"])  # gpulab bench engine's medians
    bench = [BENCH_HEAD.replace("ROUNDS_KEPT", "the median over several interleaved rounds, with its 95% interval in "
                                "brackets" if medians else "in the best of several interleaved rounds (records "
                                "made before the bench reported medians)")]
    model = [MODEL_HEAD]
    for run_ in runs:
        p = run_["world"]
        m = vars(FittedMachine.from_description(Description.from_dict(run_["machine"], f"engine_grid_p{p}.json")))
        load = f"load average {run_['load_before'][0]:.1f} before, {run_['load_after'][0]:.1f} after"
        bench.append(f"\n## {p} ranks\n\n`{run_['command']}` ({run_['date']}, {run_['minutes']:.1f} min, "
                     f"{load}; model {runs[0]['rows'][0]['config']}, batch {run_['rows'][0]['batch_size']} x "
                     f"{run_['rows'][0]['seq_len']} tokens, float32, 1 BLAS thread per rank)\n")
        bench.append("| grid (R, C, D, P) | off: ms/iter | off: exposed comm | on: ms/iter | on: exposed | "
                     "on: hidden | on/off | model off | model on | tokens/s (off) | MFU (off) |")
        bench.append("|---|---|---|---|---|---|---|---|---|---|---|")
        by = {}
        for r in run_["rows"]:
            by.setdefault(tuple(r["shape"]), {})["off" if r["overlap_label"] == "none" else "on"] = r
        for shape, d in sorted(by.items(), key=lambda kv: kv[1]["off"]["iter_s"]):
            off, on = d["off"], d["on"]
            share = lambda r: (f"{_ms(r['summary']['exposed_comm_s'])} "  # noqa: E731
                               f"({r['summary']['exposed_comm_s'] / r['summary']['wall_s']:.0%})")
            time = lambda r: _ms(r["iter_s"]) + (  # noqa: E731
                f" [{_ms(r['iter_s_interval']['low'])}, {_ms(r['iter_s_interval']['high'])}]" if medians else "")
            bench.append(f"| {shape} | {time(off)} | {share(off)} | {time(on)} | {share(on)} | "
                         f"{_ms(on['summary']['hidden_comm_s'])} | {on['iter_s'] / off['iter_s']:.2f} | "
                         f"{_ms(off['prediction']['iter_s'])} | {_ms(on['prediction']['iter_s'])} | "
                         f"{off['tokens_per_s']:.0f} | {off['model_flops'] / off['iter_s'] / m['machine_peak']:.1%} |")
        model.append(f"\n## {p} ranks ({run_['date']}, {load})\n")
        model.append("Fits before and after the measurement (averaged): " + "; ".join(
            f"share {f['share']:.1f}x ({f['sources']})" for f in run_["fits"]) + "\n")
        model.append(f"Fitted machine: compute share {m['share']:.1f}x, matmul {m['matmul_rate'] / 1e9:.0f} "
                     f"GFLOP/s per rank alone, overlap efficiency {m['overlap']}; collectives (alpha us, GB/s): "
                     + ", ".join(f"{k} {a * 1e6:.0f}/{1e-9 / b:.2f}" for k, (a, b) in m["collectives"].items()))
        model.append("\n| setting | shapes | rank correlation | model's pick | its measured time | measured best "
                     "| pick / best | top-1 within 10% | median abs. error |")
        model.append("|---|---|---|---|---|---|---|---|---|")
        for s, v in run_["validation"].items():
            model.append(f"| {SETTINGS[s]} | {v['shapes']} | {v['spearman']:.2f} | {tuple(v['model_pick'])} | "
                         f"{_ms(v['model_pick_measured_s'])} ms | {tuple(v['measured_best'])} "
                         f"{_ms(v['measured_best_s'])} ms | {v['pick_over_best']:.2f} | "
                         f"{'yes' if v['top1_within_10pct'] else 'no'} | {v['median_abs_rel_error']:.0%} |")
    (ROOT / "docs" / "engine_bench.md").write_text("\n".join(bench) + "\n" + BENCH_TAIL)
    (ROOT / "docs" / "engine_perfmodel.md").write_text("\n".join(model) + "\n" + MODEL_TAIL)
    print("wrote docs/engine_bench.md and docs/engine_perfmodel.md")


BENCH_HEAD = """# Engine benchmark: every grid shape of 4 and 8 ranks, overlap off and on

Generated by `python benchmarks/engine_grids.py report` from docs/results/engine_grid_p*.json.
Times are per training iteration (forward, backward, gradient sync, clipping, AdamW): the median
over iterations of the slowest rank's time, ROUNDS_KEPT. "Exposed comm" is the time
ranks sat inside MPI (share of the iteration), "hidden" the time collectives were in flight while
the rank computed (``gpulab.engine.parallel.timeline``). "model" is ``gpulab.engine.perf.predict.predict``
with the machine fitted around the run (docs/engine_perfmodel.md). MFU = model FLOPs per second
(``gpulab.engine.perf.flops``) / this machine's measured peak (best float32 matmul, all cores, one process).
"""
BENCH_TAIL = """
Reading it: on this machine 4 or 8 ranks share 2 cores (and whatever else runs), so a blocking
collective mostly costs waiting for peers to be scheduled; grids whose groups synchronise often
(col: every LayerNorm and every forward layer; row) pay most, pure data parallelism least.
"""
MODEL_HEAD = """# Performance model against measurement on this machine

Generated by `python benchmarks/engine_grids.py report` from docs/results/engine_grid_p*.json
(the measurements are in docs/engine_bench.md). These records (2026-11-29) were priced by the
model of that day, fitted to this machine by microbenchmarks only (``gpulab.engine.perf.fitted_machine``):
the comparison is out of sample. The model as it is now, run three times on every setting, is in
docs/engine_model_accuracy.md. Rank correlation is Spearman's over all grid shapes of the world
size; "top-1 within 10%" asks whether the shape the model ranks first is, measured, within 10% of
the fastest measured shape (AxoNN's use of its model: pick a shape without running them all).
"""
MODEL_TAIL = """
Limits: the absolute times carry the load of other jobs on these 2 cores (the fitted compute share
is measured, not assumed, and changes with it); the model has no term for load imbalance or for
the order in which ranks are scheduled.
"""


if __name__ == "__main__":
    from run_report import main

    main(__doc__, run, report, world=True)
