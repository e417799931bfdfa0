"""The one-machine accuracy records priced again with a penalty per blocking call (explored 2026-12-04).

    python docs/results/engine_accuracy_sync_penalty_explored/score_penalty.py 0.03 0.1 0.3 \\
        "docs/results/engine_accuracy_before_call_wait/engine_accuracy_1x8_*run*.json"
    python docs/results/engine_accuracy_sync_penalty_explored/score_penalty.py 0 0.05 0 \\
        "docs/results/engine_accuracy_before_call_wait/engine_accuracy_1x4_*run*.json"

Each grid's prediction from its record's own fit, plus its compute times the mean penalty of its calls
that stop the ranks (every call over more than one rank), a share of compute per group size of 2, 4, 8
(the arguments, read off sync_penalty.py's output.txt); median error and pick before -> after.
"""

import glob
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from benchmarks.engine_accuracy import overlap_setting  # noqa: E402
from benchmarks.engine_grids import predict_row  # noqa: E402
from gpulab.engine import GPTConfig  # noqa: E402
from gpulab.engine.parallel.overlap import Overlap  # noqa: E402
from gpulab.engine.perf.fitted_machine import FittedMachine  # noqa: E402
from gpulab.engine.perf.terms import comm_rows  # noqa: E402

share = {2: float(sys.argv[1]), 4: float(sys.argv[2]), 8: float(sys.argv[3])}
for path in sorted(glob.glob(str(ROOT / sys.argv[4]))):
    record = json.loads(Path(path).read_text())
    machine = FittedMachine.from_dict(record["machine"])
    for setting in ("off", "on"):
        before, after, priced = [], [], []
        for row in record["rows"]:
            if overlap_setting(row) != setting:
                continue
            p = predict_row(row, machine)
            cfg = GPTConfig.from_dict(row["config"])
            calls = [(c["count"], c["group_size"]) for c in comm_rows(
                cfg, row["shape"], row["batch_size"], row.get("seq_len") or cfg.block_size,
                Overlap.from_dict(row["overlap"])) if c["group_size"] > 1]
            n = sum(count for count, _ in calls)
            extra = sum(count * share[min(g, 8)] for count, g in calls) / n * p["compute_s"] if n else 0.0
            before.append(abs(p["iter_s"] / row["iter_s"] - 1))
            after.append(abs((p["iter_s"] + extra) / row["iter_s"] - 1))
            priced.append((p["iter_s"] + extra, row["iter_s"], p["iter_s"]))
        best = min(m for _, m, _ in priced)
        pick_after = min(priced)[1] / best
        pick_before = min(priced, key=lambda x: x[2])[1] / best
        print(f"{Path(path).name:34} {setting:3} error {statistics.median(before):.1%} -> "
              f"{statistics.median(after):.1%}, pick {pick_before:.2f} -> {pick_after:.2f}")
