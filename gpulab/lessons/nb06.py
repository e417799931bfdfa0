"""Answers to notebook 06's questions (scaling on paper through the performance model)."""

from dataclasses import replace

from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.perf.machines import machine
from gpulab.engine.perf.memory_model import machine_precision, stage_memory
from gpulab.engine.perf.predict import gpt_config, rank
from gpulab.lessons.answers import Answer

# the notebook's assumptions: AxoNN's overlaps plus bucketed gradients, recomputation, flash attention
OVERLAP = Overlap(oar=True, ors=True, oag=True, buckets=True, bucket_bytes=64 << 20)
ASSUME = {"recompute": True, "flash_attention": True}


def _ranked(ctx: dict, overlap: Overlap = OVERLAP) -> list[dict]:
    return rank(gpt_config(ctx["gpt_model"]), ctx["gpus"], ctx["global_batch"], machine("perlmutter"), overlap,
                **ASSUME)


def _largest_axis(ctx: dict) -> float:
    return max(_ranked(ctx)[0]["shape"])


def _cache_cost(ctx: dict) -> float:
    """GB per GPU that the weight cache adds to the best Perlmutter shape, as the notebook's calculator
    (``gpulab.widgets.calculator``: one stage, one micro-batch) counts it."""
    config, perlmutter = gpt_config(ctx["gpt_model"]), machine("perlmutter")
    shape = tuple(_ranked(ctx)[0]["shape"])
    totals = [stage_memory(config, shape, 0, global_batch=ctx["global_batch"], precision=machine_precision(perlmutter),
                           overlap=overlap, **ASSUME)["total"] for overlap in (OVERLAP, replace(OVERLAP, cache=True))]
    return (totals[1] - totals[0]) / 1e9


def _fixed_model_flatness(ctx: dict) -> float:
    """MFU of the fixed model at the most GPUs over MFU at the fewest (the same sequences per GPU), on Perlmutter."""
    gpus, per_gpu = sorted(ctx["gpu_counts"]), ctx["sequences_per_gpu"]
    config, perlmutter = gpt_config(ctx["fixed_model"]), machine("perlmutter")
    mfu = [rank(config, g, per_gpu * g, perlmutter, OVERLAP, **ASSUME)[0]["mfu"] for g in (gpus[0], gpus[-1])]
    return mfu[1] / mfu[0]


