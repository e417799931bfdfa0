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
# # 02 · The broadcast explorer
#
# Pick a range of message sizes, one or more algorithms and their options, and
# press **Run**: every point is measured live on the engines (validated, OSU
# style) and plotted as time and bus bandwidth against size, with MPI's own
# `MPI_Bcast` alongside. Runs accumulate, so you can change one option (the
# chunk size, say) and compare the curves; **Clear** starts over.
#
# The second widget draws the communication pattern of one algorithm on up to
# `N_ENGINES` ranks: who sends to whom in which step.
#
# The engines run on an **emulated cluster** where this machine can make one
# (`NODES` network namespaces joined by rate-limited links, see
# `docs/cluster.md`), else on the machine itself; the banner says which (and
# why not: making one needs root or user namespaces; without them every
# "link" is shared memory and the curves below show the cores, not a network). Its
# controls change the link rate at once and the placement by restarting the
# engines (nodes count from 1, as the banner shows them; block: consecutive
# ranks fill a node, so with 2 ranks per node ranks 0, 1 are on node 1;
# round-robin: rank i on node (i mod NODES) + 1).
# Each point is the median of `ROUNDS` interleaved rounds, with a band: the
# median's interval (notebook 00), which with 3 rounds is the fastest to the
# slowest and covers the median only 75% of the time; 6 rounds, the fewest
# that reach 95%, give 97%. A
# bump inside the band is noise, not an effect.
# Terms are defined in the [glossary](../docs/glossary.md).

# %% tags=["parameters"]
N_ENGINES = 4
SIZES = (1 << 14, 1 << 21)          # first run: 16 KiB .. 2 MiB, every power of two
ALGORITHMS = ("binomial", "chain")  # first run: the two the questions below compare
CHUNK = 1 << 16                     # chain / binary tree chunk size
ITERS = 10                          # timed iterations per point (OSU: 100-1000; more = smoother, slower)
ROUNDS = 3                          # rounds per point: the curve is their median, the band their spread
NODES = 4                           # emulated nodes (None: the single machine); 4 x 1: every message crosses a link
LINK = "100mbit"                    # each node's link: 100mbit, 200mbit, 1gbit, 10gbit, unlimited
PLACEMENT = "block"                 # or "round-robin"
DENSE_SIZES = (1 << 16, 1 << 20)    # the second run: 2 ranks per node, round-robin, hierarchical against flat
SCOREBOARD_LIVE = ("a", "b")        # the scoreboard's rows of this notebook, measured live (() : recorded only)
# %%
from IPython.display import display

from gpulab.cluster.bcast_runner import EngineRunner
from gpulab.widgets import BcastExplorer, PatternView, crossover, notebook_engines, size_label

engines, cluster = notebook_engines(N_ENGINES, nodes=NODES, link=LINK, placement=PLACEMENT)
runner = EngineRunner(engines, iters=ITERS, warmup=2, time_budget=0.2)
cluster.follow(runner)
cluster

# %% [markdown]
# ## The explorer
# The cell after it presses Run once from code, so the plot is filled when the
# notebook runs top to bottom; then it is yours to play with.
#
# The plot: message size on x (bytes, log scale); on y the time per broadcast
# (microseconds, log scale) in one panel and the bus bandwidth (GB/s) in the
# other; `MPI_Bcast` dashed. Look for where two lines cross (the crossover),
# and whether a gap is wider than the bands around the lines.

# %%
explorer = BcastExplorer(runner, sizes=SIZES, algorithms=ALGORITHMS, rounds=ROUNDS)
explorer.chunk.value = CHUNK
explorer

# %%
first = explorer.run()
assert first and all(row["valid"] for row in first), "every rank must receive the root's data"
assert {row["algorithm"] for row in first} == set(ALGORITHMS) | {"mpi"}

# %% [markdown]
# ## Where does the chain overtake binomial?
# From the rows of the first run: the smallest size from which the chain is
# faster at every larger size measured.
#
# **Why these defaults.** 4 nodes x 1 rank: every message crosses a link, so
# binomial's root sends the whole message twice (`log2 4` levels) while the
# chain streams `CHUNK`-sized chunks (64 KiB) through the ranks. (On 2 nodes x 2 with block
# placement binomial crosses the slow link only once, as the chain does, so
# the chain has little to win and pays its extra latencies.) 100 Mbit/s keeps
# the link the bottleneck: the ranks busy-poll, and where they outnumber the
# cores (`host.describe()` says whether yours do) a rank that forwards a
# chunk also waits for a core, which at faster links can take as long as the
# link itself.
#
# **What to expect.** The kit's record of this set-up is at 1 Gbit/s
# (`docs/results/emulated_crossover.json`: 4 nodes x 1, MPICH 5.0.2, 4 ranks
# on a 2-core machine, the chain with 256 KiB chunks): binomial ahead at 64
# and 256 KiB, the chain ahead from 1 MiB, 1.6x faster at 1 MiB and 2.2x at
# 4 MiB. Set `CHUNK = 1 << 18` to compare like with like: smaller chunks
# mean more of them, and the crossover can move (question 1). At 100 Mbit/s
# every byte costs ten times more, so expect the crossover no later. The
# explorer plots `avg_us`, the mean over ranks, and a ratio of means can
# exceed the bound you find in question 2: the whole broadcast takes as long
# as its slowest rank (`max_us`, notebook 03 §2), and by that the record's
# chain is 1.5x faster at 4 MiB. **On a real cluster** (InfiniBand: a
# few microseconds of latency, 10-25 GB/s) the link is 800-2000x faster:
# where the crossover sits follows the ratio of latency to per-byte time
# (question 1; notebook 03's model predicts it for a cluster's profile), how
# much the chain can gain at large sizes is question 2's, and GPU ranks do
# not share cores, so the core caveat goes.

