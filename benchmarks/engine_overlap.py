"""Is the overlap real? Each switch alone and together, three ways of making MPI progress, on 4 ranks.

    python benchmarks/engine_overlap.py run       # docs/results/engine_overlap_p4.json (about 5 minutes)
    python benchmarks/engine_overlap.py report    # docs/engine_overlap.md

Grids chosen so each switch has something to act on: (2, 1, 2, 1) row and
depth, (1, 1, 2, 2) depth and data, (1, 1, 1, 4) data only, (4, 1, 1, 1) row
only. With test-polling progress: off, each switch alone, all four. Then all
four with gpulab's progress thread, with no progress at all (the control),
and with MPICH's own progress thread (MPIR_CVAR_ASYNC_PROGRESS=1; one round:
it is slow), each beside its own overlap-off run, and the bucket size swept
on the data-parallel grid. Every setting is
timed in interleaved rounds (``gpulab.engine.perf.timing`` in the scoreboard's ``engine`` job,
``gpulab.scoreboard.on_ranks``); each record's times are medians over rounds with their 95% interval,
``rounds`` keeps every round's, and the load average around each invocation is recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
OUT = RESULTS / "engine_overlap_p4.json"
sys.path.insert(0, str(ROOT))

from gpulab.launch import mpiexec_command  # noqa: E402
from gpulab.stats import Interval  # noqa: E402

SHAPES = "2,1,2,1;1,1,2,2;1,1,1,4;4,1,1,1"
# (label, progress, overlap list, extra env, shapes, bucket KiB, rounds: None = --rounds)
PLAN = [("poll", "poll", "none;oar;ors;oag;cache;buckets;all", {}, SHAPES, 256, None),
        ("thread", "thread", "none;all", {}, SHAPES, 256, None),
        ("no progress", "none", "none;all", {}, SHAPES, 256, None),
        ("MPICH progress thread", "mpich", "none;all", {"MPIR_CVAR_ASYNC_PROGRESS": "1"}, SHAPES, 256, 1),
        ("buckets 64 KiB", "poll", "buckets", {}, "1,1,1,4", 64, None),
        ("buckets 1 MiB", "poll", "buckets", {}, "1,1,1,4", 1024, None)]


def run(args) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    records = []
    for label, progress, overlaps, extra, shapes, bucket_kb, rounds in PLAN:
        raw = RESULTS / "engine_overlap.raw.json"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               **extra}
        before = os.getloadavg()[0]
        job = {"shapes": [[int(v) for v in s.split(",")] for s in shapes.split(";")], "overlaps": overlaps.split(";"),
               "progress": progress, "bucket_kb": bucket_kb, "batch_size": 16, "iters": args.iters,
               "rounds": rounds or args.rounds, "warmup": 2}
        cmd = mpiexec_command(4, ["-m", "gpulab.scoreboard.on_ranks", "engine", json.dumps(job), str(raw)])
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        for r in json.loads(raw.read_text()):
            r.pop("per_rank", None)
            records.append({"setting": label, "load_before": before, "load_after": os.getloadavg()[0], **r})
        raw.unlink()
        print(f"{label}: done (load {before:.1f} -> {os.getloadavg()[0]:.1f})", flush=True)
    from gpulab.records import provenance

    record = {"provenance": provenance(__doc__), "date": time.strftime("%Y-%m-%d %H:%M"), "iters": args.iters,
              "rounds": args.rounds, "records": records}
    (Path(args.out) if args.out else OUT).write_text(json.dumps(record, indent=1))


def _paired(row, base) -> str:
    """Round i of a setting against round i of overlap-off in the same invocation: the two ran
    next to each other in time, under about the same load, so their ratio cancels most of it."""
    if base is None or row is base or len(row["iter_s_rounds"]) < 3:
        return "-"
    q = np.quantile([a / b for a, b in zip(row["iter_s_rounds"], base["iter_s_rounds"])], [0.25, 0.5, 0.75])
    return f"{q[1]:.2f} [{q[0]:.2f}, {q[2]:.2f}]"


def summary(recs) -> str:
    """All four switches against overlap off, per progress mode and grid: time, exposed, hidden."""
    out = ["## Summary: all four switches against overlap off, per progress mode\n",
           "| progress | grid | iteration, paired median ratio | exposed comm ms, off -> on | hidden ms (on) |",
           "|---|---|---|---|---|"]
    for label in ("poll", "thread", "no progress", "MPICH progress thread"):
        for shape in [[int(v) for v in t.split(",")] for t in SHAPES.split(";")]:
            rows = {r["overlap_label"]: r for r in recs if r["setting"] == label and r["shape"] == shape}
            off = rows.get("none")
            # the second label is the one records written under the switches' earlier names carry
            on = rows.get("oar+ors+oag+cache+buckets") or rows.get("async_grads+prefetch+cache+buckets")
            if off and on:
                ratio = (_paired(on, off) if len(on["iter_s_rounds"]) >= 3
                         else f"{on['iter_s'] / off['iter_s']:.2f} (one round)")
                out.append(f"| {label} | {tuple(shape)} | {ratio} | {off['summary']['exposed_comm_s'] * 1e3:.1f} -> "
                           f"{on['summary']['exposed_comm_s'] * 1e3:.1f} | "
                           f"{on['summary']['hidden_comm_s'] * 1e3:.1f} |")
    return "\n".join(out) + "\n"


def report(args) -> None:
    data = json.loads(OUT.read_text())
    recs = data["records"]
    medians = all("iter_s_interval" in r for r in recs)  # records of gpulab bench engine's medians
    kept = "the median over them with its 95% interval" if medians else "the best round kept"
    lines = [HEAD.format(date=data["date"], iters=data["iters"], rounds=data["rounds"], kept=kept,
                         which="the median round" if medians else "the best round")]
    for shape in [s.split(",") for s in SHAPES.split(";")]:
        shape = [int(v) for v in shape]
        rows = [r for r in recs if r["shape"] == shape]
        bases = {r["setting"]: r for r in rows if r["overlap_label"] == "none"}
        lines.append(f"\n## grid {tuple(shape)}\n")
        lines.append("| progress | overlap | ms/iter: " + ("median [95% interval]" if medians else "best")
                     + " (every round) | " + ("median" if medians else "best") + " vs off | paired vs off: median "
                     "[quartiles] | exposed comm ms | hidden comm ms | weight cache KiB | load |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            s = r["summary"]
            bucket = f" ({r['overlap']['bucket_bytes'] >> 10} KiB)" if r["overlap"]["buckets"] else ""
            rounds = ", ".join(f"{t * 1e3:.0f}" for t in r["iter_s_rounds"])
            time = (Interval.from_dict(r["iter_s_interval"]).scaled(1e3).text() if medians
                    else f"{r['iter_s'] * 1e3:.1f}")
            lines.append(f"| {r['setting']} | {r['overlap_label']}{bucket} | {time} ({rounds}) | "
                         f"{r['iter_s'] / bases.get(r['setting'], bases['poll'])['iter_s']:.2f} | "
                         f"{_paired(r, bases.get(r['setting']))} | {s['exposed_comm_s'] * 1e3:.1f} | "
                         f"{s['hidden_comm_s'] * 1e3:.1f} | {r['memory']['weight_cache'] / 1024:.0f} | "
                         f"{r['load_before']:.1f}-{r['load_after']:.1f} |")
    lines.insert(1, summary(recs))
    from engine_ablation import OUT as ABLATION  # its record, if there is one, stays in the doc
    from engine_ablation import section

    ablation = section() if ABLATION.exists() else ""
    (ROOT / "docs" / "engine_overlap.md").write_text("\n".join(lines) + "\n" + ablation + TAIL)
    print("wrote docs/engine_overlap.md")


HEAD = """# Overlap on this machine: measured

