"""How accurate the engine's performance model is wherever the kit runs: every recorded accuracy run, per setting.

    python benchmarks/engine_accuracy.py      # docs/engine_model_accuracy.md + docs/results/engine_accuracy.png
    python benchmarks/engine_accuracy.py repredict --overlap zero|probe RECORD.json ...   # another overlap rule
    python benchmarks/engine_accuracy.py price --machine FIT.json BENCH.json   # a fit against `gpulab bench engine`
    python benchmarks/engine_accuracy.py table FOLDER   # the table's rows for the runs in another folder

Reads the records of repeated runs (docs/results/engine_accuracy_*.json), each written by
    python benchmarks/emulated_engine.py run --nodes N --ranks-per-node R --placement P --link L \\
        --rounds 4 --iters 3 --warmup 1 --out docs/results/engine_accuracy_NxR_P_L_runK.json
    python benchmarks/engine_grids.py run --world 4 --out docs/results/engine_accuracy_1x4_machine_runK.json
and tabulates, per setting and run, the model's median absolute error over the grids with its 95%
interval (``gpulab.stats.median_interval``), and whether its pick measured within 5% of the best (the
targets: 10% on the emulated clusters, 20% on one machine), beside the signs the fit itself gives of how
far to trust it (``gpulab.engine.perf.trust``); per setting, the same over every run's grids together.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
DOC = ROOT / "docs" / "engine_model_accuracy.md"
PNG = RESULTS / "engine_accuracy.png"
sys.path.insert(0, str(ROOT))

from gpulab.engine.perf.calibration import calibrated_on  # noqa: E402
from gpulab.engine.perf.fitted_machine import FittedMachine  # noqa: E402
from gpulab.engine.perf.machines import machine as engine_machine  # noqa: E402
from gpulab.engine.perf.terms import stride  # noqa: E402
from gpulab.engine.perf.trust import (  # noqa: E402
    COMPUTE_SHARE,
    compute_bound_on_shared_cores,
    verdict,
)
from gpulab.machines import Description  # noqa: E402
from gpulab.stats import median_interval  # noqa: E402

NAME = re.compile(r"engine_accuracy_(?P<setting>.+)_run(?P<run>\d+)\.json")
TARGET = {"emulated": 0.10, "machine": 0.20}  # median absolute error
PICK = 1.05  # the model's pick, measured, within 5% of the measured best


def fitted(record: dict, path: Path) -> FittedMachine:
    """The machine a record's run fitted (a machine description, ``gpulab.machines``)."""
    return FittedMachine.from_description(Description.from_dict(record["machine"], str(path)))


def kind_of(setting: str) -> str:
    """"machine" for a run on this machine without emulation ("1x4_machine"), else "emulated" (TARGET's keys)."""
    return "machine" if setting.endswith("machine") else "emulated"


def runs(folder: Path = RESULTS) -> list[dict]:
    """One row per record: its setting, the model's accuracy per overlap setting, the fit's trust signs."""
    out = []
    for path in sorted(folder.glob("engine_accuracy_*_run*.json")):
        m = NAME.fullmatch(path.name)
        record = json.loads(path.read_text())
        validation = record["validation"]
        if "none" in validation:  # engine_grids.py: one machine, best round kept
            accuracy = {"off": validation["none"], "on": validation["all"]}
        else:  # emulated_engine.py: the stride-aware fit
            accuracy = {s: validation[s]["stride-aware"] for s in ("off", "on")}
        machine = fitted(record, path)
        ranks, cores = machine.ranks, machine.cores
        left_out = calibrated_on(machine)  # measured by the fit itself: in sample, so not among the errors
        grids = [{"error": abs(r["prediction"]["iter_s"] - r["iter_s"]) / r["iter_s"],
                  "signed": (r["prediction"]["iter_s"] - r["iter_s"]) / r["iter_s"],
                  "overlap": overlap_setting(r),
                  "low": compute_bound_on_shared_cores(ranks, cores, r["prediction"]["compute_s"],
                                                       r["prediction"]["iter_s"]),
                  "sync": sync_call(r, machine), "calibration": tuple(r["shape"]) in left_out}
                 for r in record["rows"]]
        out.append({"setting": m["setting"], "run": int(m["run"]), "date": record["date"],
                    "kind": kind_of(m["setting"]),
                    "minutes": record["minutes"], "accuracy": accuracy, "trust": machine.trust, "grids": grids})
    return sorted(out, key=lambda r: (r["kind"], r["setting"], r["run"]))


