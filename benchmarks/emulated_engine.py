"""Experiment (e): the 4D engine on emulated nodes (2 x 2 ranks by default), every grid, overlap off and on.

    python benchmarks/emulated_engine.py run --link 100mbit   # docs/results/emulated_engine_100mbit.json
    python benchmarks/emulated_engine.py report   # docs/results/emulated_engine.png + docs/emulated_engine.md
    python benchmarks/emulated_engine.py run --nodes 4 --placement round-robin --link 1gbit \
        --out docs/results/engine_accuracy_4x2_round-robin_1gbit_run1.json   # the model's accuracy elsewhere

One MPI job on an emulated cluster (``gpulab.emulated``: --nodes network namespaces of
--ranks-per-node ranks each, placed by --placement, joined by rate-limited links). In it:
the performance model is fitted there (``gpulab.engine.perf.fitted_machine`` with
``strided=True``: every collective is timed on contiguous groups, which stay in
a node, and on groups of stride 2, which cross the link, so the model knows
which of the engine's groups pay the link) once before and once after the
measurement, averaged (the load of other jobs moves); then every grid of
``grid_shapes(p)`` trains with overlap off and with every switch on
(OAR, ORS, OAG, weight cache, gradient buckets) and gpulab's progress thread
(the one mode that moves a collective while a rank computes, docs/engine_overlap.md),
for ``--rounds`` interleaved rounds; each setting's time is the median over
rounds of each round's median iteration. Predictions are made twice: with the
strided fit, and with its contiguous groups only (what a single-node fit knows).
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
DOC = ROOT / "docs" / "emulated_engine.md"
PNG = RESULTS / "emulated_engine.png"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from engine_grids import validate  # noqa: E402
from mpi_job import add_run_args, main, run_as_job, tcp_congestion  # noqa: E402

from gpulab.engine.perf.trust import cpu_ticks, stolen  # noqa: E402

BATCH = 16
SETTINGS = ("off", "on")


def overlap_for(setting: str):
    from gpulab.engine.parallel.overlap import Overlap

    return Overlap() if setting == "off" else Overlap.everything(progress="thread")


def out_path(args) -> Path:
    """--out, else the record the report and notebook 06 read (the default 2 x 2 block cluster)."""
    if args.out:
        return Path(args.out).resolve()
    if (args.nodes, args.ranks_per_node, args.placement) != (2, 2, "block"):
        raise SystemExit("error: give --out for a cluster other than 2 nodes x 2 ranks, block placement")
    return RESULTS / f"emulated_engine_{args.link}.json"


def link_floor(machine, rate: float | None, nodes_of: list[int]):
    """The fit with no collective that crosses the link faster than the link allows (a stream over a
    link never beats its rate; the fit's short timings come out faster, as in the broadcast benchmark).

    Per byte of a collective's full vector, the busiest node (``nodes_of[rank]``) must take in, over all
    concurrent groups of the layout that span nodes: all-gather (g - m) / g (the members' parts it
    lacks), reduce-scatter m / g (its m members' slices, pre-summed by the other node), all-reduce 1
    (both), where m of a group's g members sit on that node. Each fitted beta is raised to that
    floor / rate where it is below, and each timed point to the floor's time for its bytes.
    """
    from dataclasses import replace

    from gpulab.engine.perf.probes import TIMED_OPS, collective_key, group_layouts, strided_group
    from gpulab.engine.perf.rings import BLOCKING_OF

    if rate is None:
        return machine
    taken_in = {"all_gather": lambda g, m: (g - m) / g, "reduce_scatter": lambda g, m: m / g,
                "all_reduce": lambda g, m: 1.0}
    collectives, points = dict(machine.collectives), dict(machine.collective_points)
    for g, s in group_layouts(machine.ranks, strided=True):
        groups: dict = {}  # group -> the node of each member
        for rank in range(machine.ranks):
            groups.setdefault(strided_group(rank, g, s), []).append(nodes_of[rank])
        spanning = [nodes for nodes in groups.values() if len(set(nodes)) > 1]
        for op in TIMED_OPS:  # a non-blocking twin moves the bytes its blocking op does
            key = collective_key(op, g, s)
            load = [sum(taken_in[BLOCKING_OF.get(op, op)](g, nodes.count(node)) for nodes in spanning if node in nodes)
                    for node in set(nodes_of)]
            floor = max(load, default=0.0) / rate
            if key in collectives and collectives[key][1] < floor:
                collectives[key] = [collectives[key][0], floor]
            if key in points:
                points[key] = [[n, max(t, floor * n)] for n, t in points[key]]
    return replace(machine, collectives=collectives, collective_points=points)


def contiguous_only(machine):
    """The same fit without the strided groups: what the model knows from one node."""
    from dataclasses import replace

    return replace(machine, collectives={k: v for k, v in machine.collectives.items() if "@" not in k},
                   collective_points={k: v for k, v in machine.collective_points.items() if "@" not in k})


def job(args) -> None:
    """Inside the MPI job: fit, measure every grid x setting in interleaved rounds, fit again; rank 0 writes."""
    from mpi4py import MPI

    from gpulab.emulated import link_bytes_per_s, rank_nodes
    from gpulab.engine import grid_shapes
    from gpulab.engine.perf.calibration import calibrated_on
    from gpulab.engine.perf.fitted_machine import FittedMachine, fit
    from gpulab.engine.perf.predict import predict
    from gpulab.engine.perf.timing import bench_config, measure, over_rounds

    comm = MPI.COMM_WORLD
    cfg, start, ticks = bench_config(), time.time(), cpu_ticks()

    def fit_once(which):
        if comm.rank == 0:
            print(f"fitting the model on the cluster ({which})", flush=True)
        return fit(comm, reps=args.fit_reps, name=f"{args.cluster}", strided=True, max_bytes=1 << 20)

    fits = [fit_once("before")]
    rounds: dict = {}
    for r in range(args.rounds):
        for shape in grid_shapes(comm.size):
            for setting in SETTINGS:
                row = measure(comm, cfg, shape, BATCH, overlap_for(setting), iters=args.iters, warmup=args.warmup)
                if comm.rank == 0:
                    row.pop("per_rank")
                    rounds.setdefault((tuple(shape), setting), []).append(row)
                    print(f"round {r + 1}/{args.rounds} {tuple(shape)} overlap {setting:3s} "
                          f"{row['iter_s'] * 1e3:8.1f} ms", flush=True)
    fits.append(fit_once("after"))
    rank_cpus = comm.gather(sorted(os.sched_getaffinity(0)))  # each node's own cores, or every core
    if comm.rank != 0:
        return
    machine = FittedMachine.mean(fits)
    nodes_of = rank_nodes(args.nodes, comm.size, args.ranks_per_node, args.placement)
    one_node, floored = contiguous_only(machine), link_floor(machine, link_bytes_per_s(args.link), nodes_of)
    left_out, rows = calibrated_on(machine), []  # the grids the fit measured itself: left out of the error
    for (shape, setting), runs in rounds.items():
        row = dict(over_rounds(runs), setting=setting)  # the median over rounds, its interval, the median round
        for key, m in (("prediction", machine), ("prediction_one_node", one_node),
                       ("prediction_link_floor", floored)):
            pred = predict(cfg, shape, BATCH, m, overlap_for(setting), seq_len=cfg.block_size)
            row[key] = {k: pred[k] for k in ("iter_s", "compute_s", "exposed_comm_s", "hidden_comm_s")}
        rows.append(row)
    from gpulab.records import provenance

    record = {"provenance": provenance(__doc__, args.command),
              "command": args.command, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "cluster": args.cluster, "link": args.link, "world": comm.size, "cpus": os.cpu_count(),
              "nodes": args.nodes, "ranks_per_node": args.ranks_per_node, "placement": args.placement,
              "rank_cpus": rank_cpus, "tcp_congestion": tcp_congestion(),
              "load_before": args.load_before, "load_after": os.getloadavg(), "cpu_steal": stolen(ticks),
              "minutes": (time.time() - start) / 60,
              "batch": BATCH, "model": cfg.to_dict(), "rounds": args.rounds, "iters": args.iters,
              "overlap_on": overlap_for("on").to_dict(),
              "machine": replace(machine, sources={}).describe().to_dict(),
              "call_wait_source": machine.sources.get("call_wait", ""),
              "link_floor_collectives": floored.collectives,
              "fits": [f.sources["measured"] for f in fits], "rows": rows,
              "fit_each": [{"collective_points": f.collective_points, "share": f.share,
                            "matmul_rate": f.matmul_rate, "overlap": f.overlap, "overlap_probe": f.overlap_probe,
                            "trust": f.trust} for f in fits],
              "validation": {s: {"stride-aware": validate([r for r in rows if r["setting"] == s], left_out),
                                 "one-node": validate([{**r, "prediction": r["prediction_one_node"]}
                                                       for r in rows if r["setting"] == s], left_out),
                             "stride-aware, link floor": validate([{**r, "prediction": r["prediction_link_floor"]}
                                                                   for r in rows if r["setting"] == s], left_out)}
                             for s in SETTINGS}}
    RESULTS.mkdir(parents=True, exist_ok=True)
    out_path(args).write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out_path(args)}", flush=True)


def launch(args) -> int:
    from gpulab.emulated import ClusterUnavailable, EmulatedCluster

    out_path(args)  # a missing --out fails before the cluster starts
    name = (f"emulated: {args.nodes} nodes x {args.ranks_per_node} ranks, {args.placement} placement, "
            f"link {args.link}")
    try:
        with EmulatedCluster(nodes=args.nodes, ranks_per_node=args.ranks_per_node, link=args.link,
                             placement=args.placement):
            return run_as_job(__file__, args.nodes * args.ranks_per_node, args.timeout, name)
    except ClusterUnavailable as err:
        print(f"error: no emulated cluster on this machine: {err}", file=sys.stderr)
        return 2


READING = "\n## What the numbers say"  # the hand-written reading below the generated part is kept


def by_grid(record: dict) -> dict:
    """{shape: {"off": row, "on": row}}, in grid_shapes order."""
    out: dict = {}
    for r in record["rows"]:
        out.setdefault(tuple(r["shape"]), {})[r["setting"]] = r
    return out


def plot(record: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    grids = by_grid(record)
    names = [",".join(map(str, s)) for s in grids]
    fig = Figure(figsize=(12, 4.2))
    bars, scatter = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2.2, 1]})
    width = 0.2
    for i, (setting, kind, color) in enumerate((("off", "iter_s", "#4c72b0"), ("off", "prediction", "#a6bddb"),
                                                ("on", "iter_s", "#dd8452"), ("on", "prediction", "#fdd0a2"))):
        values = [(d[setting][kind]["iter_s"] if kind == "prediction" else d[setting]["iter_s"]) * 1e3
                  for d in grids.values()]
        label = f"overlap {setting}, " + ("predicted" if kind == "prediction" else "measured")
        bars.bar([x + (i - 1.5) * width for x in range(len(grids))], values, width, color=color, label=label)
    bars.set_xticks(range(len(grids)), names, fontsize=8)
    bars.set_xlabel("grid (row, col, depth, data)")
    bars.set_ylabel("ms per iteration")
    bars.set_title(f"{record['cluster']}: measured (median of {record['rounds']} rounds) and predicted", fontsize=9)
    bars.legend(fontsize=7)
    top = 0
    for setting, marker in (("off", "o"), ("on", "s")):
        for key, color, label in (("prediction_one_node", "#999999", "contiguous groups only"),
                                  ("prediction", "#2ca02c", "stride-aware fit (drawn over)")):
            xs = [d[setting]["iter_s"] * 1e3 for d in grids.values()]
            ys = [d[setting][key]["iter_s"] * 1e3 for d in grids.values()]
            top = max(top, *xs, *ys)
            scatter.scatter(xs, ys, marker=marker, color=color, s=22, label=f"overlap {setting}, {label}")
    scatter.plot([0, top * 1.05], [0, top * 1.05], color="black", lw=0.6)
    scatter.set_xlabel("measured ms")
    scatter.set_ylabel("predicted ms")
    scatter.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(PNG, dpi=100)


def _ms(x: float) -> str:
    return f"{x * 1e3:.0f}"


def section(record: dict) -> str:
    m = record["model"]
    load = ", ".join(f"{x:.1f}" for x in record["load_before"])
    after = ", ".join(f"{x:.1f}" for x in record["load_after"])
    lines = [HEAD.format(png=PNG.name),
             f"`{record['command']}` ({record['date']}, {record['minutes']:.1f} min), then "
             f"`python benchmarks/emulated_engine.py report`. {record['cluster']}; {record['cpus']} cores; "
             f"`cat /proc/loadavg` {load} before, {after} after"
             + (f"; {record['cpu_steal']:.0%} of the CPU time stolen by the hypervisor during the run"
                if "cpu_steal" in record else "") + f". GPT of {m['n_layer']} layers, "
             f"width {m['n_embd']}, {m['n_head']} heads, vocabulary {m['vocab_size']}, {record['batch']} "
             f"sequences of {m['block_size']} tokens, float32; {record['rounds']} interleaved rounds of "
             f"{record['iters']} timed iterations, each time the median over rounds of a round's median "
             "(every round in brackets). Fits: " + "; ".join(record["fits"]) + ".\n",
             "| grid (R, C, D, P) | off ms (rounds) | off: exposed comm | on ms (rounds) | on: exposed | on: hidden "
             "| off / on | predicted off | predicted on | one-node fit off | one-node fit on | link floor off "
             "| link floor on |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for shape, d in by_grid(record).items():
        off, on = d["off"], d["on"]
        share = lambda r: (f"{_ms(r['summary']['exposed_comm_s'])} "  # noqa: E731
                           f"({r['summary']['exposed_comm_s'] / r['summary']['wall_s']:.0%})")
        rounds = lambda r: (f"{_ms(r['iter_s'])}" + (f" [{_ms(r['iter_s_interval']['low'])}, "  # noqa: E731
                                                      f"{_ms(r['iter_s_interval']['high'])}]"
                                                      if "iter_s_interval" in r else "")
                            + f" ({', '.join(_ms(t) for t in r['iter_s_rounds'])})")
        lines.append(f"| {shape} | {rounds(off)} | {share(off)} | {rounds(on)} | {share(on)} | "
                     f"{_ms(on['summary']['hidden_comm_s'])} | {off['iter_s'] / on['iter_s']:.2f} | "
                     f"{_ms(off['prediction']['iter_s'])} | {_ms(on['prediction']['iter_s'])} | "
                     f"{_ms(off['prediction_one_node']['iter_s'])} | {_ms(on['prediction_one_node']['iter_s'])} | "
                     f"{_ms(off['prediction_link_floor']['iter_s'])} | {_ms(on['prediction_link_floor']['iter_s'])} |")
    lines += ["", "The model against the measurement, per overlap setting and fit:\n",
              "| overlap | fit | Spearman | model's pick | its measured ms | measured best | pick / best "
              "| pick within 10% | median abs. error |", "|---|---|---|---|---|---|---|---|---|"]
    for setting, fits in record["validation"].items():
        for fit_name, v in fits.items():
            lines.append(f"| {setting} | {fit_name} | {v['spearman']:.2f} | {tuple(v['model_pick'])} | "
                         f"{_ms(v['model_pick_measured_s'])} | {tuple(v['measured_best'])} "
                         f"{_ms(v['measured_best_s'])} | {v['pick_over_best']:.2f} | "
                         f"{'yes' if v['top1_within_10pct'] else 'no'} | {v['median_abs_rel_error']:.0%} |")
    return "\n".join(lines) + "\n"


HEAD = """# Experiment (e): the 4D engine on 2 emulated nodes x 2 ranks

Generated by `python benchmarks/emulated_engine.py report` from docs/results/emulated_engine_*.json
(the newest run). Ranks 0-1 sit on node 0, ranks 2-3 on node 1 (block placement); the engine's col
group is innermost (stride 1), so col groups of 2 stay in a node, row groups of 2 (stride C) and depth
or data groups of 2 (stride R C, R C D) cross the link when that stride is 2, and groups of 4 always do.
Overlap on = OAR, ORS, OAG, the weight cache and gradient buckets, with gpulab's progress thread.
The model is fitted in the same job, on the cluster: "stride-aware" timed each collective at 1 KiB ..
1 MiB on groups of stride 1 (inside a node) and of stride 2 (across the link), and the model
interpolates between the sizes timed; "one-node fit" is the same fit with the
stride-2 timings dropped, as a fit on one node would see the machine, and "link floor" is the
stride-aware fit with every collective that crosses the link raised to the time the link's rate allows
for the bytes the busiest node must take in (`link_floor`).
![measured and predicted per grid](results/{png})
"""


def report() -> None:
    runs = sorted(RESULTS.glob("emulated_engine_*.json"), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise SystemExit("no recorded run: python benchmarks/emulated_engine.py run first")
    record = json.loads(runs[-1].read_text())
    plot(record)
    old = DOC.read_text() if DOC.exists() else ""
    DOC.write_text(section(record) + (old[old.index(READING):] if READING in old else ""))
    print(f"wrote {DOC.relative_to(ROOT)} and {PNG.relative_to(ROOT)}")


def configure(run) -> None:
    from gpulab.cli.checks import positive_int
    from gpulab.emulated import PLACEMENTS

    run.add_argument("--warmup", type=positive_int, default=1, help="untimed iterations first (default 1)")
    run.add_argument("--nodes", type=positive_int, default=2, help="emulated nodes (default 2)")
    run.add_argument("--ranks-per-node", type=positive_int, default=2, help="ranks on each node (default 2)")
    run.add_argument("--placement", choices=PLACEMENTS, default="block",
                     help="ranks to nodes: block (0, 1 on the first node ...) or round-robin (default block)")
    run.add_argument("--out", default=None,
                     help="record to write (default docs/results/emulated_engine_LINK.json, 2 x 2 block only)")
    # 4 x 2 round-robin at 100 Mbit/s, the fit calibrating three grids at its start and end: 16 minutes or more
    add_run_args(run, link="100mbit", rounds=3, iters=3, fit_reps=2, timeout=1800)

if __name__ == "__main__":
    main(__doc__, configure=configure, job=job, launch=launch, report=report,
         run_help="fit and measure on the emulated cluster", report_help="plot and write docs/emulated_engine.md")
