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
# # 01 · Broadcast algorithms: code, pattern, cost
#
# A broadcast copies `n` bytes from a root rank to the other `p - 1` ranks.
# MPI libraries ship several algorithms and switch between them by message
# size and process count. Each section below shows one family: its **code**
# (the real implementation in `gpulab/bcast/`, built from point-to-point
# sends), its **communication pattern** (traced live on the engines: one arrow
# per message, one column per logical step) and its **cost** in the Hockney
# model, where a message of `m` bytes costs `a + m·b` (`a`: latency,
# `b`: seconds per byte). At the end, all of them are measured. Terms are
# defined in the [glossary](../docs/glossary.md).

# %% tags=["parameters"]
N_ENGINES = 4                  # MPI ranks (and the process count of the patterns)
TRACE_BYTES = 4096             # message size for the patterns
TRACE_CHUNK = 1024             # chunk size for the pipelined patterns: 4 chunks
SIZES = [1 << 10, 1 << 16, 1 << 20]   # message sizes for the measurement at the end
ITERS = 20                     # timed iterations per measurement

# %%
from gpulab.cluster import start_engines
from gpulab.cluster.bcast_runner import EngineRunner
from gpulab.widgets import Table, as_image, show_code, show_patterns, sweep_figure

engines = start_engines(N_ENGINES)
runner = EngineRunner(engines, iters=ITERS, warmup=3)
TRACE = dict(nbytes=TRACE_BYTES, options={"chunk_bytes": TRACE_CHUNK, "radix": 4, "ranks_per_node": 2})
engines

# %% [markdown]
# ## 1 · Trees that move the whole message
# **linear**: the root sends the whole message to each rank in turn:
# `(p-1)(a + n·b)` when its sends go one after another over its one link:
# fine for 2-3 ranks, hopeless beyond on a network. On one node, where
# MPICH's single-copy path lets every receiver copy for itself, the sends
# overlap, and the kit's recorded tuning table
# (`docs/results/bcast_tuning.json`) picks linear at most sizes for p = 4
# and at every size for p = 8.
#
# **binomial**: every rank that has the data sends it on, so the number of
# holders doubles each round: `ceil(log2 p)(a + n·b)`. Ranks are renumbered
# relative to the root (`vr = (me - root) % p`), so any root works the same
# way. MPICH's generic rule (Thakur et al. 2005, in `gpulab.bcast.cost.mpich.mpir_rule`)
# uses it up to 12 KiB at any p, and at every size on fewer than 8
# processes.
#
# **What `MPI_Bcast` runs is not always that rule.** MPICH 5's ch4 device
# first looks up its own table, `maint/tuning/coll/ch4/generic.json` in
# github.com/pmodels/mpich (the same since 2022, and in v5.0.1): on a
# communicator with a node hierarchy and **p < 8, at every size**, it runs
# *composition alpha* (`src/mpid/ch4/src/ch4_coll_impl.h`): the root hands
# the data to its node's leader, the leaders broadcast across nodes, then each
# leader broadcasts inside its node. On **one node** either path ends in
# the broadcast inside the node. There MPICH's shared-memory module has a
# release-gather broadcast of its own, but only for a process that is not
# multi-threaded (`maint/tuning/coll/ch4/posix_generic.json`); mpi4py starts
# MPI with `MPI_THREAD_MULTIPLE`, so these engines fall back to the generic
# rule: a binomial tree for p < 8. (An OSU benchmark in C, started with
# `MPI_Init`, gets release-gather instead.) **Across nodes** it is
# node-aware: the leaders first, then each node. Which placement that helps,
# and against which flat tree, is notebook 02's question 6 (on 2 emulated
# nodes x 2 ranks; its dense explorer, with 8 ranks, shows the p ≥ 8
# rules). For p ≥ 8 the table picks,
# on a power-of-two `p`, alpha below 12 KiB, *composition beta* (inside the
# root's node, then across leaders, then inside the other nodes) below 512 KiB,
# and above that *composition gamma* (the flat algorithm of the generic rule);
# on other `p`, alpha below 12 KiB and gamma above.
#
# **k-nomial** (radix k): each round multiplies the holders by k; fewer rounds,
# more sends per round: about `(k-1)·ceil(log_k p)(a + n·b)`. Open MPI's
# fixed rules (`coll_tuned_bcast_intra_dec_fixed` in
# `ompi/mca/coll/tuned/coll_tuned_decision_fixed.c`) pick the k-nomial tree
# for some sizes on 8-31 ranks and for many from 32 ranks up (every size
# on 64-127 ranks); its radix is the MCA parameter
# `coll_tuned_bcast_algorithm_knomial_radix`, 4 by default
# (`coll_tuned_bcast_decision.c`). On 4-7 ranks, as here, the same rules
# never pick it: binary tree, binomial, linear, or the chain from 1 MiB.
#
# The pattern plots below: ranks on the y axis, logical steps (messages that
# can travel at the same time) on the x axis, one arrow per message from
# sender to receiver. Look at how many steps each algorithm needs and how
# many arrows leave one rank in one step.