# %%
chain_wins_from = crossover(first, "chain", "binomial")
if chain_wins_from:
    print(f"on {N_ENGINES} ranks the chain beats binomial from {size_label(chain_wins_from)}B up")
else:
    print(f"on {N_ENGINES} ranks the chain did not stay ahead of binomial in this run")

# %% [markdown]
# ## Dense nodes: hierarchical against flat
# Now 2 ranks per node on the same `NODES` nodes, placed **round-robin**
# (rank i on node (i mod NODES) + 1), the placement that hurts a flat tree
# most: binomial's first step (rank 0 to rank 4) stays on the root's node,
# but every later step crosses a link, and the root's node sends two copies
# over its link at each; **hierarchical** crosses the links
# once per node (leaders first, then inside each node; set its option
# `ranks/node` to 0 to let `MPI_Comm_split_type` find the nodes, emulated or
# real). The cell starts 8 more engines
# on a second emulated cluster (a few seconds) and runs a second explorer;
# the first one stays usable.
#
# **What to expect.** The kit's record of this set-up is at 1 Gbit/s
# (`docs/results/emulated_placement.json`: 4 nodes x 2, 8 ranks on a 2-core
# machine): with round-robin placement hierarchical was 1.7x faster than
# binomial at 1 MiB (14 ms against 24 ms) and 1.6x at 8 MiB (143 ms against
# 228 ms), `MPI_Bcast` in between (22 and 193 ms); with block placement
# binomial and hierarchical were level (138 and 141 ms at 8 MiB), since then
# binomial already crosses each link about once. At 100 Mbit/s expect the
# same in kind, every time about ten times longer. **On
# a real cluster** with 4-8 GPUs per node the intra-node links (NVLink, or
# Infinity Fabric on Frontier) are
# 3-7x faster per GPU than the network in the kit's profiles (notebook 01
# §4: 3.2x on Perlmutter, 7.4x on a DGX H100); NCCL and MPI libraries run
# two-level broadcasts for you when they know the topology.

# %%
dense_engines, dense_cluster = notebook_engines(2 * N_ENGINES, nodes=NODES, link=LINK, placement="round-robin")
dense_runner = EngineRunner(dense_engines, iters=ITERS, warmup=2, time_budget=0.2)
dense_cluster.follow(dense_runner)
dense = BcastExplorer(dense_runner, sizes=DENSE_SIZES, algorithms=("binomial", "hierarchical"), rounds=ROUNDS)
display(dense_cluster, dense)
dense_rows = dense.run()
assert dense_rows and all(row["valid"] for row in dense_rows), "every rank must receive the root's data"
ratio = {r["nbytes"]: r["avg_us"] for r in dense_rows if r["algorithm"] == "binomial"}
for r in dense_rows:
    if r["algorithm"] == "hierarchical":
        print(f"{size_label(r['nbytes'])}B: hierarchical {ratio[r['nbytes']] / r['avg_us']:.2f}x faster than binomial")

# %% [markdown]
# ## The pattern view
# Choose an algorithm and a process count, press **Draw**. Ranks on the y
# axis, logical steps on the x axis, one arrow per message: look for how many
# steps the last rank waits and which ranks send in the same step.

# %%
patterns = PatternView(dense_runner, algorithm="chain")
patterns.draw()
patterns

# %%
assert patterns.events, "the traced broadcast sent no messages"

# %% [markdown]
# ## This notebook's rows of the scoreboard
# The kit's [scoreboard](../docs/scoreboard.md) checks the papers' claims by
# running the kit. This notebook's experiments are its rows (a), the chain
# overtakes binomial above a size the model predicts, and (b), the model's
# best chunk matches the measured one: first as recorded
# (`docs/results/scoreboard_quick.json`), then measured live now for the ids
# in `SCOREBOARD_LIVE` (each on an emulated cluster of its own, 4 nodes x 1,
# 100 Mbit/s; about 40 s for both). Row (c), hierarchical against a flat
# tree on dense nodes, is the dense explorer's experiment; notebook 00 shows
# it.

