# ---
# jupyter:
#   jupytext:
#     formats: notebooks///ipynb,notebooks_src///py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · The mesh explorer: grid shapes, overlap, timelines and the model
#
# Notebook 04 took one layer apart. Here the whole GPT trains on the engines,
# on a 4D grid **row × col × depth × data**, and you choose:
#
# * **the grid shape**: how the ranks are factored. The dropdowns only offer
#   shapes that split the model (heads and vocabulary over row, features over
#   col, sequences over depth × data);
# * **the overlap switches**, each on its own (`gpulab.engine.parallel.overlap`):
#   `oar`, `ors`, `oag` (AxoNN's OAR: the dX all-reduce runs behind the dW
#   matmul; ORS: the dW reduce-scatter runs behind the layers before; OAG:
#   the next layer's weight all-gather issued one layer ahead), `cache` (gathered weights kept from
#   forward for backward: memory for communication), `buckets` (gpulab's
#   addition: the data-parallel gradient all-reduce in buckets during
#   backward), and **progress**: who moves a non-blocking collective while the
#   rank computes (MPI_Test between kernels, a background thread, or nobody).
#
# Every run draws the **timeline** of its median iteration, one row per rank:
# grey kernels above, collectives below in their group's colour, pale while in
# flight, solid while the rank *waits* for them. Pale under grey is hidden
# communication. Next to it, the breakdown of every run so far against the
# **performance model** (`gpulab.engine.perf.predict`) fitted on this machine.
#
# Terms (all-reduce, overlap, progress, exposed and hidden communication,
# ...): the [glossary](../docs/glossary.md). Each numbered question at the end
# has its answer in `gpulab.lessons.nb05`, opened in the last cells.

# %% tags=["parameters"]
N_ENGINES = 4          # MPI ranks (the grid's world size can be smaller)
ITERS = 5              # timed iterations per run (after one warm-up)
ROUNDS = 3             # runs per measurement: the table gives their median and its interval
FIT_REPS = 3           # repetitions of each measurement when fitting the model to this machine
SHAPE = (2, 1, 2, 1)   # the grid of the first comparison below
NODES = 2              # emulated nodes where this machine can make them (None: the single machine)
LINK = "1gbit"         # each node's link: 100mbit, 200mbit, 1gbit, 10gbit, unlimited
PLACEMENT = "block"    # ranks to nodes: block or round-robin

# %%
import time

from IPython.display import display

from gpulab import host
from gpulab.cluster.mesh_runner import MeshRunner
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.perf.predict import predict
from gpulab.widgets import Table, as_image, notebook_engines
from gpulab.widgets.mesh_explorer import MeshExplorer

print(host.describe(ranks=N_ENGINES))
engines, cluster = notebook_engines(N_ENGINES, nodes=NODES, link=LINK, placement=PLACEMENT)
runner = MeshRunner(engines, iters=ITERS, warmup=1, rounds=ROUNDS)
cluster.follow(runner)
display(cluster)  # what the engines run on: nodes, ranks, link