`python benchmarks/engine_overlap.py run` ({date}; {iters} timed iterations per setting, {rounds}
interleaved rounds, {kept}: every round is listed), then `... report`. 4 ranks on 2 cores, the model of
docs/engine_bench.md (2 layers, n_embd 128, batch 16 x 64 tokens, float32). "exposed" = time the
ranks sat inside MPI, "hidden" = time a collective was in flight while its rank computed
(``gpulab.engine.parallel.timeline``), both per iteration, mean over ranks, in {which}. "Paired": the
rounds of one invocation are interleaved, so round i of a setting and round i of overlap-off ran
side by side; the median of their ratios is the least load-sensitive comparison here. Numbers are identical with every
setting (tests/engine/test_overlap.py checks it bit for bit). Switch names: AxoNN's OAR (``oar``, the dX
all-reduce), ORS (``ors``, the dW reduce-scatter), OAG (``oag``, the all-gather one layer ahead), then ``cache``
and ``buckets``; records made before OAR and ORS were split say ``async_grads`` (= oar+ors) and ``prefetch``
(= oag). Load = load average around the
invocation: other jobs share these cores, so compare rows of one invocation (one "progress" label)
first.
"""
TAIL = """
## What the numbers say, and why

Progress is what makes overlap real: a non-blocking MPI collective moves only while some thread of
its rank is inside MPI. With "no progress" the collectives are issued early but complete at the
final wait (hidden time there is in-flight time, not moved bytes). With MPI_Test after each kernel
("poll") they move between kernels; gpulab's progress thread (MPI_Iprobe every 1 ms, sleeping in
between) also moves them during a long kernel. MPICH's own progress thread spins on a core: with 4
ranks already sharing 2 cores it takes cycles from the computation, which is why it is not the
engine's default. On this machine there is no copy engine and no NIC: shared-memory collectives
are copies done by the same cores that compute, so what overlap can hide is waiting (for a peer
that is still computing, or not scheduled) rather than data movement; on GPUs NCCL's collectives
run as kernels on a few of the SMs and move data over NVLink and the NIC while the other SMs compute,
and the performance model's GPU profiles assume they hide fully behind the computation they overlap.

The progress thread waits on an event (blocking, without the GIL) while no collective is in flight,
and probes only while one is: each wake-up takes the GIL from the main thread, and with more ranks
than cores the main thread can then wait until the thread gets a core. What no progress mode removes
here: with overlap on, the timeline's compute grows, because on shared cores the collectives' copies
and reductions take the cycles the kernels would have used; hidden communication is not free on this
machine (docs/engine_model_accuracy.md measures what an overlapped call costs, and why the model
prices overlap on shared cores as hiding nothing).
"""


if __name__ == "__main__":
    from run_report import main

    main(__doc__, run, report)
