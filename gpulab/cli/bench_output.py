"""What ``gpulab bench bcast`` shows and writes: the table of medians with their intervals, JSON, CSV, plot.

A point's cell is the median of its rounds with the larger half of its 95% interval (``331.0 ±6%``);
the last column names the fastest algorithm of the size and how many times faster than ``mpi`` it is,
with the interval of the ratio: paired round by round when both ran in the same job
(``stats.paired_ratio``), else a bootstrap of the two medians (``stats.ratio_of_medians``: a native
variant ran in a job of its own). The records follow docs/bench_schema.md (``SCHEMA``, versioned).
"""

from __future__ import annotations

import csv
import json

from gpulab.bcast.measurement.native_variants import is_variant
from gpulab.bcast.measurement.rounds import MIN_ROUNDS
from gpulab.bcast.sizes import format_size
from gpulab.host import Snapshot
from gpulab.records import provenance
from gpulab.stats import CONFIDENCE, Interval, paired_ratio, ratio_of_medians

# the records' format (docs/bench_schema.md); the version changes whenever a field changes meaning or goes
SCHEMA = {"name": "gpulab-bench-bcast", "version": 3}
WHAT = "gpulab bench bcast: time per broadcast call, per algorithm and message size, median over interleaved rounds"
CSV_FIELDS = ("schema_version", "algorithm", "entry", "nbytes", "dtype", "count", "p", "root", "iters", "warmup",
              "mode", "avg_us", "min_us", "max_us", "p50_us", "p90_us", "p99_us", "algbw_GBps", "busbw_GBps",
              "check", "errors", "valid", "device", "path", "options", "chose", "rounds", "stopped",
              "avg_low_us", "avg_high_us", "max_low_us", "max_high_us", "confidence", "rounds_us", "rounds_max_us",
              "cores", "load_before")


def _samples(record: dict) -> list[float]:
    return record.get("rounds_us") or [record["avg_us"]]


def interval_of(record: dict) -> Interval:
    """The record's median and interval (a record of one round: that round, with no confidence)."""
    if "avg_interval_us" in record:
        return Interval.from_dict(record["avg_interval_us"])
    return Interval(record["avg_us"], record["avg_us"], record["avg_us"], 1, 0.0)


def speedup(mpi: dict, best: dict) -> Interval:
    """How many times faster than ``mpi`` the ``best`` record is, with the interval of that ratio."""
    a, b = _samples(mpi), _samples(best)
    if is_variant(mpi["algorithm"]) or is_variant(best["algorithm"]):  # jobs apart: their rounds are not pairs
        return ratio_of_medians(a, b)
    pairs = min(len(a), len(b))  # a point that closed early has fewer rounds: the rounds both ran
    return paired_ratio(a[:pairs], b[:pairs])


def _cell(record: dict) -> str:
    interval = interval_of(record)
    spread = f" ±{interval.half_width:.0%}" if interval.n > 1 else ""
    return f"{interval.median:.1f}{spread}" + ("" if record["valid"] else "!")


def _ratio(interval: Interval) -> str:
    return f"{interval.median:.2f}x" + (f" [{interval.low:.2f}, {interval.high:.2f}]" if interval.n > 1 else "")