# %%
show_code("bcast/algorithms/trees.py", "linear", "binomial", "knomial");
show_code("bcast/algorithms/tree_shapes.py", "knomial_tree");

# %%
show_patterns(runner, ["linear", "binomial", "knomial"], N_ENGINES, **TRACE);

# %% [markdown]
# ## 2 · Pipelines: cut the message into chunks
# A tree sends the *whole* message down each edge before the next hop can
# start. Cutting it into `k` chunks lets every link work at once: a rank
# forwards chunk `c` while chunk `c+1` is still arriving.
#
# **chain** (the pipelined ring of the paper): rank `vr` receives from `vr-1`
# and sends to `vr+1`: `(p + k - 2)(a + (n/k)·b)`. For large `n` that tends to
# `n·b`, independent of `p`: the reason it wins for big messages.
# The best chunk count is about `sqrt((p-2)·n·b / a)`.
#
# **binary tree** and **split binary tree**: the same pipelining down a binary
# tree (height `h`): about `2(h + k - 1)(a + (n/k)·b)`; the split variant sends
# each half of the message down one subtree, then pairs swap halves.

# %%
show_code("bcast/algorithms/pipelined.py", "forward_chunks", "chain");

# %%
show_patterns(runner, ["chain", "binary_tree", "split_binary_tree"], N_ENGINES, **TRACE);

# %% [markdown]
# ## 3 · Scatter, then allgather (van de Geijn)
# Cut the message into `p` blocks; scatter them with a binomial tree (each rank
# ends up with one block), then allgather so everyone has all blocks. Each rank
# moves about `2·n·(p-1)/p` bytes in total instead of `n` per tree level:
#
# * recursive-doubling allgather: `2·log2(p)·a + 2((p-1)/p)·n·b` (p a power of 2)
# * ring allgather: `(log2 p + p - 1)·a + 2((p-1)/p)·n·b`, any p
#
# MPICH's generic rule uses them only from 8 processes up: from 12 KiB,
# recursive doubling when `p` is a power of two and the message is below
# 512 KiB, the ring otherwise (`gpulab.bcast.cost.mpich.mpir_rule` says why
# for any size and `p`). On these 4 engines, on one node, `MPI_Bcast` is a
# binomial tree at every size; across nodes it is the node-aware composition
# of section 1.

# %%
show_code("bcast/algorithms/scatter_allgather.py", "binomial_scatter", "scatter_allgather_ring");

# %%
show_patterns(runner, ["scatter_allgather_rd", "scatter_allgather_ring"], N_ENGINES, **TRACE);

# %% [markdown]
# ## 4 · Hierarchical: cross the slow network once per node
# On GPU clusters the links inside a node are usually faster than those between
# nodes, by how much depends on the machine: the cell below computes the
# ratio from the kit's machine profiles (`gpulab/machines/links.json`, each
# number with its source). The root first sends to one *leader* per node,
# then each leader broadcasts inside its node:
# `T_inter(nodes) + T_intra(ranks per node)`. Here the nodes are emulated:
# `ranks_per_node=2` makes ranks {0,1} one "node" and {2,3} another.

