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
# # 07 · AxoNN against its baselines: predicted at scale, measured live
#
# Megatron-LM, ZeRO-3/FSDP, hybrid sharding (HSDP) and plain data parallelism
# (DDP) are all points of AxoNN's 4D grid **row × col × depth × data**
# (`gpulab.engine.strategies`). This notebook sets them side by side:
#
# 1. the strategies as grid shapes: which group does what;
# 2. **predicted at scale**: the 80B GPT on 1024 Perlmutter GPUs
#    (`gpulab model compare`), each iteration cut into compute, exposed
#    communication and pipeline bubble, for a global batch you choose;
# 3. **live on the engines**: each strategy's best grid on 4 ranks, measured
#    next to the model fitted on this machine, and the bytes each group moved;
# 4. the **pipeline bubble** in a measured timeline, 1F1B against GPipe;
# 5. AxoNN's **overlap ablation** (OAR, ORS, OAG), measured and predicted;
# 6. questions the plots answer.
#
# Terms (MFU, HSDP, bubble, all-gather, ...): the [glossary](../docs/glossary.md).
# Each numbered question at the end has its answer in `gpulab.lessons.nb07`,
# opened in the last cells.

# %% tags=["parameters"]
N_ENGINES = 4                       # MPI ranks
ITERS = 3                           # timed iterations per measurement (after one warm-up)
FIT_REPS = 2                        # repetitions of each measurement when fitting the model here
N_LAYER = 2                         # blocks of the small GPT (Megatron-LM's pipeline gets up to this many stages)
BATCH = 16                          # sequences of 64 tokens per iteration
MICRO = 8                           # micro-batches of the pipeline timelines (4 stages)
GLOBAL_BATCHES = [256, 512, 1024, 2048]   # sequences of 2048 tokens, at scale
SCOREBOARD_LIVE = ("h",)  # this notebook's scoreboard row, measured live (about 1.5 min; () : recorded only)

# %%
import ipywidgets as W
from IPython.display import display
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from gpulab.cluster import start_engines
from gpulab.cluster.mesh_runner import MeshRunner
from gpulab.engine import GPTConfig
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.parallel.pipeline import bubble_fraction
from gpulab.engine.parallel.timeline_plot import gantt
from gpulab.engine.perf.compare import compare, time_split
from gpulab.engine.perf.live_plans import best_plans
from gpulab.engine.perf.machines import machine as machine_named
from gpulab.engine.perf.predict import gpt_config, predict
from gpulab.engine.strategies import STRATEGIES
from gpulab.widgets import Table, as_image

COLORS = {"compute": "#8c8c8c", "exposed communication": "#d62728", "bubble": "#1f77b4"}

# %% [markdown]
# ## 1 · The strategies are grid shapes
# A grid dimension splits each layer in its own way (`gpulab.engine.parallel.tp3d`):
# **row** splits a layer's output features (or input features for the
# transposed projections), **col** the other side, **depth** shards every
# weight and gathers it before use (ZeRO-3's all-gather and reduce-scatter),
# **data** replicates and all-reduces gradients. Megatron-LM adds a
# **pipeline** of stages around the grid.
#
# The figure after the table: 16 GPUs split five ways, one row per strategy,
# one column per group (what the group sends is written under it); each cell
# is the group's size, dark where the size is above 1, that is where the
# group communicates. What to look for: every strategy is the same grid with
# different sizes, and each uses only some of the groups.

# %%
Table([{"strategy": name, "grid (row, col, depth, data)": grid, "what it is": STRATEGIES[name.split()[0]]}
       for name, grid in [("axonn", "(R, C, D, P)"), ("megatron", "(R, 1, 1, P) x pipeline"),
                          ("zero3", "(1, 1, N, 1)"), ("hsdp", "(1, 1, D, P)"), ("ddp", "(1, 1, 1, N)")]])

# %%
GROUPS = [("row", "all-reduce of\npartial sums"), ("col", "all-reduce of\npartial sums"),
          ("depth", "all-gather weights,\nreduce-scatter grads"), ("data", "all-reduce\ngradients"),
          ("pipe", "send activations\nand gradients")]
SHAPES = {"AxoNN (2,2,2,2)": (2, 2, 2, 2, 1), "Megatron TP4 x PP2 x DP2": (4, 1, 1, 2, 2),
          "ZeRO-3 x16": (1, 1, 16, 1, 1), "HSDP 4 x 4": (1, 1, 4, 4, 1), "DDP x16": (1, 1, 1, 16, 1)}
fig = Figure(figsize=(9, 3.6))
ax = fig.subplots()
for i, sizes in enumerate(SHAPES.values()):
    for j, size in enumerate(sizes):
        ax.add_patch(Rectangle((j, i), 0.95, 0.9, alpha=0.15 + 0.8 * (size > 1), color="#4c72b0"))
        ax.text(j + 0.47, i + 0.45, size, ha="center", va="center", color="white" if size > 1 else "black")
