"""Explored 2026-12-05 before the fit calibrated a row wait: one wait per call, or one per tensor group,
scored on the recorded runs.

    python docs/results/engine_accuracy_two_waits_explored/score_two_waits.py [FOLDER]

For each record in FOLDER (default docs/results/engine_accuracy_before_row_wait/, the runs of the
table then) every grid is priced by the model with no wait charged; the record's own measurements of
(1, W, 1, 1) and (W, 1, 1, 1) with overlap off give the excess of their iterations over the model per
col (row) all-reduce. Three rules: "none" charges nothing; "col" charges every row and col all-reduce
over g ranks (g - 1) / (W - 1) of the col grid's excess (the one-node calibration of the fits then);
"two" charges a col all-reduce that share of the col grid's excess and a row all-reduce that share of
the row grid's. Each is scored as benchmarks/engine_accuracy.py scores the model (median error with
the grids it calibrated on left out, the pick over every grid).
"""

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from benchmarks.engine_accuracy import TARGET, overlap_setting  # noqa: E402
from benchmarks.engine_grids import predict_row  # noqa: E402
from gpulab.engine.perf.fitted_machine import FittedMachine  # noqa: E402

SETTINGS = ("1x4_machine", "1x8_machine", "2x2_block_100mbit", "2x2_round-robin_100mbit", "2x2_block_1gbit",
            "2x2_round-robin_1gbit", "4x2_block_100mbit", "4x2_round-robin_100mbit", "4x2_block_1gbit",
            "4x2_round-robin_1gbit")
RULES = ("none", "col", "two")


def calls(row: dict, group: str) -> float:
    return row["summary"]["groups"].get(group, {}).get("calls", 0)


def score(record: dict, rule: str) -> tuple[dict, tuple[float, float]]:
    world = record["world"]
    machine = replace(FittedMachine.from_dict(record["machine"]), call_wait=0.0, row_wait=0.0)
    rows = [{**r, "priced": predict_row(r, machine)["iter_s"]} for r in record["rows"]]
    grid = {g: next(r for r in rows if r["shape"] == s and overlap_setting(r) == "off")
            for g, s in (("col", [1, world, 1, 1]), ("row", [world, 1, 1, 1]))}
    wait = {g: max(r["iter_s"] - r["priced"], 0.0) / calls(r, g) for g, r in grid.items()}
    if rule == "col":
        wait["row"] = wait["col"]
    left_out = set() if rule == "none" else {(1, world, 1, 1), (world, 1, 1, 1)}
    if rule == "none":
        wait = {"col": 0.0, "row": 0.0}
    charged = replace(machine, call_wait=wait["col"], row_wait=wait["row"])  # priced as the model prices waits
    out = {}
    for setting in ("off", "on"):
        these = [r for r in rows if overlap_setting(r) == setting]
        measured = np.array([r["iter_s"] for r in these])
        predicted = np.array([predict_row(r, charged)["iter_s"] for r in these])
        scored = np.array([tuple(r["shape"]) not in left_out for r in these])
        error = np.abs(predicted - measured)[scored] / measured[scored]
        out[setting] = (float(np.median(error)), float(measured[np.argmin(predicted)] / measured.min()))
    return out, (wait["col"], wait["row"])


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "results" / "engine_accuracy_before_row_wait"
    meets = dict.fromkeys(RULES, 0)
    for setting in SETTINGS:
        limit = TARGET["machine" if "machine" in setting else "emulated"]
        for path in sorted(folder.glob(f"engine_accuracy_{setting}_run*.json")):
            record, line = json.loads(path.read_text()), []
            for rule in RULES:
                s, (col, row) = score(record, rule)
                ok = all(err <= limit and pick <= 1.05 for err, pick in s.values())
                meets[rule] += ok
                line.append(f"{rule} " + " ".join(f"{err:5.1%}/{pick:.2f}" for err, pick in s.values())
                            + (" meets" if ok else "      ") + (f" (col {col * 1e3:.1f}, row {row * 1e3:.1f} ms)"
                                                                 if rule == "two" else ""))
            print(f"{path.stem[len('engine_accuracy_'):]:29s} " + " | ".join(line))
    print("runs meeting the targets:", ", ".join(f"{rule} {n}" for rule, n in meets.items()))


if __name__ == "__main__":
    main()