# %% [markdown]
# ## Fit the model to this machine
# It measures matmul and elementwise rates, how much slower a rank
# computes when all ranks (and anything else) share the cores, and what each
# collective costs right after a kernel, per group size
# (`gpulab.engine.perf.fitted_machine`). It also runs three grids of the engine,
# (1, N, 1, 1), (N, 1, 1, 1) and (1, 1, 1, N) of the model below, to calibrate
# how long the ranks wait for each other at a col all-reduce, at a row
# all-reduce and at the replicas' gradient all-reduce, which no timing of a
# call alone shows (printed below; `gpulab.engine.perf.calibration`).
# Every other prediction below is out of sample; the sweep marks those grids.
#
# How long it takes depends on the machine (the line printed above says what
# yours gives the ranks): about a minute where every rank has a core of its
# own, several where the ranks share cores with each other and with other
# work. The cell prints its own time and how busy the machine was as it started; its time
# limit is stretched for a busy machine, and a limit that fires says in one
# paragraph where the ranks waited.
#
# What to expect: on a laptop the "share" is above 1 when the ranks outnumber
# the cores (each rank computes that many times slower with all of them
# busy), and collectives cost tens to hundreds of microseconds even for tiny
# messages, because a rank waits for its peers to be scheduled.
#
# **When overlap cannot pay.** Where a node's ranks outnumber its cores (the
# single machine, `NODES = None`, with more ranks than cores; or emulated
# nodes with fewer cores each than ranks: the banner above says how many
# each got), the fit uses an overlap efficiency of 0 whatever its probe
# measured (the "overlap" line below prints both), and it is right
# to: there is no idle core to progress a message on. A collective in flight
# is copies, reductions and polling, run by the very cores the compute needs,
# so overlapping cannot make it free: it hides only time a rank would spend
# waiting for a peer. The extra MPI_Test calls, the progress thread and the
# smaller bucketed messages cost time of their own, so the iteration can get
# shorter or *longer* with overlap on, by grid and progress mode (in
# docs/engine_overlap.md, on 4 ranks of a 2-core machine, with every switch
# on grid (1, 1, 2, 2) took 0.74x as long with polling, but (1, 1, 1, 4)
# 1.09x with polling and (1, 1, 2, 2) 1.14x with a progress thread). Where
# every rank of a node has a core, the link's time can hide, and the fit
# measures how much.
# The table lists each collective twice: as the blocking call and as its
# non-blocking twin (`iall_reduce`...), which the engine issues wherever it
# overlaps and which the model prices for those calls. MPICH selects the
# twins' algorithms apart from the blocking ones', so the same bytes between
# the same ranks can cost more or less: compare the two rows of a group.
# On a GPU node the fit runs with the arrays on the GPUs (`DEVICE` below),
# since a model fitted with host arrays prices host runs: its compute rates
# would be the CPU's, its collectives would skip the copies to and from the
# GPU. The explorer predicts only runs on the device the model was fitted on.

# %%
DEVICE = "cupy" if "cupy" in runner.devices else "host"  # GPUs where every engine has one
fit_start, at_start = time.monotonic(), host.snapshot(N_ENGINES)
machine = runner.fit_machine(reps=FIT_REPS, device=DEVICE)
print(f"the fit took {time.monotonic() - fit_start:.0f} s ({at_start.text()} as it started)")
print(f"share {machine.share:.1f}x (ranks and other load on {machine.cores} cores), "
      f"matmul {machine.matmul_rate / 1e9:.0f} GFLOP/s per rank alone, overlap efficiency {machine.overlap}")
print("overlap:", machine.sources["overlap"])
print("wait at a col, row or data all-reduce:", machine.sources.get("call_wait", "not calibrated"))
Table([{"collective": k, "alpha us": a * 1e6, "GB/s": 1e-9 / b} for k, (a, b) in machine.collectives.items()], digits=1)

# %% [markdown]
# ## The explorer
# Pick a shape and switches, press **Run**. Runs accumulate in the table and
# the breakdown, so change one thing at a time and compare.
#
# How to read the plots: in the **timeline** the horizontal axis is time
# within the median iteration (ms), one row per rank; grey bars are kernels,
# coloured bars collectives (colour = group), pale while in flight, solid
# while the rank waits. Look for solid bars: that is exposed communication;
# pale bars under grey are hidden. In the **breakdown** each run is one bar of
# milliseconds per iteration, cut into compute and exposed communication,
# with the model's prediction beside it: look at whether the two move
# together when you change one thing.

# %%
explorer = MeshExplorer(runner, machine=machine)
explorer

# %% [markdown]
# ## Overlap off, then on, on one grid
# The cell below does what pressing Run twice does: `SHAPE` with every
# switch off, then every switch on (progress by MPI_Test between kernels).
#
# What to expect: on a laptop the hidden time goes from zero to a visible
# share, but the iteration shrinks much less, because the cores that copy the
# bytes are the cores that compute; where the fit above uses an overlap
# efficiency of 0 it may not shrink at all, or grow (see "When overlap cannot
# pay"). On a GPU the engine's staging copies run on the GPU's copy engines
# and the NICs carry the bytes between nodes, yet an iteration cannot shrink by more than the
# communication it exposed with overlap off, and the hidden time says little
# about that (a collective in flight behind compute takes longer): on one
# H200, grid (1, 1, 2, 1) hid 19 ms and shrank by 5.5 ms, having exposed
# 6.8 ms without overlap (docs/gpu.md).

# %%
explorer.row.value, explorer.col.value, explorer.depth.value = SHAPE[:3]
off = explorer.run()
for name in explorer.switches:
    explorer.switches[name].value = True
on = explorer.run()
Table(explorer.rows(), digits=1)

