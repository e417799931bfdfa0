"""Tables and summaries of ``gpulab tune`` results (printed by the CLI, reused by notebook 03).

Ratios are time / MPI_Bcast time: above 1 is slower than MPI's own broadcast.
"""

from __future__ import annotations

import math
import statistics
from functools import partial

import numpy as np

from gpulab.bcast.algorithms import registry
from gpulab.bcast.cost.hockney import Machine, best_chunk, predict, textbook
from gpulab.bcast.measurement.pingpong_fit import summary
from gpulab.bcast.selection.tuning import table_path, update
from gpulab.bcast.sizes import format_size
from gpulab.machines import load

BAND = 64 << 10  # compare's summary splits sizes here: below, latency decides; from here up, bandwidth


def format_ranges(table: dict, user: str = "algorithm='auto'") -> str:
    lines = [f"p={table['p']}: {user} uses (margin {table['margin']:.0%} over MPI_Bcast)"]
    for r in table["ranges"]:
        hi = "..." if r["hi"] is None else format_size(r["hi"])
        opts = "".join(f" {k}={v}" for k, v in r["options"].items())
        lines.append(f"  {format_size(r['lo']):>7} - {hi:<7} {r['algorithm']}{opts}  [{r['why']}]")
    return "\n".join(lines)


def compare_rows(rows: list[dict]) -> list[dict]:
    """One row per size: auto, MPI_Bcast and the fastest fixed algorithm, with ratios to MPI."""
    out = []
    for size in sorted({r["nbytes"] for r in rows}):
        here = {r["algorithm"]: r for r in rows if r["nbytes"] == size}
        auto, mpi = here["auto"], here["mpi"]
        fixed = [r for a, r in here.items() if a not in ("auto", "mpi")]
        best = min(fixed, key=lambda r: r["avg_us"]) if fixed else mpi
        out.append({"p": auto["p"], "nbytes": size, "auto_us": auto["avg_us"], "mpi_us": mpi["avg_us"],
                    "best_fixed": best["algorithm"], "best_fixed_us": best["avg_us"],
                    "auto_over_mpi": auto["avg_us"] / mpi["avg_us"],
                    "best_over_mpi": best["avg_us"] / mpi["avg_us"], "chosen": auto.get("chosen"),
                    "source": auto.get("source"), "valid": all(r["valid"] for r in here.values())})
    return out


def best_single(rows: list[dict]) -> tuple[str, float]:
    """The one fixed algorithm with the smallest geometric-mean time over all sizes (and that mean in us)."""
    names = {r["algorithm"] for r in rows} - {"auto"}
    sizes = {r["nbytes"] for r in rows}
    score = {}
    for name in names:
        times = [r["avg_us"] for r in rows if r["algorithm"] == name]
        if len(times) == len(sizes):
            score[name] = math.exp(statistics.fmean(math.log(t) for t in times))
    name = min(score, key=score.get)
    return name, score[name]


def format_compare(rows: list[dict]) -> str:
    table = compare_rows(rows)
    single, _ = best_single(rows)
    lines = [f"p={table[0]['p']}: time per broadcast (us); ratio = time / MPI_Bcast; best single algorithm "
             f"over all sizes: {single}",
             f"{'size':>7} {'auto':>10} {'mpi':>10} {'auto/mpi':>9}  {'best fixed':<24} {'best/mpi':>8}  auto chose"]
    for r in table:
        lines.append(f"{format_size(r['nbytes']):>7} {r['auto_us']:10.1f} {r['mpi_us']:10.1f} "
                     f"{r['auto_over_mpi']:9.2f}  {r['best_fixed']:<24} {r['best_over_mpi']:8.2f}  "
                     f"{r['chosen']} ({r['source']})" + ("" if r["valid"] else "  INVALID"))
    return "\n".join(lines)


def compare_summary(per_p: dict[int, list[dict]]) -> list[dict]:
    """Per p and size band: worst and median auto/mpi, and at how many sizes auto beat MPI by > 5%."""
    out = []
    for p, rows in sorted(per_p.items()):
        table = compare_rows(rows)
        for band, keep in (("< 64K", lambda n: n < BAND), (">= 64K", lambda n: n >= BAND)):
            part = [r for r in table if keep(r["nbytes"])]
            if not part:
                continue
            ratios = [r["auto_over_mpi"] for r in part]
            out.append({"p": p, "band": band, "sizes": len(part), "auto_over_mpi_max": max(ratios),
                        "auto_over_mpi_median": statistics.median(ratios),
                        "auto_faster": sum(x < 0.95 for x in ratios),
                        "best_fixed_over_mpi_min": min(r["best_over_mpi"] for r in part),
                        "within_10pct": all(x <= 1.10 for x in ratios)})
    return out


def accuracy_rows(rows: list[dict], machines: dict) -> list[dict]:
    """Measured rows with a predicted time (us) for each named machine, e.g. {"fit p=2": m, "textbook": t}.

    The model predicts when the *last* rank has the data, so it is compared with
    ``max_us`` (the slowest rank's mean time), not OSU's average over ranks:
    in a linear broadcast on 8 ranks the average is about half the maximum.
    """
    out = []
    for r in rows:
        row = {k: r[k] for k in ("algorithm", "nbytes", "p", "avg_us", "max_us", "options", "valid") if k in r}
        measured = row.get("max_us", row["avg_us"])
        for label, machine in machines.items():
            if machine is not None:
                pred = predict(r["algorithm"], r["nbytes"], r["p"], machine, **r["options"]) * 1e6
                row[f"pred_us[{label}]"] = pred
                row[f"ratio[{label}]"] = pred / measured if measured > 0 else math.nan
        out.append(row)
    return out