ax.set_xlim(0, len(GROUPS)), ax.set_ylim(len(SHAPES), 0)
ax.set_xticks([j + 0.47 for j in range(len(GROUPS))], [f"{g}\n{what}" for g, what in GROUPS], fontsize=7)
ax.set_yticks([i + 0.45 for i in range(len(SHAPES))], list(SHAPES), fontsize=8)
ax.set_title("16 GPUs, five ways: the size of each group (dark: the group communicates)", fontsize=9)
fig.tight_layout()
display(as_image(fig))

# %% [markdown]
# ## 2 · Predicted at scale: 80B GPT on 1024 Perlmutter GPUs
# `gpulab model compare --world 1024 --model gpt-80b --machine perlmutter`:
# each strategy's fastest configuration that fits in memory (grid, pipeline,
# micro-batches, recomputation), with AxoNN's overlaps. The global batch
# changes the ranking: sharding without tensor parallelism needs at least one
# whole sequence per GPU. Pick it below.
#
# The plot: one bar per strategy (its best configuration named on the left),
# the horizontal axis predicted seconds per iteration, cut into compute
# (grey), communication left exposed (red) and pipeline bubble (blue). What
# to look for: which strategy is shortest, and which colour makes the others
# longer; switch the batch and watch which parts grow. This is arithmetic:
# the same on a laptop as anywhere.

# %%
perlmutter, gpt80 = machine_named("perlmutter"), gpt_config("gpt-80b")
OVERLAP_AT_SCALE = Overlap.parse("oar,ors,oag,buckets", bucket_bytes=64 << 20)  # the command's defaults
at_scale = {b: compare(gpt80, 1024, b, perlmutter, OVERLAP_AT_SCALE) for b in GLOBAL_BATCHES}