# %%
assert explorer.shape == SHAPE and len(on["events"]) == N_ENGINES  # one timeline row per rank
assert off["summary"]["hidden_comm_s"] == 0 < on["summary"]["hidden_comm_s"]
assert off["memory"]["weight_cache"] == 0
assert (on["memory"]["weight_cache"] > 0) == (SHAPE[2] > 1)  # cache: memory for traffic (depth > 1)
saved = off["summary"]["exposed_comm_s"] - on["summary"]["exposed_comm_s"]
print(f"exposed communication {off['summary']['exposed_comm_s'] * 1e3:.1f} -> "
      f"{on['summary']['exposed_comm_s'] * 1e3:.1f} ms; iteration {off['iter_s'] * 1e3:.1f} -> "
      f"{on['iter_s'] * 1e3:.1f} ms")

# %% [markdown]
# ## Every grid shape, measured and predicted
# Each valid shape of `N_ENGINES` ranks with overlap off, and the model's
# prediction beside it. The ranking is what matters for choosing a shape:
# the Spearman rank correlation says how well the model orders them.
#
# What to expect: on a laptop the absolute predictions can be tens of percent
# off (other jobs on the same cores change the measurements from run to run)
# while the order is closer; on a quiet cluster node both would be tighter,
# and with a real network the shapes whose groups cross nodes would fall
# behind. The last column, `calibrated on`, says whether the machine fit above
# measured that shape itself: a shape the fit ran is not an out-of-sample
# test of the model.

# %%
from gpulab.engine.perf.calibration import calibrated_on
from gpulab.engine.perf.predict import candidate_shapes

shapes = candidate_shapes(explorer.config, N_ENGINES, explorer.batch_size)
sweep = []
for shape in shapes:
    row = runner.measure(N_ENGINES, explorer.config, shape, explorer.batch_size, Overlap())
    p = predict(explorer.config, shape, explorer.batch_size, machine, Overlap())
    sweep.append({"shape": str(shape), "measured ms": row["iter_s"] * 1e3, "predicted ms": p["iter_s"] * 1e3,
                  "exposed ms": row["summary"]["exposed_comm_s"] * 1e3,
                  "predicted exposed ms": p["exposed_comm_s"] * 1e3,
                  "calibrated on": tuple(shape) in calibrated_on(machine)})
sweep.sort(key=lambda r: r["measured ms"])
Table(sweep, digits=1)

# %%
import numpy as np


def spearman(a, b):
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


rho = spearman([r["measured ms"] for r in sweep], [r["predicted ms"] for r in sweep])
median_error = 100 * float(np.median([abs(r["predicted ms"] - r["measured ms"]) / r["measured ms"] for r in sweep]))
best = min(sweep, key=lambda r: r["predicted ms"])
from gpulab.lessons import answers_hidden

error = "" if answers_hidden() else f", median error {median_error:.0f}%"  # the error is question 5's answer
print(f"rank correlation {rho:.2f}{error}; "
      f"the model's pick {best['shape']} measured {best['measured ms']:.1f} ms, "
      f"the measured best {sweep[0]['shape']} {sweep[0]['measured ms']:.1f} ms")
assert len(sweep) == len(shapes) > 1 and all(r["measured ms"] > 0 and r["predicted ms"] > 0 for r in sweep)

# %% [markdown]
# ## Recorded: every grid on 2 nodes x 2 ranks behind a slow link
# The record `docs/results/emulated_engine_100mbit.json` (the cell prints its
# date and kit version), made by `python benchmarks/emulated_engine.py run`
# (docs/emulated_engine.md has the command, the load and
# the tables): ranks 0-1 on one node, 2-3 on the other, each grid measured with overlap off and on
# (all switches, progress thread), and predicted by the model fitted on that cluster with groups
# that stay in a node and groups that cross the link timed apart. Shown here from the record, no live run.
#
# The plot: one pair of bars per grid (horizontal axis: row, col, depth,
# data), milliseconds per iteration on the vertical axis, blue with overlap
# off and orange with it on; the black marks are the model's predictions
# for the same runs. What to look for: a group of 4 always crosses the link,
# and a group of 2 crosses it when its members sit 2 ranks apart (the outer
# axes); the grids whose *activations* cross it at every layer (col 4 worst)
# are slowest, those that send only gradients across (data outermost) are
# among the fastest, with one exception in this record: (1, 2, 1, 2) with
# overlap off took 494 ms, twice the fastest grids, and 271 ms with it on.
# Overlap does not always help: its progress thread needs a
# core too. The marks follow the bars' order better than their heights.