def sync_call(row: dict, machine) -> tuple[float, float] | None:
    """The gradient norm's all-reduce of 8 bytes over the tensor group (one per iteration, right after
    backward): (what it took in the engine's timeline on rank 0, the fit's price for it). Its bytes cost
    next to nothing, so what it took beyond the price is how long rank 0 waited for the group's slowest
    rank there. None where the group is one rank."""
    R, C, D, _ = row["shape"]
    call = row["summary"]["groups"].get("tensor")
    if R * C * D == 1 or not call:
        return None
    return (call["flight_s"] / call["calls"],
            machine.collective_s("all_reduce", R * C * D, stride("tensor", row["shape"]), 8))


def overlap_setting(row: dict) -> str:
    """"off" or "on": emulated_engine.py's rows say so ("setting"), engine_grids.py's by overlap label."""
    return "off" if row.get("setting", row.get("overlap_label")) in ("off", "none") else "on"


def errors(row: dict, setting: str, key: str = "error") -> list[float]:
    """A run's error of each grid with overlap ``setting``, the grids its fit measured itself left out."""
    return [g[key] for g in row["grids"] if g["overlap"] == setting and not g["calibration"]]


def with_interval(values: list[float], signed: bool = False) -> str:
    """'7.5% [3.1, 12.0]': the median of ``values`` (fractions) and its 95% interval, in percent."""
    iv = median_interval(values)
    sign = "+" if signed else ""
    return f"{iv.median:{sign}.1%} [{iv.low * 100:{sign}.1f}, {iv.high * 100:{sign}.1f}]"


def meets(row: dict) -> bool:
    return all(v["median_abs_rel_error"] <= TARGET[row["kind"]] and v["pick_over_best"] <= PICK
               for v in row["accuracy"].values())


