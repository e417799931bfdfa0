"""Where does the ranks' wait fall on several nodes? Scored offline on the recorded runs of
docs/engine_model_accuracy.md (explored 2026-12-04, not kept; see README.md beside this file).

    python docs/results/engine_accuracy_core_sharing_explored/score_core_sharing.py > output.txt

1. Each 2 x 2 grid's measured iteration (overlap off) beyond the model's price, block against
   round-robin placement: does the wait follow the group's members sharing a node's core?
2. The engine's timeline per row/col group over the model's price for it, by where the members sit.
3. Three rules for charging a calibrated wait on several nodes, each scored on every run (the
   calibration grid measured in the run itself stands in for the fit's, and is left out of the error).
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from benchmarks.engine_accuracy import PICK, TARGET, overlap_setting  # noqa: E402
from benchmarks.engine_grids import predict_row  # noqa: E402
from gpulab.engine import GPTConfig  # noqa: E402
from gpulab.engine.perf import predict as model  # noqa: E402
from gpulab.engine.perf.calibration import calibrated_on  # noqa: E402
from gpulab.engine.perf.fitted_machine import FittedMachine  # noqa: E402
from gpulab.engine.perf.pick_validation import validate  # noqa: E402
from gpulab.engine.perf.terms import comm_rows, stride  # noqa: E402

RESULTS = ROOT / "docs" / "results"


def nodes_of(record: dict) -> list[int]:
    """Each rank's node: block puts ranks 0, 1 on the first node, round-robin deals them out."""
    world = record["world"]
    if record.get("nodes", 1) < 2:
        return [0] * world
    n, r = record["nodes"], record["ranks_per_node"]
    return [i // r for i in range(world)] if record["placement"] == "block" else [i % n for i in range(world)]


def members(nodes: list[int], size: int, step: int) -> list[int]:
    """The nodes of rank 0's group (the engine's groups are translates of it)."""
    return [nodes[i * step] for i in range(size)]


def tensor_calls(config, shape, batch, seq):
    return [r for r in comm_rows(config, shape, batch, seq)
            if r["op"] == "all_reduce" and r["group"] in ("row", "col") and r["group_size"] > 1]


def excess_table() -> list[str]:
    lines = ["| grid | " + " | ".join(f"{p} run {i}" for p in ("block", "round-robin") for i in (1, 2, 3)) + " |",
             "|---|" + "---|" * 6]
    cells: dict = {}
    for placement in ("block", "round-robin"):
        for run in (1, 2, 3):
            record = json.loads((RESULTS / f"engine_accuracy_2x2_{placement}_1gbit_run{run}.json").read_text())
            machine = FittedMachine.from_dict(record["machine"])
            for row in record["rows"]:
                if overlap_setting(row) == "off":
                    excess = (row["iter_s"] - predict_row(row, machine)["iter_s"]) * 1e3
                    cells.setdefault(tuple(row["shape"]), []).append(f"{excess:+.1f}")
    for shape, values in sorted(cells.items()):
        lines.append(f"| {shape} | " + " | ".join(values) + " |")
    return lines


def group_table() -> list[str]:
    by: dict = {}
    for path in sorted(RESULTS.glob("engine_accuracy_*x2_*_run*.json")):
        record = json.loads(path.read_text())
        machine, nodes = FittedMachine.from_dict(record["machine"]), nodes_of(record)
        setting = path.name.removeprefix("engine_accuracy_").rsplit("_run", 1)[0]
        for row in record["rows"]:
            if overlap_setting(row) != "off":
                continue
            priced = predict_row(row, machine)["groups"]
            for group, size in (("row", row["shape"][0]), ("col", row["shape"][1])):
                timeline = row["summary"]["groups"].get(group)
                if size < 2 or not timeline or not priced[group]["exposed_s"]:
                    continue
                on = members(nodes, size, stride(group, row["shape"]))
                spread = len(set(on))
                where = "one node" if spread == 1 else "across, two on a node" if spread < size else "across"
                by.setdefault((setting, where), []).append(timeline["exposed_s"] / priced[group]["exposed_s"])
    lines = ["| setting | the group's members | groups | timeline / model, median (range) |", "|---|---|---|---|"]
    for (setting, where), ratios in sorted(by.items()):
        lines.append(f"| {setting} | {where} | {len(ratios)} | {statistics.median(ratios):.2f}x "
                     f"({min(ratios):.2f}-{max(ratios):.2f}) |")
    return lines


RULES = {
    "as it is": "the model as it is (a wait calibrated on one node only)",
    "all, on (1, W, 1, 1)": "every row/col all-reduce with two members on one node waits; calibrated on (1, W, 1, 1)",
    "one node, on the smallest": "only groups whose members all sit on one node wait; calibrated on the smallest grid "
                                 "whose row/col groups all do",
}


def score(path: Path, rule: str) -> tuple[dict, bool]:
    record = json.loads(path.read_text())
    machine = FittedMachine.from_dict(record["machine"])
    nodes, world = nodes_of(record), record["world"]
    kind = "machine" if path.name.endswith(tuple(f"machine_run{i}.json" for i in (1, 2, 3))) else "emulated"
    if rule == "as it is" or kind == "machine":  # on one node every rule is the fit's own calibration
        return _scored(record, machine, calibrated_on(machine), kind)
    shared_core = world > record["cpus"]  # every emulated setting here: 4 or 8 ranks on 2 cores
    intra = rule.startswith("one node")

    def waits(size: int, step: int) -> bool:
        on = members(nodes, size, step)
        return shared_core and (len(set(on)) == 1 if intra else len(set(on)) < len(on))

    off = [r for r in record["rows"] if overlap_setting(r) == "off"]
    config = GPTConfig.from_dict(off[0]["config"])
    seq = off[0].get("seq_len") or config.block_size
    candidates = []
    for r in off:
        shape = tuple(r["shape"])
        calls = tensor_calls(config, shape, r["batch_size"], seq)
        weight = sum(c["count"] * (c["group_size"] - 1) for c in calls if waits(c["group_size"], c["stride"]))
        others = sum(c["count"] for c in calls if not waits(c["group_size"], c["stride"]))
        if weight and shape[2] == 1 and (not intra or others == 0) and (intra or shape == (1, world, 1, 1)):
            candidates.append((shape[0] * shape[1], -weight, shape, r))
    plain = replace(machine, call_wait=0.0)
    if not candidates:
        return _scored(record, plain, None, kind)
    _, negative_weight, grid, r = min(candidates, key=lambda c: c[:2])
    unit = max(0.0, (r["iter_s"] - predict_row(r, plain)["iter_s"]) / -negative_weight)
    original = model.wait_s
    model.wait_s = lambda m, row: (unit * (row["group_size"] - 1) if row["op"] == "all_reduce" and row["group"] in (
        "row", "col") and waits(row["group_size"], row["stride"]) else 0.0)
    try:
        return _scored(record, plain, grid, kind)
    finally:
        model.wait_s = original


def _scored(record, machine, left_out, kind) -> tuple[dict, bool]:
    out = {}
    for setting in ("off", "on"):
        rows = [{**r, "prediction": predict_row(r, machine)} for r in record["rows"] if overlap_setting(r) == setting]
        out[setting] = validate(rows, left_out)
    meets = all(v["median_abs_rel_error"] <= TARGET[kind] and v["pick_over_best"] <= PICK for v in out.values())
    return out, meets


def rule_table() -> list[str]:
    paths = sorted(RESULTS.glob("engine_accuracy_*_run*.json"))
    lines = ["| run | " + " | ".join(RULES) + " |", "|---|" + "---|" * len(RULES)]
    met = dict.fromkeys(RULES, 0)
    for path in paths:
        cells = []
        for rule in RULES:
            out, meets = score(path, rule)
            met[rule] += meets
            cells.append(" ".join(f"{out[s]['median_abs_rel_error']:.1%}/{out[s]['pick_over_best']:.2f}"
                                  for s in ("off", "on")) + (" meets" if meets else ""))
        name = path.name.removeprefix("engine_accuracy_").removesuffix(".json")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| runs that meet | " + " | ".join(f"{met[r]} of {len(paths)}" for r in RULES) + " |")
    return lines


if __name__ == "__main__":
    print("## 1. 2 x 2 at 1 Gbit/s: measured - predicted iteration (ms), overlap off\n")
    print("\n".join(excess_table()))
    print("\n## 2. The engine's timeline per row/col group over the model's price (overlap off)\n")
    print("\n".join(group_table()))
    print("\n## 3. Rules for the wait on several nodes: error off / on, pick / best\n")
    for rule, what in RULES.items():
        print(f"- {rule}: {what}")
    print()
    print("\n".join(rule_table()))