def draw_at_scale(global_batch):
    rows = at_scale[global_batch]
    display(Table([{"strategy": r["strategy"], "best configuration": r.get("config", r.get("why")),
                    "m": r.get("micro_batches", ""), "s/iter": r.get("iter_s", float("nan")),
                    "bubble s": r.get("bubble_s", float("nan")), "MFU": r.get("mfu", float("nan"))} for r in rows],
                  digits=2))
    fits = [r for r in rows if r["fits"]]
    fig = Figure(figsize=(8, 3))
    ax = fig.subplots()
    bottom = [0.0] * len(fits)
    for part, color in COLORS.items():
        values = [time_split(r)[part] for r in fits]
        ax.barh([f"{r['strategy']}: {r['config']}" for r in fits], values, left=bottom, color=color, label=part)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.invert_yaxis()
    ax.set_xlabel("predicted seconds per iteration")
    ax.set_title(f"gpt-80b on 1024 x perlmutter, global batch {global_batch} x 2048 tokens", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    display(as_image(fig))


W.interact(draw_at_scale, global_batch=W.Dropdown(options=GLOBAL_BATCHES, value=1024, description="global batch"));

# %%
best_4d = {b: next(r for r in at_scale[b] if r["strategy"] == "axonn") for b in GLOBAL_BATCHES}
megatron = {b: next(r for r in at_scale[b] if r["strategy"] == "megatron") for b in GLOBAL_BATCHES}
terms = []
for b in GLOBAL_BATCHES:
    for who, row in (("AxoNN's best", best_4d[b]), ("Megatron-LM", megatron[b]),
                     ("Megatron-LM untuned", megatron[b]["untuned"])):
        split = time_split(row)
        terms.append({"batch": b, "who": who, "configuration": row["config"],
                      "recompute": "on" if row["recompute"] else "off", "compute s": split["compute"],
                      "exposed comm s": split["exposed communication"], "bubble s": split["bubble"],
                      "s/iter": row["iter_s"]})
display(Table(terms, digits=2))
for b in GLOBAL_BATCHES:
    print(f"global batch {b:5d}: Megatron-LM / AxoNN's best = {megatron[b]['iter_s'] / best_4d[b]['iter_s']:.2f}, "
          f"untuned Megatron-LM / AxoNN's best = {megatron[b]['untuned']['iter_s'] / best_4d[b]['iter_s']:.2f}")
# what holds by construction: AxoNN's search covers the grids of ZeRO-3, HSDP and DDP, so none beats it
covered = ("zero3", "hsdp", "ddp")
assert all(best_4d[b]["iter_s"] <= r["iter_s"] + 1e-12 for b in GLOBAL_BATCHES for r in at_scale[b]
           if r["strategy"] in covered and r["fits"])
assert all(not r["fits"] for r in at_scale[min(GLOBAL_BATCHES)] if r["strategy"] in ("zero3", "hsdp"))
# what the text below reads from the ratios: the two within 10% from 512 sequences up; at 256 AxoNN without
# recomputation against Megatron-LM's bubble, faster by more than the paper's 26%; untuned Megatron-LM always so
ratio = {b: megatron[b]["iter_s"] / best_4d[b]["iter_s"] for b in GLOBAL_BATCHES}
assert all(abs(ratio[b] - 1) <= 0.10 for b in GLOBAL_BATCHES if b >= 512), ratio
assert ratio[256] > 1.26 and not best_4d[256]["recompute"] and time_split(megatron[256])["bubble"] > 0, ratio
assert all(megatron[b]["untuned"]["iter_s"] / best_4d[b]["iter_s"] > 1.26 for b in GLOBAL_BATCHES)

# %% [markdown]
# ### What the comparison says, and what it does not
# * **At the default global batch (1024 sequences) AxoNN's best is HSDP**,
#   hybrid sharding without tensor parallelism (the cell below checks it).
#   One sequence per GPU is enough for sharding; its traffic, weights
#   all-gathered and gradients reduce-scattered, is the same bytes at any
#   batch and hides behind the compute with OAG's prefetch, while tensor
#   parallelism's activation all-reduces grow with the tokens per GPU. Below
#   1024 sequences sharding cannot run, and the 4D grid with row > 1 wins.
# * **What holds by construction**: AxoNN's search covers every grid shape,
#   ZeRO-3's, HSDP's and DDP's included, so none of those rows can beat it
#   (the assert above checks that).
# * **What does not: Megatron-LM at full strength is not inside that
#   search.** A tuned Megatron-LM run uses sequence parallelism (LayerNorm and
#   dropout activations split over the tensor-parallel group), a distributed
#   optimizer (AdamW's fp32 states split over the data group) and, where the
#   layers split into equal chunks, the interleaved 1F1B schedule (the search
#   tries it, but 42 layers never split evenly into 4 stages x 2 or more
#   chunks, so the rows here run plain 1F1B). The first two cut its memory
#   enough to train
#   the 80B model **without recomputation** (the `recompute` column), while
#   from 512 sequences up AxoNN's best grid recomputes the forward pass: 8/6
#   of the compute. Read the table term by term: AxoNN's compute is longer by that
#   extra forward; Megatron-LM pays a pipeline bubble instead (blue in the
#   plot), and what is left between them is exposed communication, which
#   changes with the batch (question 1 asks how). From 512 sequences up the
#   terms roughly cancel: the kit predicts them **within 10% of each other,
#   Megatron-LM slightly ahead at 1024 sequences** (the ratios above). At 256
#   sequences they do not: AxoNN's best grid fits without recomputation, while
#   Megatron-LM's four pipeline stages get only 4 micro-batches per
#   data-parallel rank and a bubble of 3/4 of their compute, and AxoNN is
#   faster by more than the paper's 26% (the cell checks each of these).
# * **A finding, not a check of the paper: at 1024 sequences the kit's model
#   does not reproduce the paper's 26%.** It predicts AxoNN's best (HSDP, no
#   tensor parallelism) slower than a tuned Megatron-LM and faster than an
#   untuned one by more than 26% (the ratios printed above, and the line the
#   cell below prints at 1024 sequences). Three reasons it
#   can differ, none of which the kit can settle
#   alone: the paper's Megatron-LM configuration is not known here (the
#   "untuned" rows: Megatron-LM without sequence parallelism and distributed
#   optimizer must recompute too, and AxoNN then wins by
#   more than the paper's 26%); the model takes
#   one matmul rate for every GEMM size, while tensor parallelism's smaller
#   GEMMs run below it on a real A100; and it ignores contention between
#   groups that share a node's NICs. Switch the batch in the plot above and
#   watch the bubble and the recomputation trade places.
# * **The paper's numbers** (Singh et al., "A 4D Hybrid Algorithm to Scale
#   Parallel Training to Thousands of GPUs", arXiv 2305.13525, abstract): the
#   80B GPT on 1024 Perlmutter GPUs, **26% faster than Megatron-LM** and **57%
#   of peak** (182 PFLOP/s). The kit's MFU counts **model FLOPs** (6 N per
#   token plus attention); the abstract does not say which FLOPs its 57%
#   counts. AxoNN's launch script recomputes activations (Megatron-AxoNN
#   `examples/run_axonn_perlmutter.sh`, `--recompute-granularity full`), and
#   full recomputation adds one forward (2 of the 6 N), so **if** the 57%
#   counts the FLOPs the hardware executes, the kit's MFU × 8/6 is the
#   like-for-like figure, printed below.
# * **The set-up** used here: the paper's model (42 layers, width 12288, 96
#   heads) and sequence length 2048 come from AxoNN's launch scripts
#   (Megatron-AxoNN `examples/launch_per_comm_model.py`). The paper's global
#   batch for this run and its Megatron-LM and ZeRO-3 configurations (tensor
#   and pipeline degrees, schedule, distributed optimizer) could not be read
#   from the material this kit was built from (the evaluation section of the
#   paper was not available to it): the batch is a choice here, and
#   docs/axonn_vs_baselines.md shows how the comparison moves with it and
#   with a distributed optimizer.

# %%
DEFAULT_BATCH = 1024  # the kit's default at 1024 GPUs (an assumption, not the paper's)
axonn_default = best_4d[DEFAULT_BATCH]
with_tp = axonn_default["best_with_tensor_parallelism"]
R, C, D, P = axonn_default["shape"]
print(f"global batch {DEFAULT_BATCH}: AxoNN's best is {axonn_default['config']} {(R, C, D, P)}, "
      f"{axonn_default['iter_s']:.2f} s; "
      f"its best with tensor parallelism {with_tp['config']} {with_tp['iter_s']:.2f} s")
print(f"model-FLOP MFU {axonn_default['mfu']:.1%}; counting recomputation's forward as the hardware does "
      f"{axonn_default['mfu'] * 8 / 6:.1%}; the paper: 57% of peak, 26% faster than Megatron-LM")
tuned, untuned = megatron[DEFAULT_BATCH], megatron[DEFAULT_BATCH]["untuned"]
print(f"the model: Megatron-LM tuned ({tuned['config']}) {axonn_default['iter_s'] / tuned['iter_s'] - 1:.0%} faster "
      f"than AxoNN's best; AxoNN's best {untuned['iter_s'] / axonn_default['iter_s'] - 1:.0%} faster than "
      f"Megatron-LM untuned ({untuned['config']})")
assert R * C == 1 and D > 1 and P > 1, "the text above says HSDP wins at the default batch"
assert tuned["iter_s"] < axonn_default["iter_s"] < untuned["iter_s"] / 1.26, "the text above: the model's finding"

# %% [markdown]
# ## 3 · Live: each strategy's best grid on the engines
# The engines train a small GPT. First the performance model is fitted to
# this machine, as in notebook 05: compute rates, the engine's serial step,
# collective costs per group size, and measured iterations of three
# calibration grids, (1, 4, 1, 1), (4, 1, 1, 1) and (1, 1, 1, 4) (a minute or
# more where the ranks share cores). A grid the fit ran is not an
# out-of-sample test of the model: the table's `calibrated on` column marks
# it (DDP's (1, 1, 1, 4) is one). The model then picks each strategy's fastest grid
# (`gpulab.engine.perf.live_plans.best_plans`; Megatron-LM once as TP x DP and once
# with a pipeline, `megatron-pp`; AxoNN's row is its best shape that no other
# strategy has), then each grid trains `ITERS` iterations. Overlap is off here;
# section 5 switches it on.
#
# What to expect: on a laptop the model is tiny (the cell prints its
# parameters: under half a million), so DDP's
# single all-reduce is usually fastest and tensor parallelism's activation
# all-reduces cost more than the compute they split; times vary by tens of
# percent between runs because the ranks share the cores (next cell). On a
# GPU cluster with a model that does not fit on one GPU, DDP could not run at
# all, and the ranking of section 2 is the one to expect.

# %%
import math

from gpulab import host
from gpulab.engine.gpt.model import param_shapes
from gpulab.engine.perf.calibration import calibrated_on

print(host.describe(ranks=N_ENGINES))
engines = start_engines(N_ENGINES)
runner = MeshRunner(engines, iters=ITERS, warmup=1, timeout=150)
fitted = runner.fit_machine(reps=FIT_REPS)
cfg = GPTConfig(vocab_size=128, block_size=64, n_layer=N_LAYER, n_head=8, n_embd=128, dtype="float32")
print(f"the GPT: {sum(math.prod(s) for s in param_shapes(cfg).values()) / 1e6:.2f} M parameters")
print(f"fitted: compute {fitted.share:.1f}x slower with all ranks busy, overlap efficiency {fitted.overlap}")
plans = best_plans(cfg, N_ENGINES, BATCH, fitted)
live = []
for plan in plans:
    row = runner.measure(N_ENGINES, cfg, plan["shape"], BATCH, Overlap(), pipe=plan["pipe"],
                         micro_batches=plan["micro_batches"])
    live.append({**row, "strategy": plan["strategy"], "name": plan["predicted"]["config"], "shape": plan["shape"],
                 "predicted": plan["predicted"], "predicted_bytes": plan["predicted_bytes"]})
Table([{"strategy": r["strategy"], "grid": r["name"], "measured ms": r["iter_s"] * 1e3,
        "spread ms": f"{min(r['iter_s_all']) * 1e3:.0f}-{max(r['iter_s_all']) * 1e3:.0f}",
        "predicted ms": r["predicted"]["iter_s"] * 1e3, "exposed comm ms": r["summary"]["exposed_comm_s"] * 1e3,
        **{f"{g} wire KiB": r["wire_by_group"].get(g, 0) / 1024 for g, _ in GROUPS},
        "calibrated on": tuple(r["shape"]) in calibrated_on(fitted)} for r in live], digits=0)

# %% [markdown]
# The plot: left, milliseconds per iteration (horizontal axis) of each
# strategy's grid, measured (blue) and predicted by the model fitted here
# (orange): look at whether the two put the strategies in the same order.
# Right, the MiB **each rank sends on the wire** per iteration, by group (the
# engine's trace of every collective: a ring all-reduce sends `2(p-1)/p` of
# its buffer, an all-gather or reduce-scatter `(p-1)/p`, a pipeline send the
# activation whole), mean over ranks. Look at which group carries each
# strategy's traffic and how much: the buffer sizes the collectives work on
# are in the table after the plot.

# %%
fig = Figure(figsize=(11, 3.4))
ax_t, ax_b = fig.subplots(1, 2)
names = [r["name"] for r in live]
ys = range(len(live))
ax_t.barh([y - 0.2 for y in ys], [r["iter_s"] * 1e3 for r in live], height=0.4, color="#4c72b0", label="measured")
ax_t.barh([y + 0.2 for y in ys], [r["predicted"]["iter_s"] * 1e3 for r in live], height=0.4, color="#dd8452",
          label="predicted (fitted here)")
ax_t.set_yticks(list(ys), names, fontsize=8)
ax_t.invert_yaxis()
ax_t.set_xlabel("ms per iteration")
ax_t.legend(fontsize=8)
left = [0.0] * len(live)
for (group, _), color in zip(GROUPS, ["#2ca02c", "#9467bd", "#d62728", "#1f77b4", "#ff7f0e"]):
    values = [r["wire_by_group"].get(group, 0) / 2**20 for r in live]
    ax_b.barh(list(ys), values, left=left, color=color, label=group)
    left = [a + v for a, v in zip(left, values)]
ax_b.set_yticks(list(ys), [""] * len(live))
ax_b.invert_yaxis()
ax_b.set_xlabel("MiB sent on the wire per rank and iteration, by group")
ax_b.legend(fontsize=8, loc="lower right")
fig.suptitle(f"{N_ENGINES} ranks on this machine, GPT {N_LAYER} layers x 128, batch {BATCH} x 64", fontsize=9)
fig.tight_layout()
display(as_image(fig))

# %%
for r in live:  # the byte counts are exact: the volume model predicts every collective the engine issues
    if r["predicted_bytes"] is not None:
        assert r["bytes_by_group"] == r["predicted_bytes"], r["name"]
assert [r["strategy"] for r in live] == [p["strategy"] for p in plans] and all(r["iter_s"] > 0 for r in live)
assert any(r["bytes_by_group"].get("pipe", 0) > 0 for r in live if r["pipe"] > 1)

# %% [markdown]
# **Buffers against the wire.** With ring algorithms a rank sends `2(p-1)/p`
# of an all-reduce's buffer and `(p-1)/p` of an all-gather's or a
# reduce-scatter's. The volume model (`gpulab.engine.perf.volume`) applies
# that to every collective of the grids without a pipeline, and the table
# checks it against the live trace's wire bytes. ZeRO-3's three full-weight
# buffers are about 3x DDP's one gradient buffer; what that makes on the wire
# is question 4.

# %%
from gpulab.engine.perf.volume import collective_calls, totals
from gpulab.lessons import answers_hidden

wire = {r["name"]: totals(collective_calls(cfg, r["shape"], BATCH), by="group") for r in live if r["pipe"] == 1}
buffers = {r["name"]: totals(collective_calls(cfg, r["shape"], BATCH), by="group", value="nbytes")
           for r in live if r["pipe"] == 1}
measured_wire = {r["name"]: sum(r["wire_by_group"].values()) for r in live if r["pipe"] == 1}
for r in live:  # the live trace sent what the volume model predicts (with the iteration's gradient-norm sum)
    if r["pipe"] == 1:
        want = totals(collective_calls(cfg, r["shape"], BATCH, grad_norm=True), by="group")
        assert all(abs(r["wire_by_group"].get(g, 0) - v) <= 1e-6 * max(v, 1) for g, v in want.items()), r["name"]
Table([{"grid": name, "buffer KiB": sum(buffers[name].values()) / 1024, "wire KiB": sum(w.values()) / 1024,
        "wire KiB (live trace)": measured_wire[name] / 1024,
        **{f"{g} wire KiB": w.get(g, 0) / 1024 for g, _ in GROUPS[:4]}} for name, w in wire.items()], digits=0)

# %%
by_strategy = {r["strategy"]: r["name"] for r in live if r["pipe"] == 1}
zero3_over_ddp = {kind: sum(d[by_strategy["zero3"]].values()) / sum(d[by_strategy["ddp"]].values())
                  for kind, d in (("buffer", buffers), ("wire", wire))}
if not answers_hidden():  # the wire ratio is question 4's answer
    print(f"ZeRO-3 / DDP: buffers {zero3_over_ddp['buffer']:.2f}x, wire {zero3_over_ddp['wire']:.2f}x")
assert zero3_over_ddp["wire"] < zero3_over_ddp["buffer"] / 1.8  # bytes on the wire, not buffers: question 4

# %% [markdown]
# ## 4 · The pipeline bubble, measured
# Four stages on four ranks (two blocks each, grid (1, 1, 1, 1) per stage),
# `MICRO` micro-batches: 1F1B, Megatron-LM's interleaved 1F1B and GPipe. In the
# timeline each row is a rank: the gaps before its first forward and after its
# last backward are the bubble. Its share of the step, measured, sits beside
# the formula (p - 1) / (m + p - 1), which assumes every stage takes the same
# time (the first also embeds, the last computes the LM head and the loss).
# Interleaved, each stage holds `VIRTUAL` chunks of one block (stage s the
# model's chunks s, s + 4, ...) and a micro-batch goes round the stages
# `VIRTUAL` times: the bubble is (p - 1) / (v m) of the ideal time in
# Megatron-LM's paper, (p - 1)/v slots beside the m useful ones, for
# `VIRTUAL` times the stage-to-stage sends.
#
# The plot: one timeline per schedule, the horizontal axis time within the
# step, one row per rank (= stage); the bars are each micro-batch's forward
# and backward (interleaved: `F3.1` is micro-batch 3's forward through the
# stage's chunk 1). What to look for: the empty wedge at the start and end of
# each row (the bubble), of about the same size for 1F1B and GPipe and, by
# the formula, narrower interleaved, whose bars are shorter (one block, not
# two) and alternate between chunks, with twice the sends between them (each
# a wait where a stage runs ahead); GPipe's long run of forwards before any
# backward.
# On a laptop the stages share cores, so bars stretch unevenly and the
# measured idle share differs from the formula by some tens of percent; on
# GPUs with one stage each the shares come closer to the formula, apart from
# the first and last stages' extra work.

# %%
STAGES, VIRTUAL = 4, 2
pipe_cfg = GPTConfig(vocab_size=64, block_size=64, n_layer=STAGES * VIRTUAL, n_head=4, n_embd=128, dtype="float32")
SCHEDULES = {"1f1b": 1, "interleaved": VIRTUAL, "gpipe": 1}  # schedule -> model chunks per stage
bubbles = {}
fig = Figure(figsize=(11, 8), layout="constrained")
for ax, (schedule, v) in zip(fig.subplots(len(SCHEDULES), 1), SCHEDULES.items()):
    row = runner.measure(STAGES, pipe_cfg, (1, 1, 1, 1), BATCH, Overlap(), pipe=STAGES, micro_batches=MICRO,
                         schedule=schedule, virtual_stages=v)
    phases = [[e for e in events if e["kind"] == "phase" and "micro" in e] for events in row["events"]]
    start = min(e["start"] for ev in phases for e in ev)
    wall = max(e["end"] for ev in phases for e in ev) - start
    idle = [1 - sum(e["end"] - e["start"] for e in ev) / wall for ev in phases]
    bubbles[schedule] = sum(idle) / len(idle)
    model = f"(p-1)/(v m) = {(STAGES - 1) / (v * MICRO):.3f} of the ideal time, " if v > 1 else ""
    formula = "" if answers_hidden() else f" (model: {model}{bubble_fraction(STAGES, MICRO, v):.0%} of the step)"
    gantt(row["events"], ax=ax, title=f"{schedule}{f' (v={v})' if v > 1 else ''}, {STAGES} stages, m={MICRO}: "
                                      f"idle {bubbles[schedule]:.0%} of the forward-backward{formula}")
display(as_image(fig))
print("measured idle share", {k: round(v, 2) for k, v in bubbles.items()})
if not answers_hidden():  # the formula's value is question 3's answer
    print("model", {k: round(bubble_fraction(STAGES, MICRO, v), 2) for k, v in SCHEDULES.items()})
assert all(0 < b < 1 for b in bubbles.values())

# %% [markdown]
# ## 5 · AxoNN's overlap ablation: baseline, +OAR, +ORS, +OAG
# The paper switches its overlaps on one after the other: **OAR** hides the
# dX all-reduce behind the dW matmul, **ORS** the dW reduce-scatter behind
# the layers before it, **OAG** issues the next layer's weight all-gather a
# layer ahead. Measured here on grid (2, 1, 2, 1), where row and depth both
# communicate; predicted by the fitted model for the same runs, and at scale
# for the 80B GPT on (8, 1, 8, 16) at a global batch of 512 sequences.
#
# The plot: left, milliseconds per iteration here (measured blue, predicted
# orange) for each step, switches added left to right; right, the model's
# seconds per iteration at scale, cut into exposed communication (red) and the
# rest. What to look for: on the left the hidden time grows but the bars
# hardly shrink, because on a laptop the cores that copy the bytes are the
# cores that compute; on the right, the switch whose step removes the most
# red, which is what a GPU cluster would gain: there NCCL's kernels take a
# few of the GPU's SMs and the NICs move the bytes between nodes, so overlap
# hides most of the communication (not all: those SMs and some memory
# bandwidth are taken from the compute, which the model ignores).

# %%
from itertools import pairwise

STEPS = [("baseline", "none"), ("+OAR", "oar"), ("+ORS", "oar,ors"), ("+OAG", "oar,ors,oag")]
ABLATION_SHAPE = (2, 1, 2, 1)
ablation = []
for step, switches in STEPS:
    overlap = Overlap.parse(switches)
    row = runner.measure(N_ENGINES, cfg, ABLATION_SHAPE, BATCH, overlap)
    here = predict(cfg, ABLATION_SHAPE, BATCH, fitted, overlap)
    big = predict(gpt80, (8, 1, 8, 16), 512, perlmutter, overlap, recompute=True, flash_attention=True)
    ablation.append({"step": step, "measured ms": row["iter_s"] * 1e3,
                     "exposed ms": row["summary"]["exposed_comm_s"] * 1e3,
                     "hidden ms": row["summary"]["hidden_comm_s"] * 1e3, "predicted ms": here["iter_s"] * 1e3,
                     "at scale s": big["iter_s"], "at scale exposed s": big["exposed_comm_s"]})
Table(ablation, digits=1)

# %%
fig = Figure(figsize=(10, 3))
axes = fig.subplots(1, 2)
steps = [a["step"] for a in ablation]
axes[0].bar([i - 0.2 for i in range(4)], [a["measured ms"] for a in ablation], 0.4, color="#4c72b0", label="measured")
axes[0].bar([i + 0.2 for i in range(4)], [a["predicted ms"] for a in ablation], 0.4, color="#dd8452",
            label="predicted")
axes[0].set_xticks(range(4), steps)
axes[0].set_xlabel("overlap switches, added left to right")
axes[0].set_ylabel("ms per iteration")
axes[0].set_title(f"live, grid {ABLATION_SHAPE}, {N_ENGINES} ranks", fontsize=9)
axes[0].legend(fontsize=8)
axes[1].bar(steps, [a["at scale s"] - a["at scale exposed s"] for a in ablation], color=COLORS["compute"],
            label="the rest")
axes[1].bar(steps, [a["at scale exposed s"] for a in ablation], bottom=[a["at scale s"] - a["at scale exposed s"]
            for a in ablation], color=COLORS["exposed communication"], label="exposed communication")
axes[1].set_xlabel("overlap switches, added left to right")
axes[1].set_ylabel("s per iteration")
axes[1].set_title("predicted, gpt-80b on 1024 x perlmutter, (8,1,8,16), batch 512", fontsize=9)
axes[1].legend(fontsize=8)
fig.tight_layout()
display(as_image(fig))
assert ablation[0]["hidden ms"] == 0 < ablation[-1]["hidden ms"]
assert ablation[-1]["at scale s"] < ablation[0]["at scale s"]
assert all(b["at scale exposed s"] <= a["at scale exposed s"] for a, b in pairwise(ablation))

# %% [markdown]
# ## This notebook's row of the scoreboard
# Claim (h) of the kit's [scoreboard](../docs/scoreboard.md): AxoNN's 4D
# beats Megatron-LM and ZeRO-3. Its "this run" is section 3's comparison on
# 4 ranks (AxoNN's grid = the model's pick over every grid, measured against
# each baseline's best grid); its "model" is section 2's `gpulab model
# compare` at the paper's run. First as recorded, then live for the ids in
# `SCOREBOARD_LIVE`. **What to expect:** on a laptop AxoNN's pick for this
# small model is plain data parallelism, (1,1,1,4), and the baselines'
# margins move a lot with the machine's load: each comes with its 95%
# interval over rounds, and the verdict is *inconclusive here* when an
# interval straddles the claim's margin (this run cannot tell; the row says
# how busy the machine was and what to try). A live verdict may be
# inconclusive where the record decided, never the opposite of a decisive
# recorded one: the cell checks that. **On a real cluster** the margin the paper
# reports (26% over Megatron-LM on 1024 GPUs) comes from grids this machine
# cannot hold, which only the model column prices, and there the kit's model
# **disagrees with the paper** (section 2): it predicts a tuned Megatron-LM
# faster than AxoNN's best and AxoNN faster than an untuned Megatron-LM by
# more than 26%. The row's verdict is about the live miniature only.

# %%
from gpulab import scoreboard
from gpulab.records import stamp
from gpulab.scoreboard import VERDICTS, contradictions, load, table
from gpulab.scoreboard.recorded import results_dir  # docs/results, or an installed gpulab's copy of it

print(f"recorded (docs/results/scoreboard_quick.json, {stamp(results_dir() / 'scoreboard_quick.json')}):")
recorded_rows = [row for row in load(results_dir() / "scoreboard_quick.json") if row["id"] == "h"]
display(table(recorded_rows))
assert [row["verdict"] in VERDICTS for row in recorded_rows] == [True]
if SCOREBOARD_LIVE:
    live_rows = scoreboard.run(SCOREBOARD_LIVE, progress=print)
    print("live, this run:")
    display(table(live_rows))
    assert all(row["verdict"] in VERDICTS for row in live_rows)
    assert not contradictions(live_rows, recorded_rows), contradictions(live_rows, recorded_rows)

# %% [markdown]
# ## Questions the plots answer (6)
# 1. **When does the 4D grid beat sharded data parallelism, and why?** In
#    section 2, at 256 and 512 sequences ZeRO-3 and HSDP cannot run at all:
#    they split the batch over every GPU and need a whole sequence on each.
#    Tensor parallelism splits one sequence's work over several GPUs, so the
#    4D grid runs, and runs well. At 1024 sequences and up the best grid is
#    HSDP. Switch the plot's batch from 2048 to 1024 sequences: which colour
#    of HSDP's bar grows, to how many seconds, and why?
# 2. **What does the global batch do to Megatron-LM?** Its 1F1B bubble is
#    (p - 1)/(m + p - 1) of the pipeline schedule's time, for p pipeline
#    stages and m micro-batches (the table's `m`). What share does the formula
#    give at 1024 sequences? Then read the blue part of its bar at each batch
#    (the bar also holds exposed communication and work outside the pipeline,
#    so the blue part is a little less of it): does its length change, or only
#    its share of the bar?
# 3. **What does the bubble cost?** In section 4, is the measured idle share
#    close to the formula? Why is GPipe's idle share about the same as
#    1F1B's, and what does 1F1B save instead (count the micro-batches whose
#    activations each stage holds at once)?
# 4. **Bytes per group, live:** which group carries DDP's traffic, which
#    ZeRO-3's? Counted as buffers ZeRO-3 looks 3x DDP (all-gather in
#    forward, again in backward, and a reduce-scatter, each a full weight
#    buffer): how many times DDP's bytes does ZeRO-3 put **on the wire**
#    (the plot's right panel)? Both counts are exact: they equal the volume
#    model's (`gpulab.engine.perf.volume`), checked in the cells after the plot.
# 5. **Measured against predicted, live:** the ranks share this machine's
#    cores (the line printed before the engines started says how many), and
#    whatever else runs shares them too, so absolute times move a lot from
#    run to run. Does the model at least order the strategies the way the
#    measurements do? Give the rank correlation of the live table's
#    measured and predicted times.
# 6. **The ablation:** on this machine the "network" is memory copies done by
#    the same cores that compute, so hidden time is real but the iteration
#    hardly shrinks; at scale, where a few SMs per GPU and the NICs move the
#    bytes, which switch removes the most exposed communication, and how
#    many seconds of it?

# %% [markdown]
# ## Answers
# Try the questions first. `lesson.check(n, value)` checks a number of yours
# (right, close or wrong, and why); the cell below checks that this
# notebook's own number for question 4 agrees with the kit's (it shows the
# verdict only while the answers are open). `lesson.answers(context)` opens every
# answer, with the kit's numbers for this notebook's runs. A teacher can hide
# the answers for a course (`GPULAB_HIDE_ANSWERS=1`).

# %%
from gpulab.lessons import Lesson

lesson = Lesson("07")
context = {"micro": MICRO, "gpt_config": cfg, "ranks": N_ENGINES, "batch_size": BATCH,
           "live_measured_ms": [r["iter_s"] * 1e3 for r in live],
           "live_predicted_ms": [r["predicted"]["iter_s"] * 1e3 for r in live]}
lesson.self_check(4, zero3_over_ddp["wire"], context)

# %%
lesson.answers(context)

# %%
engines.stop()
