"""AxoNN against its baselines, measured live: each strategy's best grid on 4 and 8 ranks.

    python benchmarks/engine_strategies.py run -n 4                         # docs/results/engine_strategies_p4.json
    python benchmarks/engine_strategies.py run -n 8 --nodes 2 --link 1gbit  # 2 emulated nodes x 4 ranks
    python benchmarks/engine_strategies.py report   # docs/results/engine_strategies.png + docs/axonn_vs_baselines.md

One MPI job per world size: fit the performance model to this machine
(``gpulab.engine.perf.fitted_machine``), let it pick each strategy's fastest grid
(``gpulab.engine.perf.live_plans.best_plans``: AxoNN, Megatron-LM TP x DP and TP x PP
x DP, ZeRO-3, HSDP, DDP), then train a few iterations of each
(``live_plans.measure_plan``) over ``--rounds`` interleaved rounds; each strategy's
row is the median over its rounds with its 95% interval (``timing.over_rounds``;
records made before kept the best round instead, and the report says which). Recorded per
strategy: the median iteration of every round, the exposed communication, the
bytes each group (row, col, depth, data, pipe...) moved per rank, and the
prediction for the same configuration. With ``--nodes`` the ranks run on an
emulated cluster (``gpulab.emulated``: network namespaces joined by
rate-limited links), where the machine allows it; otherwise the run says why
and uses this machine as one node.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
DOC = ROOT / "docs" / "axonn_vs_baselines.md"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from mpi_job import add_run_args, main, run_as_job  # noqa: E402

from gpulab.engine import GPTConfig  # noqa: E402

BATCH = 16  # sequences of 64 tokens


def model() -> GPTConfig:
    """Small enough for iterations of a few hundred ms on 2 cores; 4 layers so the pipeline can have 4 stages."""
    return GPTConfig(vocab_size=128, block_size=64, n_layer=4, n_head=8, n_embd=128, dtype="float32")


def out_path(world: int) -> Path:
    return RESULTS / f"engine_strategies_p{world}.json"


def job(args) -> None:
    """Inside the MPI job: fit, pick, measure; rank 0 writes the JSON."""
    from mpi4py import MPI

    from gpulab.engine.perf.fitted_machine import fit
    from gpulab.engine.perf.live_plans import best_plans, measure_plan
    from gpulab.engine.perf.timing import over_rounds

    comm = MPI.COMM_WORLD
    machine = fit(comm, reps=args.fit_reps, name=f"this machine, {comm.size} ranks")
    plans = comm.bcast(best_plans(model(), comm.size, BATCH, machine) if comm.rank == 0 else None, root=0)
    measured: dict = {}
    for r in range(args.rounds):
        for plan in plans:
            row = measure_plan(comm, model(), plan, BATCH, iters=args.iters)
            if comm.rank == 0:
                print(f"round {r + 1}/{args.rounds} {plan['predicted']['config']:32s} {row['iter_s'] * 1e3:8.1f} ms "
                      f"(predicted {plan['predicted']['iter_s'] * 1e3:.1f})", flush=True)
                measured.setdefault(plan["strategy"], []).append(row)
    best = {strategy: over_rounds(rows) for strategy, rows in measured.items()}  # the median over rounds
    if comm.rank == 0:
        from gpulab.records import provenance

        record = {"provenance": provenance(__doc__, args.command),
                  "command": args.command, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "world": comm.size, "cluster": args.cluster, "load_before": args.load_before,
                  "load_after": os.getloadavg(), "cpus": os.cpu_count(), "batch": BATCH,
                  "model": model().to_dict(), "machine": replace(machine, sources={}).describe().to_dict(),
                  "rows": [best[p["strategy"]] for p in plans]}
        RESULTS.mkdir(parents=True, exist_ok=True)
        out_path(comm.size).write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {out_path(comm.size)}", flush=True)


def launch(args) -> int:
    """Start the job on -n ranks, on an emulated cluster if --nodes asks and the machine allows."""
    from contextlib import ExitStack

    from gpulab.emulated import ClusterUnavailable, EmulatedCluster

    cluster = "this machine (one node)"
    with ExitStack() as stack:
        if args.nodes:
            try:
                stack.enter_context(EmulatedCluster(nodes=args.nodes, ranks_per_node=args.n // args.nodes,
                                                    link=args.link))
                cluster = f"emulated: {args.nodes} nodes x {args.n // args.nodes} ranks, link {args.link}"
            except ClusterUnavailable as err:
                print(f"no emulated cluster, running on this machine: {err}", flush=True)
                cluster = f"this machine (emulated cluster unavailable: {err})"
        return run_as_job(__file__, args.n, args.timeout, cluster)


GROUPS = ("row", "col", "depth", "data", "pipe")
COLORS = ("#2ca02c", "#9467bd", "#d62728", "#1f77b4", "#ff7f0e")
TITLE = "## Measured live: each strategy's best grid on 4 and 8 ranks"
PNG = RESULTS / "engine_strategies.png"


def recorded() -> list[dict]:
    return [json.loads(out_path(w).read_text()) for w in (4, 8) if out_path(w).exists()]


def plot(records) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 3.2 * len(records)))
    for axes, data in zip(fig.subplots(len(records), 2, squeeze=False), records):
        rows, ys = data["rows"], range(len(data["rows"]))
        axes[0].barh([y - 0.2 for y in ys], [r["iter_s"] * 1e3 for r in rows], 0.4, color="#4c72b0",
                     xerr=[[(r["iter_s"] - min(r["iter_s_all"])) * 1e3 for r in rows],
                           [(max(r["iter_s_all"]) - r["iter_s"]) * 1e3 for r in rows]], label="measured (min-max)")
        axes[0].barh([y + 0.2 for y in ys], [r["predicted"]["iter_s"] * 1e3 for r in rows], 0.4, color="#dd8452",
                     label="predicted (model fitted in the same job)")
        axes[0].set_yticks(list(ys), [r["config_name"] for r in rows], fontsize=8)
        axes[0].set_xlabel("ms per iteration")
        axes[0].set_title(f"{data['world']} ranks, {data['cluster']}", fontsize=9)
        axes[0].legend(fontsize=7)
        left = [0.0] * len(rows)
        for group, color in zip(GROUPS, COLORS):
            values = [r["bytes_by_group"].get(group, 0) / 2**20 for r in rows]
            axes[1].barh(list(ys), values, left=left, color=color, label=group)
            left = [a + v for a, v in zip(left, values)]
        axes[1].set_yticks(list(ys), [""] * len(rows))
        axes[1].set_xlabel("MiB per rank and iteration (collective buffers), by group")
        axes[1].legend(fontsize=7)
        for ax in axes:
            ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(PNG, dpi=100)


def section(records) -> str:
    from gpulab.stats import Interval

    first = records[0]
    medians = all("iter_s_interval" in r for data in records for r in data["rows"])
    m = first["model"]
    lines = [f"\n{TITLE}\n",
             f"The strategies above, run for real on the engine: a GPT of {m['n_layer']} layers, width {m['n_embd']}, "
             f"{m['n_head']} heads, vocabulary {m['vocab_size']}, {first['batch']} sequences of {m['block_size']} "
             f"tokens per iteration, float32, overlap off. Per world size one MPI job fits the performance model to "
             "the machine (`gpulab.engine.perf.fitted_machine`), lets it pick each strategy's fastest grid "
             "(`gpulab.engine.perf.live_plans.best_plans`; Megatron-LM once as TP x DP and once with a pipeline, "
             "`megatron-pp`, 2 micro-batches per stage, 1F1B; AxoNN's row is its best shape that no other strategy "
             "has, since its search includes all of theirs), then trains each grid for interleaved rounds of "
             f"{first['rows'][0]['iters']} iterations and keeps "
             + ("the median over each strategy's rounds with its 95% interval" if medians else
                "each strategy's best round") + " (every round's median iteration in brackets, the min-max of the "
             "iterations of the round it stands for after it). "
             "Bytes (the KiB columns) are the **buffer sizes** of each group's collectives per rank in the median "
             "iteration (`collectives.trace`, full buffers: the summed array, the gathered block, the array to "
             "reduce-scatter), not the bytes each rank puts on the wire; for every grid without a pipeline they "
             "equal the volume model's buffer count exactly (`tests/engine/test_live_plans.py`). "
             "![live comparison](results/engine_strategies.png)\n"]
    for data in records:
        load = ", ".join(f"{x:.1f}" for x in data["load_before"])
        after = ", ".join(f"{x:.1f}" for x in data["load_after"])
        lines += [f"**{data['world']} ranks**, {data['cluster']}: `{data['command']}`, {data['date']}, "
                  f"{data['cpus']} cores, `cat /proc/loadavg` {load} before, {after} after "
                  f"([record](results/{out_path(data['world']).name})).\n",
                  "| strategy | grid | ms/iter" + (": median [95% interval]" if medians else ": best")
                  + " (rounds) | min-max ms | predicted ms | exposed comm ms | "
                  + " | ".join(f"{g} KiB" for g in GROUPS) + " |",
                  "|---|---|---|---|---|---|" + "---|" * len(GROUPS)]
        for r in data["rows"]:
            rounds = ", ".join(f"{t * 1e3:.0f}" for t in r["iter_s_rounds"])
            kib = " | ".join(f"{r['bytes_by_group'].get(g, 0) / 1024:.0f}" for g in GROUPS)
            kept = (Interval.from_dict(r["iter_s_interval"]).scaled(1e3).text() if "iter_s_interval" in r
                    else f"{r['iter_s'] * 1e3:.0f}")
            lines.append(f"| {r['strategy']} | {r['config_name']} | {kept} ({rounds}) | "
                         f"{min(r['iter_s_all']) * 1e3:.0f}-{max(r['iter_s_all']) * 1e3:.0f} | "
                         f"{r['predicted']['iter_s'] * 1e3:.0f} | {r['summary']['exposed_comm_s'] * 1e3:.0f} | {kib} |")
        lines.append("")
    return "\n".join(lines)


def report() -> None:
    """Draw the plot and write the live section of docs/axonn_vs_baselines.md: in place of an older one
    (the hand-written reading of it, the next section, stays), else at the end."""
    records = recorded()
    if not records:
        raise SystemExit("no recorded run: python benchmarks/engine_strategies.py run -n 4 first")
    plot(records)
    text = DOC.read_text()
    if TITLE in text:
        head, rest = text.split("\n" + TITLE, 1)
        tail = rest[rest.find("\n## "):] if "\n## " in rest else ""
    else:
        head, tail = text.rstrip("\n") + "\n", ""
    DOC.write_text(head + section(records) + tail)
    print(f"wrote {DOC.relative_to(ROOT)} and {PNG.relative_to(ROOT)}")


def configure(run) -> None:
    from gpulab.cli.checks import positive_int

    run.add_argument("-n", type=int, default=4, choices=(4, 8), help="ranks (default 4)")
    run.add_argument("--nodes", type=positive_int, default=None, help="emulated nodes (default: none, this machine)")
    add_run_args(run, link="1gbit", rounds=2, iters=5, fit_reps=2, timeout=600)


def check(args, parser) -> None:
    if args.nodes and args.n % args.nodes:
        parser.error(f"-n {args.n} is not divisible by --nodes {args.nodes}")

if __name__ == "__main__":
    main(__doc__, configure=configure, job=job, launch=launch, report=report, check=check,
         run_help="measure on -n ranks", report_help="plot and write the section of docs/axonn_vs_baselines.md")
