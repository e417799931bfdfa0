"""Explored 2026-12-04, not kept: a per-call cost calibrated on one measured grid, scored on the recorded runs.

    python docs/results/engine_accuracy_calibration_explored/score_calibration.py

For each record (docs/results/engine_accuracy_*_run*.json) the grid (1, W, 1, 1) with overlap off gives the
excess of its iteration over the model, per col all-reduce; every row/col all-reduce of group size g in the
other grids is then charged (g - 1) / (W - 1) of it (a ring's steps). Scored on the other grids, as
benchmarks/engine_accuracy.py scores the model (median error, pick within 5%), and then, for each of the
record's own tensor all-reduces, what the timeline measured over the fit's price, by the grid's data and
depth dimensions.
"""

import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from gpulab.engine.perf.fitted_machine import FittedMachine  # noqa: E402

SETTINGS = ("1x4_machine", "1x8_machine", "2x2_block_1gbit", "2x2_round-robin_1gbit", "4x2_block_1gbit",
            "4x2_round-robin_1gbit", "2x2_block_100mbit", "2x2_round-robin_100mbit", "4x2_block_100mbit",
            "4x2_round-robin_100mbit")


def calls(row: dict, group: str) -> float:
    return row["summary"]["groups"].get(group, {}).get("calls", 0)


def score(record: dict, calibrate: bool) -> dict:
    world = record["world"]
    cal = next(r for r in record["rows"] if r["shape"] == [1, world, 1, 1] and r["overlap_label"] == "none")
    excess = (cal["iter_s"] - cal["prediction"]["iter_s"]) / calls(cal, "col") if calibrate else 0.0
    out = {}
    for setting in ("off", "on"):
        rows = [r for r in record["rows"] if (r["overlap_label"] == "none") == (setting == "off")]
        measured = np.array([r["iter_s"] for r in rows])
        predicted = np.array([r["prediction"]["iter_s"] + sum(
            excess * (g - 1) / (world - 1) * calls(r, group)
            for g, group in ((r["shape"][0], "row"), (r["shape"][1], "col")) if g > 1) for r in rows])
        scored = np.array([not calibrate or r["shape"] != [1, world, 1, 1] for r in rows])
        error = float(np.median(abs(predicted[scored] - measured[scored]) / measured[scored]))
        out[setting] = (error, float(measured[np.argmin(predicted)] / measured.min()))
    return out


def by_data_and_depth(record: dict) -> dict:
    machine, out = FittedMachine.from_dict(record["machine"]), {}
    for r in record["rows"]:
        if r["overlap_label"] != "none":
            continue
        R, C, D, P = r["shape"]
        for group, g, stride in (("col", C, 1), ("row", R, C)):
            if g > 1 and group in r["summary"]["groups"]:
                v = r["summary"]["groups"][group]
                price = machine.collective_s("all_reduce", g, stride, v["bytes"] / v["calls"])
                out.setdefault((P, D), []).append(v["exposed_s"] / v["calls"] / price)
    return out


def main() -> None:
    meets = {False: 0, True: 0}
    for setting in SETTINGS:
        limit = 0.20 if "machine" in setting else 0.10
        ratios: dict = {}
        for run in (1, 2, 3):
            record = json.loads((ROOT / "docs" / "results" / f"engine_accuracy_{setting}_run{run}.json").read_text())
            line = []
            for calibrate in (False, True):
                s = score(record, calibrate)
                ok = all(err <= limit and pick <= 1.05 for err, pick in s.values())
                meets[calibrate] += ok
                line.append(" ".join(f"{err:.1%}/{pick:.2f}" for err, pick in s.values()) + (" meets" if ok else ""))
            print(f"{setting} run {run}: model {line[0]} | calibrated {line[1]}")
            for key, values in by_data_and_depth(record).items():
                ratios.setdefault(key, []).extend(values)
        print("  tensor all-reduces, timeline / fit: " + ", ".join(
            f"data {P} depth {D} {statistics.median(v):.2f}" for (P, D), v in sorted(ratios.items())))
    print(f"runs that meet: model {meets[False]}, calibrated {meets[True]} of {3 * len(SETTINGS)}")


if __name__ == "__main__":
    main()