def format_table(records: list[dict], snapshot: dict | None = None) -> str:
    """Rows = sizes, columns = algorithms, cells = the median time (us) ±its interval; '!' marks a failed
    validation. Below: how many rounds ran and why they stopped, and the machine's state before the job."""
    algorithms = list(dict.fromkeys(r["algorithm"] for r in records))
    cells = {(r["nbytes"], r["algorithm"]): r for r in records}
    width = max(14, *(len(a) + 2 for a in algorithms))
    lines = ["size".rjust(8) + "".join(a.rjust(width) for a in algorithms) + "  best: x faster than mpi [95%]"]
    for nbytes in sorted({r["nbytes"] for r in records}):
        row = [cells.get((nbytes, a)) for a in algorithms]
        text = "".join(_cell(r).rjust(width) if r else "-".rjust(width) for r in row)
        best = min((r for r in row if r), key=lambda r: r["avg_us"])
        mpi = cells.get((nbytes, "mpi"))
        ratio = f" ({_ratio(speedup(mpi, best))})" if mpi else ""
        lines.append(format_size(nbytes).rjust(8) + text + f"  {best['algorithm']}{ratio}")
    p = records[0]["p"] if records else "?"
    chose = [f"{format_size(r['nbytes'])}: {r['chose']['algorithm']}"
             + "".join(f" {k}={v}" for k, v in sorted(r["chose"]["options"].items()))
             + f" ({r['chose']['source']})" for r in records if "chose" in r]
    mode = records[0].get("mode", "barrier") if records else "barrier"
    bare = any(r.get("entry") == "comm.Bcast" for r in records)
    title = (f"broadcast time per call (us, average over {p} ranks), {mode}"
             + ("; mpi = bare comm.Bcast" if bare else "")
             + f"; median over rounds ±the larger half of its {CONFIDENCE:.0%} interval")
    alone = ("\non 1 rank nothing moves between ranks: these are the calls' fixed costs, not their speeds"
             if p == 1 else "")
    return (title + "\n" + "\n".join(lines)
            + ("\nauto chose: " + "; ".join(chose) if chose else "") + alone
            + "\n" + rounds_note(records) + (f"\nmachine before the job: {_state(snapshot)}" if snapshot else ""))


def rounds_note(records: list[dict]) -> str:
    """How many rounds the points got and why they stopped, in one line."""
    counts = [r.get("rounds", 1) for r in records] or [1]
    why: dict[str, int] = {}
    for r in records:
        why[r.get("stopped", "rounds")] = why.get(r.get("stopped", "rounds"), 0) + 1
    reasons = {"narrow": "interval within the target", "budget": "time budget spent",
               "max_rounds": "round limit reached", "rounds": "rounds as asked"}
    spread = f"{min(counts)}" if min(counts) == max(counts) else f"{min(counts)} to {max(counts)}"
    note = f"rounds per point: {spread}; stopped: " + ", ".join(f"{n} {reasons[k]}" for k, n in why.items())
    if min(counts) < MIN_ROUNDS:
        note += (f"\nwith fewer than {MIN_ROUNDS} rounds no pair of rounds brackets the median at {CONFIDENCE:.0%}: "
                 "± is then the range of the rounds, surer the more rounds")
    return note


def _state(snapshot: dict) -> str:
    state = Snapshot(snapshot["cores"], snapshot["load"], snapshot.get("ranks"))
    return state.text() + (f"; busy: {state.advice()}" if state.busy else "")


def write_outputs(args, records: list[dict], p: int, meta: dict, sweeps: list[dict]) -> None:
    """The JSON (records, how each job's rounds went, the machine before it), CSV and plot that ``args`` ask for."""
    snapshot = sweeps[0].get("snapshot") if sweeps else None
    if args.json_path:
        data = {"schema": SCHEMA, "provenance": provenance(WHAT, meta["command"]), "metadata": meta,
                "snapshot": snapshot, "sweeps": sweeps, "records": records}  # asks git before the file is truncated
        with open(args.json_path, "w") as f:
            json.dump(data, f, indent=1)
    if args.csv_path:
        with open(args.csv_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(_csv_row(r, snapshot) for r in records)
    if args.plot_path:
        import matplotlib  # here, not at the top: only a plot needs it

        from gpulab.bcast.plots.drawings import sweep_figure

        matplotlib.use("Agg")
        fig = sweep_figure(records)
        fig.suptitle(f"broadcast on {p} ranks ({meta['mpi']})")
        fig.savefig(args.plot_path, dpi=120)
    for path in (args.json_path, args.csv_path, args.plot_path):
        if path:
            print(f"wrote {path}")


def _csv_row(r: dict, snapshot: dict | None) -> dict:
    avg, worst = r.get("avg_interval_us", {}), r.get("max_interval_us", {})
    return {**r, "schema_version": SCHEMA["version"], "options": json.dumps(r["options"]),
            "chose": json.dumps(r["chose"]) if "chose" in r else "",
            "avg_low_us": avg.get("low"), "avg_high_us": avg.get("high"), "max_low_us": worst.get("low"),
            "max_high_us": worst.get("high"), "confidence": avg.get("confidence"),
            "rounds_us": json.dumps(r.get("rounds_us")), "rounds_max_us": json.dumps(r.get("rounds_max_us")),
            "cores": (snapshot or {}).get("cores"), "load_before": (snapshot or {}).get("load")}
