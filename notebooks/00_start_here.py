# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 · Start here: MPI engines behind the notebook
#
# **gpulab** teaches how deep-learning training moves data between GPUs by
# *measuring* it. Data-parallel training starts by **broadcasting** the model's
# parameters from one GPU to all others, and keeps moving large buffers every
# step. How fast that goes depends on the *algorithm* the communication library
# picks: a tree, a pipelined chain, a scatter followed by an allgather...
# Awan et al. ("MPI or NCCL?", 2018) showed that a well-tuned pipelined chain
# inside MPI can match or beat NCCL for large messages.
#
# This notebook drives real MPI processes:
#
# * `start_engines(n)` starts **n MPI ranks** (ipyparallel *engines*) with
#   `mpiexec`, here on your machine; on a cluster, the same call submits a Slurm
#   job (`launcher="slurm"`, or `GPULAB_LAUNCHER=slurm` in the environment, as a
#   cluster's JupyterHub sets it: see docs/cluster.md). Engine *i* is MPI rank *i*.
# * A cell that starts with `%%px` runs **on every engine at once**, like the
#   body of an `mpiexec -n 4 python ...` program. Other cells run here, in the
#   notebook.
# * Measurements go through `engines.run(...)` (or the widgets built on it),
#   which never hangs: a dead engine or a deadlocked collective comes back as an
#   error naming the engine and the line it is stuck at. A `%%px` cell stuck
#   longer than `cell_timeout` seconds ends the engines with the same report.
#
# Notebooks: **00** (this one) · **01** the algorithms, their code and their
# communication patterns · **02** the broadcast explorer.

# %% tags=["parameters"]
N_ENGINES = 4        # MPI ranks; 4 fit a 2-core laptop (they take turns on the cores)
NBYTES = 1 << 20     # message size for the first measurement: 1 MiB
ITERS = 20           # timed iterations per measurement (OSU uses 100-1000)

# %% [markdown]
# ## Start the engines
# This takes about 5 s. Each engine learns its node-local rank and, if the
# machine has GPUs, picks its own before anything initialises CUDA.

# %%
from gpulab.cluster import start_engines

engines = start_engines(N_ENGINES)
engines

# %%
from gpulab.cluster.bcast_runner import EngineRunner
from gpulab.widgets import Table

Table(engines.placement, ["rank", "host", "pid", "local_rank", "local_size", "gpu"])

# %% [markdown]
# ## Code on every rank: `%%px`
# Every engine runs the cell below. `rank` and `comm` now exist in each
# engine's namespace, not in the notebook's.

# %%
# %%px
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
print(f"I am rank {rank} of {comm.Get_size()}")

# %% [markdown]
# ## A first broadcast, by hand
# Rank 0 fills a buffer; `bcast` copies it to every rank with the binomial
# tree (each round doubles the number of ranks that have the data). Every rank
# then checks what it received.

# %%
engines.view.push({"NBYTES": NBYTES});  # send a notebook variable to every engine

# %%
# %%px
import numpy as np

from gpulab.bcast import bcast

buf = np.arange(NBYTES, dtype=np.uint8) if rank == 0 else np.zeros(NBYTES, dtype=np.uint8)
bcast(buf, root=0, comm=comm, algorithm="binomial")
received_ok = bool((buf == np.arange(NBYTES, dtype=np.uint8)).all())

# %%
received = engines.view["received_ok"]  # pull the variable back from every engine
print("every rank received the root's bytes:", received)
assert received == [True] * N_ENGINES

# %% [markdown]
# ## A first measurement
# `EngineRunner` measures the way OSU's `osu_bcast` does: warm-up iterations,
# timed iterations with a barrier between them, the average over ranks, and a
# check that every rank got the right data. Three algorithms at 1 MiB, and
# MPI's own `MPI_Bcast` for reference.

# %%
runner = EngineRunner(engines, iters=ITERS, warmup=3)
rows = [runner.measure(algorithm, NBYTES) for algorithm in ("binomial", "chain", "scatter_allgather_ring", "mpi")]
Table(rows, ["algorithm", "nbytes", "p", "avg_us", "min_us", "max_us", "busbw_GBps", "valid"])

# %%
assert all(row["valid"] for row in rows), "some rank did not receive the root's data"
assert all(row["avg_us"] > 0 for row in rows)

# %% [markdown]
# On a laptop the "network" is shared memory and the ranks share a few cores,
# so absolute numbers are small and noisy; the *shape* of the curves is what
# notebooks 01 and 02 look at. When you are done, stop the engines (closing
# or restarting the kernel stops them too):

# %%
engines.stop()

# %% [markdown]
# ## Questions
# 1. The first broadcast above was written by hand with `Send`/`Recv` from the
#    root to every rank. How many messages does the root send for `p` ranks,
#    and how long does the last rank wait if each message costs `a + n·b`?
# 2. In the measurement, which of the three algorithms was fastest at 1 MiB?
#    Run the cell again: does the order stay the same? What does that tell you
#    about measuring on a shared laptop?
# 3. `avg_us`, `min_us` and `max_us` are per-rank means, then averaged, minimised
#    and maximised over ranks. Why can the root finish much earlier than the
#    last receiver?
# 4. `busbw_GBps` is bytes over time. Compare it with your machine's memory
#    bandwidth: how far from it is a broadcast between processes on one node?

