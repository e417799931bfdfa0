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
# # 08 · The calculator: memory, traffic and time at scale, without a cluster
#
# Will a GPT of 80 billion parameters fit on 1024 GPUs cut into this grid?
# What does each GPU send, and how long does one iteration take? This
# notebook answers with arithmetic only (`gpulab.engine.perf`): no MPI, no
# engines, so it runs on Binder or a laptop.
#
# The numbers are not guesses the engine never checked. The memory model
# counts, byte for byte, what the engine of notebooks 04-05 holds on every
# rank (weights, gradients, AdamW's state, the gathered-weight cache,
# backward's working set), and its activations within 0.1% without
# recomputation and within 1.2% with it (`docs/results/memory_check.json`;
# `tests/engine/test_memory_engine.py` runs it on 4 and 8 ranks, with
# pipeline stages, recomputation and sequence parallelism); the bytes each
# GPU puts on the wire are
# those a live run's collectives record. `docs/memory.md` has the formulas,
# their sources, and the one place where the engine holds more than the model
# says (read it after the questions: it works question 2 out).
#
# The numbers of the 4-stage setting below, from the shell:
# `gpulab model memory --model gpt-80b --mesh 8,1,4,8 --pipe 4 --micro-batches 16 --recompute full --machine perlmutter`

# %% tags=["parameters"]
MODEL, WORLD, SHAPE = "gpt-80b", 1024, (8, 1, 4)   # row, col, depth; data is what is left
PIPE, MICRO_BATCHES, GLOBAL_BATCH = 1, 8, 1024
MACHINE = "perlmutter"
VOLUME_GPUS = [4, 8, 16, 32, 64, 128, 256, 512]    # the 1D vs 3D traffic plot

# %%
import sys

from gpulab.lessons import answers_hidden
from gpulab.widgets.calculator import Calculator

calc = Calculator(model=MODEL, world=WORLD, shape=SHAPE, pipe=PIPE, micro_batches=MICRO_BATCHES,
                  global_batch=GLOBAL_BATCH, machine_name=MACHINE)
calc

# %% [markdown]
# ## What the bars say
# One bar per pipeline stage, stacked by kind, against the usable share of
# the GPU's memory (dashed) and all of it (dotted). With mixed precision a
# parameter costs 16 bytes on the GPU that holds it: 2 for the bf16 weight,
# 2 for its gradient, 12 for AdamW's fp32 master copy, momentum and variance
# (the ZeRO paper's count). `depth` shards all three; ZeRO shards them over
# `data` too (1: the optimizer state, 2: and gradients, 3: and weights).
# Activations are Korthikanti et al.'s count per layer, times the layers of
# the stage, times the micro-batches the schedule keeps in flight (1F1B:
# `pipe - stage`, GPipe: all of them); recomputation keeps only each layer's
# input. "cache gathered weights" keeps every weight block that depth
# gathers in forward until backward (no second all-gather; the "gathered
# weights" bar grows to about the stage's whole weights over row x col).
#
# Move the sliders, or set them from code, as below.

# %%
before = calc.result["busiest"]["total"]
calc.pipe.value = 4                 # four stages: the grid keeps row x col x depth, data shrinks
calc.micro_batches.value = 16
after = calc.result["busiest"]["total"]
print(f"busiest stage: {before / 1e9:.1f} GB with 1 stage, {after / 1e9:.1f} GB with 4 stages "
      f"(data {calc.result['shape'][3]}); bubble {calc.result['time']['bubble']:.2f} s of "
      f"{calc.result['iter_s']:.2f} s")
for stage in calc.result["stages"]:
    print(f"  stage {stage['stage']}: {stage['layers']} layers, {stage['in_flight']} micro-batches in flight, "
          f"{stage['total'] / 1e9:.1f} GB")

# %% [markdown]
# ## Traffic is bytes on the wire
# The table under the bars lists what one GPU **sends** per iteration, by
# group. A collective's buffer is not what travels: a ring all-reduce sends
# 2(p-1)/p of the buffer from every rank, an all-gather or reduce-scatter
# (p-1)/p. So ZeRO-3 over the data replicas (gather the weights for forward,
# again for backward, reduce-scatter the gradients) runs three collectives
# where DDP runs one all-reduce; what that makes on the wire is question 2.