# %%
import json

from matplotlib.figure import Figure  # not pyplot: the inline backend would show its figures a second time

from gpulab.records import stamp
from gpulab.scoreboard.recorded import results_dir  # docs/results, or an installed gpulab's copy of it

records = sorted(results_dir().glob("emulated_engine_*.json"), key=lambda p: p.stat().st_mtime)
if records:
    record = json.loads(records[-1].read_text())
    grids = {}
    for r in record["rows"]:
        grids.setdefault(tuple(r["shape"]), {})[r["setting"]] = r
    names = [",".join(map(str, g)) for g in grids]
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax = fig.subplots()
    for i, (setting, color) in enumerate((("off", "#4c72b0"), ("on", "#dd8452"))):
        xs = [x + (i - 0.5) * 0.4 for x in range(len(grids))]
        ax.bar(xs, [d[setting]["iter_s"] * 1e3 for d in grids.values()], 0.4, color=color,
               label=f"overlap {setting}, measured")
        ax.scatter(xs, [d[setting]["prediction"]["iter_s"] * 1e3 for d in grids.values()], color="black",
                   marker="_" if setting == "off" else "x", s=120, zorder=3, label=f"overlap {setting}, predicted")
    ax.set_xticks(range(len(grids)), names)
    ax.set_xlabel("grid (row, col, depth, data)")
    ax.set_ylabel("ms per iteration")
    ax.set_title(record["cluster"], fontsize=10)
    fig.legend(*ax.get_legend_handles_labels(), fontsize=8, ncols=4, loc="outside lower center")  # not over bars
    display(as_image(fig))
    print(f"recorded {stamp(record)}")
    for setting, v in record["validation"].items():
        v = v["stride-aware"]
        print(f"overlap {setting}: Spearman {v['spearman']:.2f}, median abs. error {v['median_abs_rel_error']:.0%}, "
              f"model's pick {tuple(v['model_pick'])} at {v['pick_over_best']:.2f}x the measured best "
              f"{tuple(v['measured_best'])}")
else:
    print(f"no recorded run in {results_dir()}: python benchmarks/emulated_engine.py run --link 100mbit")

# %% [markdown]
# ## Questions
# 1. **Where does the time go?** In the timeline of the overlap-off run, which
#    group's bars are longest? Compare `(1, 1, 1, 4)` (pure data parallel: one
#    gradient all-reduce) with `(1, 4, 1, 1)` (col: activations summed at every
#    layer, and attention repeated on every col rank).
# 2. **Is the overlap real?** Switch on only `oar` and `ors`, then set progress
#    to `none`. Does the exposed time come back, and why?
# 3. **Cache** trades memory for communication: on a depth > 1 grid, how many
#    KiB does it hold, and which all-gathers disappear from backward?
# 4. Where the ranks share cores (the banner at the top says whether yours
#    do), the "network" is copies (shared memory, or TCP through the emulated
#    link) done by those same cores. What can overlap hide here, and what
#    could it hide on a GPU, where the bytes move on the GPU's own engines
#    and NICs?
#    (docs/engine_overlap.md has the measurements.)
# 5. How far off are the model's absolute numbers, and is the *ranking* still
#    useful? What does the model leave out? (`gpulab.engine.perf.predict`)
# 6. **On a GPU node** the *arrays on* menu offers GPU (CuPy) when every
#    engine has a GPU. Run the same grid on host and on GPU. Does compute
#    shrink, and why or why not for a model this small? Which share of the
#    iteration is communication then? In the timeline, are the collectives
#    `staged` through host memory or `cuda-aware` (each comm event in
#    `explorer.results[-1]["events"]` has a `path`)? Does overlap hide more?

# %% [markdown]
# ## Answers
# Try the questions first. `lesson.check(n, value)` checks a number of yours
# (right, close or wrong, and why); the cell below checks that this
# notebook's median error (question 5) agrees with the kit's, showing the
# verdict only while the answers are open. `lesson.answers(context)` opens every
# answer, with the kit's numbers from this notebook's runs. A teacher can hide
# the answers for a course (`GPULAB_HIDE_ANSWERS=1`).

# %%
from gpulab.lessons import Lesson

lesson = Lesson("05")
context = {"weight_cache_bytes": on["memory"]["weight_cache"], "sweep": sweep}
lesson.self_check(5, median_error, context)

# %%
lesson.answers(context)

# %%
cluster.engines.stop()
