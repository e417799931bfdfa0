"""The pipeline bubble, measured: 4 stages on 4 ranks, 1F1B and GPipe, 4 and 8 micro-batches.

    python benchmarks/engine_pipeline.py       # about a minute; re-launches itself on 4 ranks
    # -> docs/results/engine_pipeline_p4.json, docs/results/engine_pipeline_p4.png

Mesh (1, 1, 1, 1) with pipe=4: one rank per stage, a GPT of 8 blocks (two per
stage) and a small vocabulary (64), so that the embedding (first stage) and the
LM head and loss (last stage) add little to their stage's work; float32.
Each setting runs 2 warm-up steps, then ``--steps`` recorded steps
(``timeline.record``); the step kept is the fastest (other jobs on the
machine only add time). Per rank, busy = the time inside its micro-batch
phases (forward and backward); idle = the step's wall time (all ranks on one
clock) minus busy. The mean idle share is set beside the bubble formula
(p-1)/(m+p-1), which assumes every stage's forward and backward take the same
time (here the first stage also embeds and the last computes the LM head and
the loss, so they are not quite equal).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
sys.path.insert(0, str(ROOT))

from gpulab.launch import inside_mpi_job, mpiexec_command  # noqa: E402

PIPE = 4
VOCAB = 64
SETTINGS = [("1f1b", 4), ("1f1b", 8), ("gpipe", 8)]  # (schedule, micro-batches)


def measure(args) -> None:
    import numpy as np
    from mpi4py import MPI

    from gpulab.engine import GPTConfig, Mesh, ParallelGPT, init_params
    from gpulab.engine.parallel import timeline
    from gpulab.engine.parallel.pipeline import bubble_fraction

    comm = MPI.COMM_WORLD
    cfg = GPTConfig(vocab_size=VOCAB, block_size=64, n_layer=2 * PIPE, n_head=4, n_embd=args.n_embd,
                    dtype="float32")
    mesh = Mesh(1, 1, 1, 1, comm=comm, pipe=PIPE)
    rng = np.random.default_rng(0)
    idx, targets = (rng.integers(0, cfg.vocab_size, (args.batch, cfg.block_size)) for _ in range(2))
    rows, kept = [], {}
    for kind, micro in SETTINGS:
        gpt = ParallelGPT(cfg, mesh, micro_batches=micro, schedule=kind)
        gpt.load_params(init_params(cfg))
        for _ in range(2):
            gpt.forward_backward(idx, targets)
        best = None
        for _ in range(args.steps):
            with timeline.record() as tl:
                gpt.forward_backward(idx, targets)
            everyone = timeline.gather(tl, comm, root=0)
            if comm.rank == 0:
                t0 = min(e["start"] for ev in everyone for e in ev)
                t1 = max(e["end"] for ev in everyone for e in ev)
                if best is None or t1 - t0 < best[0]:
                    best = (t1 - t0, everyone)
        if comm.rank == 0:
            wall, everyone = best
            busy = [sum(e["end"] - e["start"] for e in ev if e["kind"] == "phase" and "micro" in e)
                    for ev in everyone]
            idle = [1 - b / wall for b in busy]
            rows.append({"schedule": kind, "micro_batches": micro, "pipe": PIPE, "step_s": wall,
                         "idle_share_per_rank": idle, "idle_share_mean": sum(idle) / len(idle),
                         "bubble_formula": bubble_fraction(PIPE, micro)})
            kept[(kind, micro)] = everyone
            print(f"{kind:6s} m={micro}: step {wall * 1e3:7.1f} ms, idle share {rows[-1]['idle_share_mean']:.2f} "
                  f"(formula (p-1)/(m+p-1) = {bubble_fraction(PIPE, micro):.2f})", flush=True)
    mesh.free()
    if comm.rank == 0:
        write(rows, kept, args)


def write(rows, kept, args) -> None:
    from matplotlib.figure import Figure

    from gpulab.engine.parallel.timeline_plot import gantt

    RESULTS.mkdir(parents=True, exist_ok=True)
    from gpulab.records import provenance

    record = {"provenance": provenance(__doc__, "python benchmarks/engine_pipeline.py"),
              "command": "python benchmarks/engine_pipeline.py", "model": {"n_layer": 2 * PIPE, "vocab_size": VOCAB,
              "n_embd": args.n_embd, "block_size": 64, "batch": args.batch, "dtype": "float32"},
              "load_before": args.load_before, "load_after": os.getloadavg()[0], "cpus": os.cpu_count(), "rows": rows}
    (RESULTS / "engine_pipeline_p4.json").write_text(json.dumps(record, indent=1) + "\n")
    fig = Figure(figsize=(12, 7.5), layout="constrained")
    axes = fig.subplots(len(SETTINGS), 1)
    for ax, row in zip(axes, rows):
        gantt(kept[(row["schedule"], row["micro_batches"])], ax=ax,
              title=f"{row['schedule']}, pipe={PIPE}, m={row['micro_batches']}: idle "
                    f"{row['idle_share_mean']:.0%} of the step (bubble formula {row['bubble_formula']:.0%})")
    fig.savefig(RESULTS / "engine_pipeline_p4.png", dpi=110)
    print(f"wrote {RESULTS / 'engine_pipeline_p4.json'} and .png", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="recorded steps per setting (default 3)")
    parser.add_argument("--batch", type=int, default=32, help="global batch, sequences (default 32)")
    parser.add_argument("--n-embd", type=int, default=128, help="model width (default 128)")
    parser.add_argument("--load-before", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if inside_mpi_job():
        measure(args)
        return
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    cmd = mpiexec_command(PIPE, [str(Path(__file__).resolve()), *sys.argv[1:],
                                 "--load-before", str(os.getloadavg()[0])])
    sys.exit(subprocess.run(cmd, env=env).returncode)


if __name__ == "__main__":
    main()