ANSWERS = {
    1: Answer(
        text="""**Data**, on every machine: the best shapes keep the tensor-parallel part (row × col × depth) small,
enough to fit in memory, and give most of the GPUs to data parallelism. Data moves only the gradients, once per
iteration: on Perlmutter and the H100 node the buckets hide that behind backward, while on Frontier, whose
network is slower per GCD, about 0.55 s of it stays exposed, its largest exposed group (still less than row
or col would cost there); row and col move activations at every layer. The
kit's number is the largest axis of the best Perlmutter shape for the notebook's `MODEL`, `WORLD` and
`BATCH`.

Frontier differs because its node is 8 GCDs (4 MI250X) whose links per GCD are slower than Perlmutter's
4 NVLink-connected A100s, and its network gives each GCD a smaller share of a node's NICs (the table at the
top prints each machine's node and network GB/s, and the next cell their sources). A group that fits
in a node is cheap on Perlmutter; on Frontier the model moves work out of row (activations every layer)
into depth (weights, gathered a layer ahead and hidden) and data. Read the "exposed by group" bars: what
the winner leaves exposed is what the machine is worst at.""",
        value=_largest_axis, unit="GPUs", needs=("gpt_model", "gpus", "global_batch"), rel_tol=0.0,
        close_tol=0.0,
        hint="Read the best row of the Perlmutter table: the largest of row, col, depth and data."),
    2: Answer(
        text="""`cache` keeps every gathered weight block from forward to backward: backward needs no
all-gathers, but each GPU holds about every layer's gathered block, `(12 · n_layer · n_embd² + vocab ·
n_embd) / (row · col)` values (the calculator's "gathered weights"; `gpulab.engine.perf.memory_model.
weight_cache_values` replays the engine's fetcher), instead of the `1/depth` shard and one block in flight.
The kit's number is what the cache adds to each GPU of the best Perlmutter shape, the calculator's total
with the box ticked minus without. Whether the shape still fits is the status line's verdict against the
usable memory (90% of the GPU's); when it does not, the calculator's advice names the cache. The shapes that
stop fitting are those with **small row × col and large depth**: their blocks are big (little tensor
splitting) and depth was what kept them small. Raising row × col (and lowering depth) shrinks the cached
blocks until the shape fits again, at the cost of activations summed over row and col at every layer.""",
        value=_cache_cost, unit="GB", needs=("gpt_model", "gpus", "global_batch"), rel_tol=0.05,
        close_tol=0.25,
        hint="Read the calculator's busiest-stage total with and without 'cache gathered weights' at the "
             "shape it starts at, and subtract; the 'gathered weights' row alone also counts the one block "
             "in flight that prefetching holds without the cache."),
    3: Answer(
        text="""In the model the fixed-model curve hardly falls: with `SEQUENCES_PER_GPU` fixed the global batch
grows with the GPUs, so the extra GPUs become extra data-parallel replicas of the same best tensor grid.
Each GPU's compute per iteration stays the same, and so do its data-parallel bytes (a ring all-reduce
sends `2(p-1)/p` of the gradient shard, which tends to 2x the shard, not to more), hidden behind backward
by the buckets; only latency terms and, at the largest counts, a different shape cost a little. The
kit's number is the fixed model's MFU at the largest GPU count over its MFU at the smallest (1.0 = flat).

The weak-scaling curve moves more because each point is a **different model**: wider and deeper models
need more memory per GPU, and the best shape changes: on Frontier, depth x data grids up to 20B, grids with
row (and col at 80B) for 40B and 80B, then depth-heavy grids (depth 128-256) from 160B up; the activations
that row and col sum grow with the width, the weights that depth gathers with the model. On a real
machine both curves would fall further than drawn: the model ignores contention on shared links, stragglers
and the network's congestion at thousands of nodes, and Perlmutter's points beyond its ~7,000 GPUs are
extrapolations.""",
        value=_fixed_model_flatness, unit="x", needs=("fixed_model", "gpu_counts", "sequences_per_gpu"), rel_tol=0.01,
        close_tol=0.05,
        hint="Divide the MFU of the fixed model's last point (most GPUs) by its first, on Perlmutter: a "
             "ratio near 1 means the curve is flat."),
    4: Answer(
        text="""The model gives every group its own links, but a node has a few NICs (Perlmutter: 4 Slingshot-11
NICs for 4 GPUs; Frontier: 4 for 8 GCDs). When two groups both span nodes and run at the same time (a
depth all-gather prefetched during backward while the data buckets all-reduce, say) they share the NICs
and each gets less bandwidth. Sharing would hurt most the shapes whose depth *and* data groups both leave
the node, and favour shapes that keep all but one group inside a node, as AxoNN's layout does (col
innermost, data outermost). The ranking would move toward fewer, larger inner groups; the kit says in
its assumptions line that it ignores link sharing."""),
    5: Answer(
        text="""AxoNN's published ranker (Megatron-AxoNN `examples/comm_model.py`, `get_configs_for_transformer`)
is a **communication-only** model: per layer, ring volumes over each group divided by bandwidths measured
on Perlmutter and Frontier (the `get_bw` table, indexed by how far apart the group's members are), no
latency, no compute, no overlap; it enumerates power-of-two grids with a memory floor (a minimum degree
of tensor parallelism per model size in `launch_per_comm_model.py`) and **runs the top 20 for real**
(`topk=20`) to keep the fastest. gpulab's model (this notebook) adds latency, compute, overlap and a memory
model, but it is gpulab's, not AxoNN's.

In notebook 05 the model's pick was checked against every shape measured on this machine: the "model's
pick measured ... the measured best" line and the Spearman correlation say how often and by how much it
missed; the recorded 2-node run prints `pick_over_best` (1.00 = the pick was the winner). On shared
cores the first pick is often not the winner but close to it, which is why running a short list for real,
as AxoNN does, is worth it."""),
}