def accuracy_summary(rows: list[dict], label: str, key: str = "algorithm") -> list[dict]:
    """Per algorithm (or per p): geometric-mean predicted/measured, share within 1.5x and 2x, worst."""
    out = []
    for group in sorted({r[key] for r in rows}, key=str):
        ratios = [r[f"ratio[{label}]"] for r in rows if r[key] == group and f"ratio[{label}]" in r]
        if not ratios:
            continue
        logs = [abs(math.log(x)) for x in ratios]
        out.append({key: group, "model": label, "points": len(ratios),
                    "geo_mean_ratio": math.exp(statistics.fmean(math.log(x) for x in ratios)),
                    "within_1.5x": sum(v <= math.log(1.5) for v in logs) / len(logs),
                    "within_2x": sum(v <= math.log(2) for v in logs) / len(logs),
                    "worst_ratio": ratios[logs.index(max(logs))]})
    return out


def crossovers(machine, p: int, algorithms, lo: int = 1 << 10, hi: int = 64 << 20, points: int = 33) -> list[dict]:
    """Sizes where the model's fastest of ``algorithms`` changes (pipelined ones at their best chunk).

    Looks at ``points`` sizes from lo to hi (33: two per octave), then bisects each change to 1%. The
    ring's model replays its schedule at every size, so every extra step costs: two per octave is
    the coarsest grid that finds every crossing the finer ones find."""
    fastest = partial(fastest_algorithm, machine, p, algorithms)
    sizes = [int(x) for x in np.geomspace(lo, hi, points)]
    out, before = [], fastest(sizes[0])
    for a, b in zip(sizes, sizes[1:]):
        now = fastest(b)
        if now != before:
            while b - a > max(1, a // 100):  # bisect to 1%
                mid = int(math.sqrt(a * b))
                a, b = (mid, b) if fastest(mid) == before else (a, mid)
            out.append({"p": p, "from": before, "to": now, "nbytes": b})
            before = now
    return out


def fastest_algorithm(machine, p: int, algorithms, nbytes: int) -> str:
    """The one of ``algorithms`` that the model predicts fastest (pipelined ones at their best chunk)."""
    def t(a):
        opts = {"chunk_bytes": best_chunk(a, nbytes, p, machine)} if registry.get(a).pipelined else {}
        return predict(a, nbytes, p, machine, **opts)
    return min(algorithms, key=t)


def print_rows(rows: list[dict], columns: list[str]) -> None:
    print("  ".join(f"{c:>14}" for c in columns))
    for r in rows:
        print("  ".join(f"{r[c]:>14.2f}" if isinstance(r[c], float) else f"{str(r[c]):>14}" for c in columns))


def handle(args, results: dict, workload_report=None) -> bool:
    """Store, print and enrich results of one ``gpulab tune`` command; True when every run was valid.

    ``workload_report(rows, p, machine, table)`` prints ``tune workload`` rows (``gpulab.workloads.startup.report``).
    """
    ok = True
    for p, r in sorted(results.items()):
        meta = r.get("metadata", {})
        print(f"== p={p}  (load average before {meta.get('load_before')}, after {meta.get('load_after')})")
        if args.what in ("fit", "bcast") and r.get("model"):
            print(summary(Machine.from_dict(r["model"])))
        if args.what == "fit" and not args.no_save:
            print(f"saved the fit for p={p} in {update(args.table, p=p, model=r['model'], metadata=meta)}")
        if args.what == "bcast" and "table" in r:  # absent when only native variants were measured
            update(args.table, p=p, model=r.get("model"), table=r["table"], metadata=meta)
            print(format_ranges(r["table"]))
            ok &= all(m["valid"] for m in r["table"]["measured"])
        if args.what == "compare":
            print(format_compare(r["rows"]))
            ok &= all(x["valid"] for x in r["rows"])
        if args.what == "workload":  # the workload sits above the broadcast: the caller hands its report in
            ok &= workload_report(r["rows"], p, _try(stored_fit, args.table, p), args.table)
    if args.what == "bcast" and any("table" in r for r in results.values()):
        print(f"tuning table: {table_path(args.table)}")
    if args.what == "compare":
        print("\nsummary (auto/mpi: time ratio, above 1 = slower than MPI_Bcast)")
        print_rows(compare_summary({p: r["rows"] for p, r in results.items()}),
                    ["p", "band", "sizes", "auto_over_mpi_max", "auto_over_mpi_median", "auto_faster",
                     "best_fixed_over_mpi_min", "within_10pct"])
    if args.what == "accuracy":
        two = results.get(2, {}).get("model")
        base = Machine.from_dict(two) if two else _try(stored_fit, args.table, 2)
        for r in results.values():
            same = Machine.from_dict(r["model"]) if r.get("model") else None
            r["rows"] = accuracy_rows(r["rows"], {"fit p=2": base, "fit same p": same,
                                                  "textbook": textbook(base) if base else None})
            ok &= all(x["valid"] for x in r["rows"])
        everything = [x for r in results.values() for x in r["rows"]]
        for label in ("fit p=2", "fit same p", "textbook"):
            print(f"\nmodel '{label}': predicted / measured")
            print_rows(accuracy_summary(everything, label), ["algorithm", "points", "geo_mean_ratio",
                                                              "within_1.5x", "within_2x", "worst_ratio"])
            print_rows(accuracy_summary(everything, label, "p"), ["p", "points", "geo_mean_ratio",
                                                                   "within_1.5x", "within_2x", "worst_ratio"])
    return ok


def stored_fit(table, p: int) -> Machine:
    """The fit the tuning file holds for ``p`` ranks (the nearest if none)."""
    return Machine.from_description(load(table_path(table), p=p))


def _try(fn, *args):
    try:
        return fn(*args)
    except (FileNotFoundError, ValueError):
        return None
