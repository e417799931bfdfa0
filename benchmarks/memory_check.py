"""Memory per rank, predicted (the calculator), accounted (``memory_report``) and traced (tracemalloc), side by side.

    python benchmarks/memory_check.py      # about two minutes on 2 cores: one job of 4 ranks, one of 8
    # -> docs/results/memory_check.json, and the markdown table of docs/memory.md on stdout

The rank function is the one tests/engine/test_memory_engine.py checks
(``tests.engine.memory_cases.memory_and_wire``): a float64 GPT (4 blocks, width
96, 8 heads, vocabulary 96, 32 tokens, batch 8), with recomputation or sequence
parallelism where the case names them, trained a warm-up step, then
one step (forward_backward + AdamW) with tracemalloc's peak reset; the traced
peak is that of numpy's arrays (Python's other objects, measured before the
step, are taken off). Per case the table shows the rank whose traced peak is
largest against what it accounts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.mpi_harness import run_mpi  # noqa: E402

CASES = {
    4: [[[1, 1, 1, 4], 1, 1, "1f1b", "none"], [[2, 2, 1, 1], 1, 1, "1f1b", "none"],
        [[1, 4, 1, 1], 1, 1, "1f1b", "none"], [[1, 1, 4, 1], 1, 1, "1f1b", "cache"],
        [[2, 1, 2, 1], 1, 1, "1f1b", "all"], [[1, 1, 2, 1], 2, 4, "1f1b", "none"],
        [[1, 1, 2, 1], 2, 4, "gpipe", "none"], [[1, 1, 2, 1], 2, 2, "1f1b", "none"],
        [[1, 1, 1, 1], 4, 4, "1f1b", "none"],
        # recomputation and sequence parallelism (tests.engine.memory_cases.MODES)
        [[4, 1, 1, 1], 1, 1, "1f1b", "none", "full"], [[4, 1, 1, 1], 1, 1, "1f1b", "none", "selective"],
        [[4, 1, 1, 1], 1, 1, "1f1b", "none", "sp"], [[2, 2, 1, 1], 1, 1, "1f1b", "none", "sp+full"],
        [[1, 1, 2, 1], 2, 4, "gpipe", "cache", "full"]],
    8: [[[2, 2, 2, 1], 1, 1, "1f1b", "all"], [[1, 2, 1, 1], 4, 8, "1f1b", "none"],
        [[1, 2, 1, 1], 4, 8, "gpipe", "none"], [[2, 2, 2, 1], 1, 1, "1f1b", "all", "sp+selective"]],
}
MB = 1e6


def table(rows: list[dict]) -> str:
    head = ("| case | rank (stage) | weights + grads + optimizer, predicted = accounted | activations predicted / "
            "accounted | weight cache | backward working set | total predicted | total accounted | traced peak | "
            "traced / accounted |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        a, p = r["accounted"], r["predicted"]
        state_p = p["weights"] + p["gradients"] + p["optimizer"]
        state_a = a["parameters"] + a["gradients"] + a["optimizer"]
        lines.append(f"| {r['case']} | {r['rank']} ({r['stage']}) | "
                     f"{state_p / MB:.3f} {'=' if state_p == state_a else '!='} {state_a / MB:.3f} MB | "
                     f"{p['activations'] / MB:.3f} / {a['activations'] / MB:.3f} MB | "
                     f"{a['weight_cache'] / MB:.3f} MB | {a['working_set'] / MB:.3f} MB | {p['total'] / MB:.2f} MB | "
                     f"{a['total'] / MB:.2f} MB | {r['traced_peak'] / MB:.2f} MB | "
                     f"{r['traced_peak'] / a['total']:.2f} |")
    return "\n".join(lines)


def main() -> int:
    rows = []
    for n, cases in CASES.items():
        per_rank = run_mpi(n, "tests.engine.memory_cases:memory_and_wire", timeout=600, cases=cases)
        for i, _ in enumerate(cases):
            ranks = [result[i] for result in per_rank]
            rows.append(max(ranks, key=lambda r: r["traced_peak"] / r["accounted"]["total"]))
    out = ROOT / "docs" / "results" / "memory_check.json"
    from gpulab.records import provenance

    out.write_text(json.dumps({"provenance": provenance(__doc__, "python benchmarks/memory_check.py"),
                               "command": "python benchmarks/memory_check.py", "rows": rows}, indent=1))
    print(table(rows))
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
