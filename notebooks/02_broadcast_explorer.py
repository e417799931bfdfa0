# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
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
# `docs/cluster.md`), else on the machine itself; the banner says which. Its
# controls change the link rate at once and the placement (block: ranks 0, 1
# on node 1; round-robin: rank i on node i mod NODES) by restarting the engines.
# Each point is the median of `ROUNDS` interleaved rounds, with a band from the
# fastest to the slowest: a bump inside the band is noise, not an effect.
# Terms are defined in the [glossary](../docs/glossary.md).

# %% tags=["parameters"]
N_ENGINES = 4
SIZES = (1 << 10, 1 << 20)          # first run: 1 KiB .. 1 MiB, every power of two
ALGORITHMS = ("binomial", "chain")  # first run: the two the questions below compare
CHUNK = 1 << 16                     # chain / binary tree chunk size
ITERS = 10                          # timed iterations per point (OSU: 100-1000; more = smoother, slower)
ROUNDS = 3                          # rounds per point: the curve is their median, the band their spread
NODES = 2                           # emulated nodes (None: the single machine)
LINK = "1gbit"                      # each node's link: 100mbit, 200mbit, 1gbit, 10gbit, unlimited
PLACEMENT = "block"                 # or "round-robin"

# %%
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

# %%
chain_wins_from = crossover(first, "chain", "binomial")
if chain_wins_from:
    print(f"on {N_ENGINES} ranks the chain beats binomial from {size_label(chain_wins_from)}B up")
else:
    print(f"on {N_ENGINES} ranks the chain did not stay ahead of binomial in this run")

# %% [markdown]
# ## The pattern view
# Choose an algorithm and a process count, press **Draw**. Ranks on the y
# axis, logical steps on the x axis, one arrow per message: look for how many
# steps the last rank waits and which ranks send in the same step.

# %%
patterns = PatternView(runner, algorithm="chain")
patterns.draw()
patterns

# %%
assert patterns.events, "the traced broadcast sent no messages"

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
# 5. Run **hierarchical** with ranks/node = 2. On one machine every link is
#    equally fast: what would have to differ for it to win?
# 6. Where is `MPI_Bcast` (dashed) relative to the best of the others? On 4
#    ranks on **one node** MPICH runs a binomial tree at every size; once the
#    ranks span nodes, MPICH 5's ch4 rules (its `generic.json`, see notebook
#    01 §1) run a node-aware broadcast for p < 8 instead: leaders across
#    nodes, then inside each node. Does the dashed curve follow binomial's or
#    hierarchical's, with block and with round-robin placement? Where it
#    follows neither, what else differs (C against Python, MPICH's own
#    message protocol)?
#
# On a single machine the ranks share its cores and memory is the network, so
# the curves are noisy and the gaps small; on GPUs across InfiniBand they are
# not.
# On the emulated cluster the links between nodes are slow again: lower the
# **link** to 100mbit and watch which curves move, then try **round-robin**
# placement (restart the engines) with binomial and hierarchical.
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
# is right, close or wrong, and why; the cell below checks question 2 with
# the model's ratio for `N_ENGINES` ranks. `lesson.answers(context)` shows
# every answer, collapsed (a teacher can hide them with `GPULAB_HIDE_ANSWERS=1`).

# %%
import math

from gpulab.lessons import Lesson

lesson = Lesson("02")
context = {"p": N_ENGINES}
lesson.check(2, math.log2(N_ENGINES), context)  # binomial's log2(p) whole messages against the chain's about one

# %%
lesson.answers(context)

# %%
cluster.engines.stop()  # the engines of the last restart, and their emulated cluster