# %%
from gpulab.records import stamp
from gpulab.scoreboard import load, show, table
from gpulab.scoreboard.recorded import results_dir  # docs/results, or an installed gpulab's copy of it

print(f"recorded (docs/results/scoreboard_quick.json, {stamp(results_dir() / 'scoreboard_quick.json')}):")
display(table([row for row in load(results_dir() / "scoreboard_quick.json") if row["id"] in ("a", "b")]))
if SCOREBOARD_LIVE:
    print("live, this run:")
    display(show(SCOREBOARD_LIVE))

# %% [markdown]
# ## Questions to answer from the plots
# 1. **Where does the chain overtake binomial, and why?** Binomial costs
#    `log2(p)·(a + n·b)`: every level waits for the whole message. The chain
#    costs `(p + k - 2)·(a + (n/k)·b)`: it pays `p + k - 2` latencies but moves
#    only `n/k` bytes per step. Compare the two formulas for small and large `n`.
#    Does the crossover you measured move when you change the chunk size?
# 2. With `p = 4`, `log2 p = 2`: how much can pipelining win at most? What
#    changes with 16 ranks per node, as on the paper's KESCH nodes?
# 3. Sweep the **chunk size** for the chain at 1 MiB (three runs, three chunk
#    sizes). Is there an optimum? The model says `k ≈ sqrt((p-2)·n·b/a)` chunks.
# 4. Run **scatter_allgather_ring** and **scatter_allgather_rd**: from what size
#    do they beat binomial? MPICH's generic rule switches to them from 12 KiB
#    (recursive doubling below 512 KiB on a power of two, the ring above),
#    but only on 8 processes or more.
# 5. Run **hierarchical** in the dense explorer with ranks/node = 0 (the
#    nodes the ranks really sit on), then with `NODES = None` (one machine)
#    and ranks/node = 2. On one machine every link is equally fast: what
#    would have to differ for it to win?
# 6. Where is `MPI_Bcast` (dashed) relative to the best of the others? On 4
#    ranks MPICH runs a binomial tree at every size when no node holds more
#    than one of them (the first explorer's 4 nodes x 1), and on one machine
#    too, where its node-aware path has only the step inside the node; once
#    the ranks span several nodes that each hold several of them and p < 8,
#    MPICH 5's ch4 rules (its `generic.json`, see notebook 01 §1) run a
#    node-aware broadcast: leaders across nodes, then inside each node. Set
#    `NODES = 2` (2 nodes x 2 ranks), add **hierarchical** to the algorithms
#    and run the first explorer with block and then with round-robin
#    placement: does the dashed curve follow binomial's or hierarchical's?
#    Where it follows neither, what else differs (C against Python, MPICH's
#    own message protocol)?
#
# On a single machine the ranks share its cores and memory is the network, so
# the curves are noisy and the gaps small; on GPUs across InfiniBand they are
# not. On the emulated cluster the links between nodes are slow again: raise
# the **link** to 1gbit and watch which curves move (and whether the chain
# still wins), then compare **block** and **round-robin** placement with
# binomial and hierarchical.
#
# **On a GPU cluster** the *buffers* menu offers GPU (CuPy) buffers when every
# engine has a GPU (one per engine, by node-local rank). Then:
#
# 7. Broadcast GPU buffers with *GPU path* = **staged** and then
#    **cuda-aware** (if your MPI is; the legend shows the path taken). Staging
#    adds two PCIe copies per rank: at what size does it stop mattering, and
#    does the pipelined chain hide them (its copies of chunk *i+1* overlap the
#    network transfer of chunk *i*)?
# 8. Tick **NCCL alongside**: how far are the MPI-side algorithms from NCCL at
#    1 MiB and at 64 MiB, and why? (Inside a node NCCL's GPU kernels copy over
#    NVLink/PCIe themselves; across nodes a proxy thread on the host drives
#    the network for them, `src/proxy.cc` in NVIDIA/nccl.)
#
# Without a GPU, *fake GPU* runs the same staging code on a CPU stand-in:
# the curves then show only the extra host copies.

# %% [markdown]
# ## Answers
# Try the questions first. `lesson.check(n, value)` says whether your number
# is right, close or wrong, and why; the cell below tries a first guess for
# question 2. `lesson.answers(context)` shows every answer, collapsed (a
# teacher can hide them with `GPULAB_HIDE_ANSWERS=1`: then a check says only
# right, close or wrong and too high or too low).

# %%
from gpulab.lessons import Lesson

lesson = Lesson("02")
context = {"p": N_ENGINES}
lesson.check(2, N_ENGINES, context)  # a guess: p times faster

# %%
lesson.answers(context)

# %%
# the engines of the last restart of each cluster panel, and their emulated clusters
cluster.engines.stop()
dense_cluster.engines.stop()