# %%
from gpulab.bcast.cost.profiles import PROFILES, profile

link_ratio = {name: profile(name).inter.small.beta / profile(name).intra.small.beta for name in PROFILES}
for name, ratio in link_ratio.items():
    print(f"{name:>10}: the node's links carry {ratio:.1f}x the bandwidth of its network link")

# %%
show_code("bcast/algorithms/hierarchical.py", "hierarchical");

# %%
show_patterns(runner, ["hierarchical", "binomial"], N_ENGINES, **TRACE);

# %% [markdown]
# ## 5 · Measure them all
# Every algorithm at a few sizes, with MPI's own `MPI_Bcast` (`mpi`) as the
# reference. Every measurement is validated: each rank checks it received the
# root's bytes.

# %%
rows = []
for algorithm in runner.algorithms:
    options = {k: v for k, v in {"chunk_bytes": 1 << 14, "ranks_per_node": 2}.items()
               if k in runner.algorithms[algorithm]}
    rows += [runner.measure(algorithm, nbytes, 0, options) for nbytes in SIZES]
Table(rows, ["algorithm", "nbytes", "avg_us", "min_us", "max_us", "busbw_GBps", "valid"])

# %%
as_image(sweep_figure(rows))

# %%
assert len(rows) == len(runner.algorithms) * len(SIZES)
assert all(row["valid"] for row in rows), [r["algorithm"] for r in rows if not r["valid"]]

# %% [markdown]
# Time per broadcast (y, microseconds, log scale) against message size (x,
# bytes, log scale), one line per algorithm, `MPI_Bcast` dashed. Look for
# where the lines cross: at small sizes the algorithms with the fewest messages
# lead, at large ones those that spread the bytes should.
#
# On one machine every "link" is shared memory and the ranks share the
# machine's cores, so the pipelined algorithms can show their advantage only
# at large sizes and only where every rank has a core of its own (notebook
# 00 says why); the patterns above show *why* they would on a real network.
# Notebook 02
# lets you sweep sizes and options on an emulated cluster.

# %%
engines.stop()

# %% [markdown]
# ## Questions
# 1. In the k-nomial pattern, how many rounds does `p = 4` take with radix 4,
#    and with radix 2 (binomial)? When do more children per round pay off?
# 2. The chain sends `p + k - 2` chunk messages one after another on its
#    critical path. For `p = 4` and a 1 MiB message in 16 KiB chunks, how many
#    is that, and how does it compare with binomial's `log2 p` whole messages?
# 3. Scatter + allgather moves `2(p-1)/p · n` bytes per rank (just under
#    `2n`) whatever `p` is. From how many ranks on does that beat a tree that
#    moves `n` per level?
# 4. The hierarchical pattern crosses between (emulated) nodes once per node.
#    On the KESCH profile (16 GPUs per node), how much faster does the model
#    say hierarchical (binomial across nodes, binomial inside) broadcasts
#    64 MiB to 64 GPUs than a flat binomial tree whose every hop crosses the
#    network? Which of the measured curves would change most if the two
#    levels' links differed as the profiles' ratios above?

# %% [markdown]
# ## Answers
# Try the questions first. `lesson.check(n, value)` says whether your number
# is right, close or wrong, and why; the cell below tries a first guess for
# question 2 (binomial's count: is the chain's the same?). `lesson.answers()`
# shows every answer, collapsed (a teacher can hide them with
# `GPULAB_HIDE_ANSWERS=1`: then a check says only right, close or wrong and
# too high or too low).

# %%
from gpulab.lessons import Lesson

lesson = Lesson("01")
lesson.check(2, 2)  # a guess: binomial's log2(4) whole messages

# %%
lesson.answers()
