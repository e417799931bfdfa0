"""Whole notebooks 02 and 05 for one learner alone, then for several at the same time: wall times per notebook.

    python scripts/class_times.py --learners 3        # prints a markdown table (docs/cluster.md, "Running a class")

Each learner is a kernel of its own (own IPYTHONDIR, own emulated cluster: notebook_engines(4, nodes=2)),
executed strictly (every cell's reply "ok") with the test suite's notebook runner. The learners run as
the user running this script, on this machine, without a hub: tests/slurm/test_class.py runs the
notebooks' measuring cells, reduced, through the hub and Slurm.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ("02_broadcast_explorer.ipynb", "05_mesh_explorer.ipynb")


def one_learner(out: str) -> None:
    """Run both notebooks one after the other in this process; write {notebook: seconds} to out."""
    sys.path.insert(0, str(ROOT))
    from tests.notebooks.nbrun import NOTEBOOKS as FOLDER
    from tests.notebooks.nbrun import execute

    times = {}
    with tempfile.TemporaryDirectory(prefix="gpulab-learner-") as tmp:
        for name in NOTEBOOKS:
            t0 = time.monotonic()
            execute(FOLDER / name, ipython_dir=Path(tmp) / "ipython", cell_timeout=600)
            times[name] = time.monotonic() - t0
    Path(out).write_text(json.dumps(times))


def learners_at_once(n: int) -> list[dict]:
    """n learners started together; each one's {notebook: seconds}."""
    with tempfile.TemporaryDirectory(prefix="gpulab-class-") as tmp:
        outs = [os.path.join(tmp, f"learner{i}.json") for i in range(n)]
        procs = [subprocess.Popen([sys.executable, __file__, "--one", out], cwd=ROOT) for out in outs]
        failed = [i for i, proc in enumerate(procs) if proc.wait() != 0]
        if failed:
            raise SystemExit(f"learner(s) {failed} failed")
        return [json.loads(Path(out).read_text()) for out in outs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=3)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: one learner, results to this file
    args = parser.parse_args()
    if args.one:
        one_learner(args.one)
        return
    load = os.getloadavg()[0]  # other work on the machine: the times mean little without it
    alone = learners_at_once(1)[0]
    together = learners_at_once(args.learners)
    print(f"| notebook | 1 learner alone | {args.learners} learners at once (each) | slowdown |")
    print("|---|---|---|---|")
    for name in NOTEBOOKS:
        each = [t[name] for t in together]
        print(f"| {name} | {alone[name]:.0f} s | {', '.join(f'{s:.0f}' for s in each)} s | "
              f"{sum(each) / len(each) / alone[name]:.1f}x |")
    print(f"\n{os.cpu_count()} cores, load average at the start: {load:.1f}")


if __name__ == "__main__":
    main()
