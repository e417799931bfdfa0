"""Explored 2026-12-05 before the fit calibrated a data wait: the gradient all-reduce over the data group
charged a wait or not, scored on the recorded runs.

    python docs/results/engine_accuracy_data_wait_explored/score_data_wait.py [FOLDER]

For each record in FOLDER (default docs/results/engine_accuracy_before_data_wait/, the runs of the
table then, whose fits calibrated the col and row waits) every grid is priced by the model as its fit
left it, with no data wait; the record's own measurement of (1, 1, 1, W) with overlap off gives the
excess of that iteration over the model, which the rule "data" charges, once an iteration, to the
gradient all-reduce over the data group of every grid with data parallelism (``data_wait``, priced
by the model itself). Both rules are scored as benchmarks/engine_accuracy.py scores the model (median
error with the grids the fit calibrated on left out, (1, 1, 1, W) among them for both, so that the
two rules are scored on the same grids; the pick over every grid).
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
from gpulab.engine.perf.calibration import calibrated_on  # noqa: E402
from gpulab.engine.perf.fitted_machine import FittedMachine  # noqa: E402

SETTINGS = ("1x4_machine", "1x8_machine", "2x2_block_100mbit", "2x2_round-robin_100mbit", "2x2_block_1gbit",
            "2x2_round-robin_1gbit", "4x2_block_100mbit", "4x2_round-robin_100mbit", "4x2_block_1gbit",
            "4x2_round-robin_1gbit")
RULES = ("none", "data")


def score(record: dict) -> tuple[dict, float]:
    world = record["world"]
    machine = replace(FittedMachine.from_dict(record["machine"]), data_wait=0.0)
    grid = next(r for r in record["rows"] if r["shape"] == [1, 1, 1, world] and overlap_setting(r) == "off")
    wait = max(grid["iter_s"] - predict_row(grid, machine)["iter_s"], 0.0)  # its one gradient all-reduce
    charged = replace(machine, data_wait=wait)
    left_out = set(calibrated_on(charged))
    out = {}
    for rule, priced_on in (("none", machine), ("data", charged)):
        for setting in ("off", "on"):
            these = [r for r in record["rows"] if overlap_setting(r) == setting]
            measured = np.array([r["iter_s"] for r in these])
            predicted = np.array([predict_row(r, priced_on)["iter_s"] for r in these])
            scored = np.array([tuple(r["shape"]) not in left_out for r in these])
            error = np.abs(predicted - measured)[scored] / measured[scored]
            out.setdefault(rule, {})[setting] = (float(np.median(error)),
                                                 float(measured[np.argmin(predicted)] / measured.min()))
    return out, wait


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "results" / "engine_accuracy_before_data_wait"
    meets = dict.fromkeys(RULES, 0)
    for setting in SETTINGS:
        limit = TARGET["machine" if "machine" in setting else "emulated"]
        for path in sorted(folder.glob(f"engine_accuracy_{setting}_run*.json")):
            scores, wait = score(json.loads(path.read_text()))
            line = []
            for rule in RULES:
                ok = all(err <= limit and pick <= 1.05 for err, pick in scores[rule].values())
                meets[rule] += ok
                line.append(f"{rule} " + " ".join(f"{err:5.1%}/{pick:.2f}" for err, pick in scores[rule].values())
                            + (" meets" if ok else "      "))
            name = path.stem[len("engine_accuracy_"):]
            print(f"{name:29s} " + " | ".join(line) + f" (data wait {wait * 1e3:.1f} ms)")
    print("runs meeting the targets:", ", ".join(f"{rule} {n}" for rule, n in meets.items()))


if __name__ == "__main__":
    main()