def table(rows: list[dict]) -> list[str]:
    lines = ["| setting | run | date (UTC) | min | error off | error on | pick / best off | on | Spearman off | on "
             "| fit-to-fit | spread | other load / core | stolen | trust | meets |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    pct = lambda v: "-" if v is None else f"{v:.0%}"  # noqa: E731
    for r in rows:
        off, on, t = r["accuracy"]["off"], r["accuracy"]["on"], r["trust"]
        ok = verdict(t)[0]
        lines.append(f"| {r['setting']} | {r['run']} | {r['date']} | {r['minutes']:.1f} | "
                     f"{with_interval(errors(r, 'off'))} | {with_interval(errors(r, 'on'))} | "
                     f"{off['pick_over_best']:.2f} | {on['pick_over_best']:.2f} | {off['spearman']:.2f} | "
                     f"{on['spearman']:.2f} | {pct(t.get('fit_to_fit'))} | {pct(t.get('spread'))} | "
                     f"{t.get('other_load_per_core', 0):.2f} | {pct(t.get('steal'))} | "
                     f"{ {True: 'ok', False: 'LOW', None: '?'}[ok]} | {'yes' if meets(r) else 'no'} |")
    return lines


def by_setting(rows: list[dict]) -> list[str]:
    """Per setting, every run's grids together: the median absolute error with its interval, each run's
    median, and the runs that meet the targets."""
    import numpy as np

    lines = ["| setting | runs | grids per run and setting | error off, all runs | on, all runs "
             "| each run's error off / on, range | runs meeting the targets |", "|---|---|---|---|---|---|---|"]
    for setting in dict.fromkeys(r["setting"] for r in rows):
        runs_ = [r for r in rows if r["setting"] == setting]
        pooled = {s: [e for r in runs_ for e in errors(r, s)] for s in ("off", "on")}
        ranges = " / ".join(f"{min(m):.1%}-{max(m):.1%}" for m in
                            ([float(np.median(errors(r, s))) for r in runs_] for s in ("off", "on")))
        lines.append(f"| {setting} | {len(runs_)} | {len(errors(runs_[0], 'off'))} | {with_interval(pooled['off'])} | "
                     f"{with_interval(pooled['on'])} | {ranges} | {sum(meets(r) for r in runs_)} of {len(runs_)} |")
    return lines


def by_caveat(rows: list[dict]) -> list[str]:
    """Every grid's error, split by whether its prediction carries the shared-cores caveat (``trust.caveat``)."""
    import numpy as np

    lines = ["| predictions | settings | grids | median abs. error [95% interval] | 90th percentile |",
             "|---|---|---|---|---|"]
    for low, label in ((False, f"compute < {COMPUTE_SHARE:.0%} of the iteration, or cores not shared: trust ok"),
                       (True, f"compute >= {COMPUTE_SHARE:.0%} on shared cores: trust LOW")):
        for kind in ("emulated", "machine"):
            found = [g["error"] for r in rows if r["kind"] == kind for g in r["grids"]
                     if g["low"] == low and not g["calibration"]]
            if found:
                lines.append(f"| {label} | {kind} | {len(found)} | {with_interval(found)} | "
                             f"{np.percentile(found, 90):.0%} |")
    return lines


def by_sign(rows: list[dict]) -> list[str]:
    """Which way the model errs: per setting, each run's median signed error (predicted - measured) / measured."""
    import numpy as np

    lines = ["| setting | signed error off, each run | on, each run | off, all runs | on, all runs "
             "| runs predicting low, off / on |", "|---|---|---|---|---|---|"]
    for setting in dict.fromkeys(r["setting"] for r in rows):
        runs_ = [r for r in rows if r["setting"] == setting]
        medians = {o: [float(np.median(errors(r, o, "signed"))) for r in runs_] for o in ("off", "on")}
        pooled = [with_interval([e for r in runs_ for e in errors(r, o, "signed")], signed=True) for o in ("off", "on")]
        lines.append(f"| {setting} | " + " | ".join(", ".join(f"{m:+.0%}" for m in medians[o]) for o in ("off", "on"))
                     + f" | {pooled[0]} | {pooled[1]} | "
                     + " / ".join(f"{sum(m < 0 for m in medians[o])} of {len(runs_)}" for o in ("off", "on"))
                     + " |")
    return lines


def by_sync(rows: list[dict]) -> list[str]:
    """Per setting, overlap off: the gradient norm's 8-byte all-reduce in the engine against the fit's price
    for it, and how its cost goes with the model's signed error over the grids (Pearson)."""
    import numpy as np

    lines = ["| setting | grids | in the engine, median (range) | fit's price, median | engine / price, median "
             "| correlation with the signed error |", "|---|---|---|---|---|---|"]
    for setting in dict.fromkeys(r["setting"] for r in rows):
        pairs = [(g["sync"], g["signed"]) for r in rows if r["setting"] == setting for g in r["grids"]
                 if g["overlap"] == "off" and g["sync"]]
        if len(pairs) < 3:
            continue
        took, price = (np.array([p[0][i] for p in pairs]) * 1e3 for i in (0, 1))
        signed = np.array([p[1] for p in pairs])
        lines.append(f"| {setting} | {len(pairs)} | {np.median(took):.2f} ms ({took.min():.2f}-{took.max():.2f}) | "
                     f"{np.median(price):.2f} ms | {np.median(took / price):.1f}x | "
                     f"{np.corrcoef(took, signed)[0, 1]:+.2f} |")
    return lines


def plot(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    settings = list(dict.fromkeys(r["setting"] for r in rows))
    fig = Figure(figsize=(10, 3.8))
    ax = fig.subplots()
    for x, setting in enumerate(settings):
        for r in (r for r in rows if r["setting"] == setting):
            for dx, (s, marker) in ((-0.12, ("off", "o")), (0.12, ("on", "s"))):
                low = verdict(r["trust"])[0] is False
                iv = median_interval(errors(r, s)).scaled(100)
                ax.errorbar(x + dx, iv.median, yerr=[[iv.median - iv.low], [iv.high - iv.median]], fmt=marker,
                            color="#d62728" if low else "#1f77b4", ms=5, elinewidth=0.6, capsize=2,
                            label=f"overlap {s}, trust {'LOW' if low else 'ok'}")
        target = TARGET[kind_of(setting)] * 100
        ax.plot([x - 0.35, x + 0.35], [target, target], color="black", lw=0.8)
    handles = dict(zip(*reversed(ax.get_legend_handles_labels())))
    ax.legend(handles.values(), handles.keys(), fontsize=7)
    ax.set_xticks(range(len(settings)), settings, fontsize=7, rotation=15)
    ax.set_ylabel("median abs. error of the model, %")
    ax.set_title("the engine model against every recorded run: median over grids, its 95% interval "
                 "(black: the target)", fontsize=9)
    fig.tight_layout()
    fig.savefig(PNG, dpi=100)


READING = "\n## What the runs say"  # the hand-written reading below the generated part is kept


def main() -> None:
    rows = runs()
    if not rows:
        raise SystemExit("no accuracy run recorded: see this script's docstring for the commands")
    plot(rows)
    head = (HEAD + "\n".join(table(rows)) + "\n" + SETTING_HEAD + "\n".join(by_setting(rows)) + "\n"
            + CAVEAT_HEAD + "\n".join(by_caveat(rows)) + "\n"
            + SIGN_HEAD + "\n".join(by_sign(rows)) + "\n" + SYNC_HEAD + "\n".join(by_sync(rows)) + "\n")
    old = DOC.read_text() if DOC.exists() else ""
    DOC.write_text(head + (old[old.index(READING):] if READING in old else ""))
    print(f"wrote {DOC.relative_to(ROOT)} and {PNG.relative_to(ROOT)}")


HEAD = f"""# How accurate the engine's performance model is, wherever the kit runs

Generated by `python benchmarks/engine_accuracy.py` from docs/results/engine_accuracy_*_run*.json.
Each run fits the model on the cluster it measures (microbenchmarks only, twice: before and after),
then times every grid of the world size with overlap off and on; the model predicts each grid out of
sample. Setting `NxR_placement_link`: N emulated nodes of R ranks (`python benchmarks/emulated_engine.py
run --nodes N --ranks-per-node R --placement P --link L --rounds 4 --iters 3 --warmup 1 --out ...`,
each time the median over 4 interleaved rounds); `1x4_machine`: 4 ranks on this machine without
emulation (`python benchmarks/engine_grids.py run --world 4 --out ...`; these records keep each grid's
best round). "error" is
the median over grids of |predicted - measured| / measured, with its 95% distribution-free interval over
those grids (the grids the fit measured itself left out: 7 of 4 ranks, 17 of 8; `gpulab.stats`): how far
the typical grid's error is pinned down by the run's grids. "pick / best" the measured time of the
model's first pick over the measured best. Targets: error at most {TARGET['emulated']:.0%} on the
emulated clusters and {TARGET['machine']:.0%} on one machine, pick within {PICK - 1:.0%} ("meets": the
median, as the targets are stated). Each grid's own time has no interval here: the records keep 4 rounds
per grid (3 on one machine), fewer than the 6 a 95% interval of a median needs, so the intervals are over
grids and, below, over the runs of a setting.
The trust columns are what the fit knows about itself before any grid is measured (`gpulab.engine.perf.trust`):
how far its two fits came out apart, the spread of each timing's repetitions, the load beyond the job's
own ranks at the end, the CPU time the hypervisor stole; "trust" is LOW when one is past its limit.
Machine: 2 cores (see the setup in docs/emulated_engine.md).

![error per setting and run](results/{PNG.name})

"""

SETTING_HEAD = """
### Each setting over its runs

Every run's grids of a setting together (the runs repeat the same measurement, so the pooled interval
says how well the setting's typical error is known), beside the spread of the runs' own medians.

"""

CAVEAT_HEAD = f"""
### Which predictions to trust

Every grid of the runs above (each overlap setting), by whether its prediction carries the caveat the
model prints (`trust.caveat`): on ranks that share cores, a prediction whose compute is
{COMPUTE_SHARE:.0%} of the iteration or more.

"""

SYNC_HEAD = """
### How long the ranks wait for each other

One call per iteration moves almost nothing: the gradient norm's all-reduce of 8 bytes over the tensor
group, right after backward. What it took in the engine's timeline (rank 0, overlap off) beyond the fit's
price for it is how long rank 0 waited there for the slowest rank of its group: the ranks reach a call
out of step. Negative correlation: the longer that wait, the further the model predicts the iteration
short. The fit times each collective with the ranks starting together, so no timed call contains this
wait; the fit calibrates a share of it at the row and col all-reduces on two grids, and at the
replicas' gradient all-reduce on a third (`gpulab.engine.perf.calibration`).

"""

SIGN_HEAD = """
### Which way the model errs

The same runs, each run's median of the signed error (predicted - measured) / measured over its grids,
and every run's grids together with the median's 95% interval: negative where the model predicts the
iteration shorter than it measured.

"""

def repredict(paths: list[Path], overlap: str) -> list[str]:
    """Each record's grids priced again from the record's own fit (out of sample: the fit never saw the
    grids' timings), with the overlap efficiencies of every progress mode set to 0 or to what the fit's
    probe measured before ``probes.overlap_used``; its error and pick per setting, as the table gives them."""
    from dataclasses import replace

    lines = []
    for path in paths:
        record = json.loads(path.read_text())
        machine = fitted(record, path)
        if overlap == "probe" and not machine.overlap_probe:
            raise SystemExit(f"{path}: its fit kept no probe values")
        etas = {mode: 0.0 for mode in machine.overlap} if overlap == "zero" else {**machine.overlap_probe, "none": 0.0}
        v = scored(record["rows"], replace(machine, overlap=etas))
        lines.append(f"{path.name}: overlap {overlap} " + ", ".join(
            f"{s} {v[s]['median_abs_rel_error']:.1%} pick {v[s]['pick_over_best']:.2f}" for s in ("off", "on")))
    return lines


GROUP_WAIT_RULES = {  # the share of a wait calibrated over all p ranks that a group of g ranks pays
    "(g-1)/(p-1), the model's": lambda g, p: (g - 1) / (p - 1),
    "its square": lambda g, p: ((g - 1) / (p - 1)) ** 2,
    "its 1.5th power": lambda g, p: ((g - 1) / (p - 1)) ** 1.5,
    "log g / log p": lambda g, p: math.log(g) / math.log(p),
    "none below p": lambda g, p: float(g == p),
}


def group_wait(paths: list[Path]) -> list[str]:
    """Each record's grids priced again from its own fit with other shares of the calibrated waits for
    groups smaller than the job (``predict.group_wait_share``). The fit calibrates the waits on grids
    whose group spans every rank, where every rule gives 1, so a rule changes no fit, only the other
    grids' prices. Per rule: the runs meeting the targets, the median and the largest error."""
    from unittest import mock

    import gpulab.engine.perf.predict as model

    records = [(NAME.fullmatch(path.name), json.loads(path.read_text()), path) for path in paths]
    lines = []
    for name, rule in GROUP_WAIT_RULES.items():
        met, errors = 0, []
        with mock.patch.object(model, "group_wait_share", rule):
            for match, record, path in records:
                v = scored(record["rows"], fitted(record, path))
                met += meets({"kind": kind_of(match["setting"]), "accuracy": v})
                errors += [x["median_abs_rel_error"] for x in v.values()]
        errors.sort()
        lines.append(f"{name:26s} runs meeting {met} of {len(records)}, error median {errors[len(errors) // 2]:.1%}"
                     f", largest {errors[-1]:.1%}")
    return lines


def scored(rows: list[dict], machine) -> dict:
    """Measured rows priced on ``machine``: per overlap setting ("off", "on") the model's median error,
    pick and rank correlation (``pick_validation.validate``)."""
    from benchmarks.engine_grids import predict_row
    from gpulab.engine.perf.pick_validation import validate

    by_setting: dict = {}
    for r in rows:
        by_setting.setdefault(overlap_setting(r), []).append({**r, "prediction": predict_row(r, machine)})
    return {s: validate(priced, calibrated_on(machine)) for s, priced in by_setting.items()}


def price(machine_path: Path, bench_path: Path) -> list[str]:
    """The rows of a ``gpulab bench engine`` record priced on a fitted machine (``gpulab model fit``), for
    runs that no accuracy record covers, such as arrays on a GPU: each grid's measured and predicted
    iteration, then the error and pick per overlap setting."""
    from benchmarks.engine_grids import predict_row

    machine, rows = engine_machine(machine_path), json.loads(bench_path.read_text())
    devices = sorted({r.get("device", "host") for r in rows})
    if devices != [machine.device]:
        raise SystemExit(f"{bench_path} ran on {devices}, the fit on {machine.device}: "
                         "it prices runs on its own device")
    lines = []
    for r in rows:
        p = predict_row(r, machine)
        lines.append(f"{tuple(r['shape'])} overlap {overlap_setting(r)}: measured {r['iter_s'] * 1e3:.1f} ms, "
                     f"predicted {p['iter_s'] * 1e3:.1f} ms ({p['iter_s'] / r['iter_s'] - 1:+.1%})")
    v = scored(rows, machine)
    return lines + [f"overlap {s}: median error {v[s]['median_abs_rel_error']:.1%}, pick / best "
                    f"{v[s]['pick_over_best']:.2f}, Spearman {v[s]['spearman']:.2f}" for s in sorted(v)]


def cli(argv: list[str]) -> None:
    """No subcommand: the doc and the plot (``main``); else the subcommand's lines."""
    import argparse

    parser = argparse.ArgumentParser(prog="engine_accuracy.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command")
    one = sub.add_parser("repredict", description=repredict.__doc__)
    one.add_argument("--overlap", choices=("zero", "probe"), required=True)
    one.add_argument("records", nargs="+", type=Path)
    one.set_defaults(lines=lambda a: repredict(a.records, a.overlap))
    one = sub.add_parser("group-wait", description=group_wait.__doc__)
    one.add_argument("records", nargs="*", type=Path, help="default: the table's runs")
    one.set_defaults(lines=lambda a: group_wait(a.records or sorted(RESULTS.glob("engine_accuracy_*_run*.json"))))
    one = sub.add_parser("table", description="The table's rows for the runs in FOLDER.")
    one.add_argument("folder", type=Path, help="a folder of engine_accuracy_*_runK.json, e.g. a series of your own")
    one.set_defaults(lines=lambda a: table(runs(a.folder)))
    one = sub.add_parser("price", description=price.__doc__)
    one.add_argument("--machine", type=Path, required=True, help="a fit (gpulab model fit --out)")
    one.add_argument("bench", type=Path, help="a record of gpulab bench engine --out")
    one.set_defaults(lines=lambda a: price(a.machine, a.bench))
    args = parser.parse_args(argv)
    if args.command is None:
        main()
    else:
        print("\n".join(args.lines(args)))


if __name__ == "__main__":
    cli(sys.argv[1:])