# %%
calc.pipe.value, calc.micro_batches.value = 1, 8
ddp = calc.result["wire"]["data"]
calc.zero.value = 3
zero3 = calc.result["wire"]["data"]
calc.zero.value = 0
if answers_hidden():  # the ratio is question 2's answer: the learner reads the calculator's wire table
    print("set ZeRO to 3 in the calculator and compare the data group's row of the wire table with ZeRO 0")
else:
    print(f"data group, per GPU per iteration: {ddp / 1e9:.2f} GB without ZeRO, {zero3 / 1e9:.2f} GB with "
          f"ZeRO-3: {zero3 / ddp:.2f}x")

# %% [markdown]
# ## One dimension of tensor parallelism, or three
# AxoNN's core argument. Split one model replica over more and more GPUs
# (no data parallelism), at the global batch above. Megatron-style 1D tensor
# parallelism all-reduces every layer's whole activations (tokens x width)
# on every GPU: `2(g-1)/g` of them per all-reduce, which *grows* towards a
# constant as the GPUs `g` are added (and it stops where the heads no longer
# split over `g`). AxoNN's 3D grid can put GPUs on row and col (activations,
# split) or on depth (weights, gathered). The 3D points use the shape the
# performance model predicts **fastest**, not the one that sends least, at a
# batch of two million tokens (1024 sequences of 2048); the cell prints each
# GPU count's pick. Look for whether either curve falls as GPUs are added,
# for the gap between them, and for which group the 3D pick puts its GPUs
# in: question 3 asks what that costs and why. The plot counts traffic only:
# it checks no memory (without recomputation none of these replicas fits in
# 40 GB) and assumes no recomputation, whatever the box above says;
# recomputing the forward pass adds a third gather of the weights.

# %%
rows = calc.draw_volume(VOLUME_GPUS)
for r in rows:
    one_d = f"{r['1d'] / 1e9:9.1f}" if r["1d"] is not None else "      n/a"
    print(f"{r['gpus']:>5} GPUs: 1D {one_d} GB, 3D {r['3d'] / 1e9:7.1f} GB at row x col x depth "
          f"{'x'.join(map(str, r['3d_shape'][:3]))}")

# %%
print("mpi4py loaded:", any(name.split(".")[0] == "mpi4py" for name in sys.modules))

# %% [markdown]
# ## Questions
# 1. How many GB do the weights, gradients and AdamW state of gpt-80b take on
#    one GPU, with 16 bytes per parameter? How many GPUs of 40 GB would it take
#    just to hold them, sharded evenly?
# 2. With ZeRO-3 over `p` data replicas, what factor of DDP's traffic does each
#    GPU send in the data group? Why not 3x, when ZeRO-3 runs three
#    collectives where DDP runs one?
# 3. In the 1D vs 3D plot, neither curve falls as GPUs are added. What shape
#    does the model pick for 3D, and how many times the model's bf16 weights
#    (2 bytes a parameter) does each GPU send at the largest GPU count? Why is
#    1D's traffic so much larger?

# %% [markdown]
# ## Answers
# Try the questions first. `lesson.check(n, value)` says whether your number
# is right, close or wrong, and why; the cell below checks that the plot's
# last 3D point agrees with the kit's answer to question 3 (it shows the
# verdict only while the answers are open). `lesson.answers(context)` shows every answer,
# collapsed (a teacher can hide them with `GPULAB_HIDE_ANSWERS=1`).

# %%
from gpulab.engine.perf.flops import params_count
from gpulab.lessons import Lesson

lesson = Lesson("08")
context = {"gpt_model": MODEL, "gpus": VOLUME_GPUS[-1], "global_batch": GLOBAL_BATCH, "machine": MACHINE}
weights_bytes = params_count(calc.config()) * calc.result["machine"].value_bytes
lesson.self_check(3, rows[-1]["3d"] / weights_bytes, context)

# %%
lesson.answers(context)
