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
# # 04 · 3D tensor parallelism, one layer at a time
#
# A transformer is mostly `Linear` layers, `Y = X Wᵀ`. When the weight `W`
# (`n` output × `k` input features) is too big for one GPU, AxoNN (Singh et
# al., "A 4D hybrid algorithm to scale parallel training to thousands of
# GPUs") cuts it three ways on a grid of **row × col × depth** ranks:
#
# * **col** splits the *input* features `k`, **row** splits the *output*
#   features `n`: rank `(r, c)` owns the block `W[n/R slice r, k/C slice c]`;
# * **depth** cuts that block once more, as a flat 1-D shard, like FSDP/ZeRO-3:
#   each depth rank stores `1/D` of the block and they **all-gather** it just
#   before use;
# * depth ranks (and the data-parallel replicas around them) work on different
#   tokens.
#
# Per layer, every collective stays inside one small group:
#
# | step | computation | collective | group |
# |---|---|---|---|
# | forward | `W = all_gather(w)` | all-gather | depth |
# | | `Y = X Wᵀ` is a partial sum over the input features | **all-reduce Y** | col |
# | backward | `W = all_gather(w)` again (not kept since forward, unless cached) | all-gather | depth |
# | | `dX = dY W`, partial over the output features | **all-reduce dX** | row |
# | | `dW = dYᵀ X`, partial over the depth ranks' tokens | **reduce-scatter dW** | depth |
#
# A *transposed* layer swaps row and col, so a plain layer's output is exactly
# the next transposed layer's input: QKV (plain) → attention out (transposed)
# → FC1 (plain) → FC2 (transposed) needs no re-layout.
#
# Terms (all-gather, reduce-scatter, ring, shard, ...): the
# [glossary](../docs/glossary.md). Each numbered question at the end has its
# answer in `gpulab.lessons.nb04`, opened in the last cell.

# %% tags=["parameters"]
N_ENGINES = 4            # MPI ranks
SHAPE = (2, 1, 2, 1)     # (row, col, depth, data) for the live check; product = N_ENGINES
N_OUT, K_IN = 8, 12      # the live layer's weight [n_out, k_in]
TOKENS = 16              # tokens in the batch (split over depth x data)

# %% [markdown]
# ## Who holds what
# Eight ranks on a 2 × 2 × 2 grid, one 8 × 8 weight, drawn as the matrix W:
# the vertical axis is W's rows (**output** features `n`), the horizontal axis
# its columns (**input** features `k`), each cell one value coloured by the
# rank that stores it. Left: the four (row, col) blocks. Right: each block is
# flattened and cut into two depth shards, so rank `(r, c, d)` stores half of
# block `(r, c)`. What to look for: in the plain layer row splits the vertical
# axis and col the horizontal one; in the transposed layer (second figure) the
# two swap. No rank stores more than 1/8 of W.

# %%
from IPython.display import display

from gpulab.widgets import as_image
from gpulab.widgets.layout_view import owner_figure

display(as_image(owner_figure(8, 8, (2, 2, 2, 1))))
display(as_image(owner_figure(8, 8, (2, 2, 2, 1), transposed=True)))

# %% [markdown]
# ## What each collective moves
# `collective_calls` lists every collective one training step of a small GPT
# issues on one rank, with the bytes each rank puts on the wire (ring
# algorithms: `2(p-1)/p · n` for an all-reduce, `(p-1)/p · n` for all-gather
# and reduce-scatter). The sums by group show where the traffic goes: `nbytes`
# is the buffer a call works on (the summed array, the gathered block),
# `wire_bytes` what one rank sends for it.
#
# Besides row, col and depth, two groups can appear: **data**, the replicas of
# the whole grid (one here: `(2, 2, 2, 1)`), which sum the weight shards'
# gradients; and **batch**, the depth × data ranks that hold the same piece
# of a parameter but see different tokens, which sum the loss and the
# gradients of the parameters depth does not shard (biases, LayerNorm's gain
# and bias; `gpulab.engine.parallel.shards.grad_group`). A **tensor** group
# (row × col × depth, one model replica) sums the gradient norm when clipping
# is on; this step has none.

# %%
from gpulab.engine import GPTConfig, collective_calls, totals
from gpulab.widgets import Table

config = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_embd=32)
calls = collective_calls(config, (2, 2, 2, 1), batch_size=8)
Table([c for c in calls if c["layer"].startswith("h.0.")],
      ["layer", "phase", "op", "group", "group_size", "nbytes", "wire_bytes"])

# %%
by_group = totals(calls, by="group")
by_group_doubled = totals(collective_calls(config, (2, 2, 2, 1), batch_size=16), by="group")
Table([{"group": g, "wire KiB per step": round(b / 1024, 1), "at twice the batch": round(by_group_doubled[g] / 1024, 1)}
       for g, b in by_group.items()], ["group", "wire KiB per step", "at twice the batch"])

# %%
from gpulab.lessons import answers_hidden

growth = sum(by_group_doubled.values()) / sum(by_group.values())
if not answers_hidden():  # question 3's answer: with the answers hidden the learner sums the table
    print(f"twice the batch: {growth:.2f}x the wire bytes of one step")

# %%
assert set(by_group) <= {"row", "col", "depth", "data", "batch", "tensor"}
assert by_group["depth"] > 0 and by_group["row"] > 0 and by_group["col"] > 0

# %% [markdown]
# ## One layer on live ranks, checked against the serial layer
# Every engine builds the same full `X`, `W`, `dY` from one seed, runs the
# serial layer as the reference, then runs AxoNN's layer on **its own
# pieces only** and compares. Errors are float64 round-off (about 1e-15).
#
# What to expect: on a laptop the errors are about 1e-15 and the check takes a
# few seconds, most of it starting the engines (the ranks share this
# machine's cores, as the next cell says). On a real cluster the same
# collectives would cross NVLink or the network and the errors would be the
# same; in the float32 or bf16 of real training they grow to about 1e-6 or
# 1e-2, because each rank sums its partial products in a different order
# than the serial layer.

# %%
from gpulab import host

print(host.describe(ranks=N_ENGINES))

# %%
from gpulab.cluster import start_engines
from gpulab.engine.parallel.check3d import check_on_world

engines = start_engines(N_ENGINES)
reports = {}
for transposed in (False, True):
    reports[transposed] = engines.run(check_on_world, SHAPE, N_OUT, K_IN, TOKENS, transposed)
rows = [{"layer": "transposed" if t else "plain", **{k: r[k] for k in ("rank", "coords", "x_shape", "block",
        "w_shard_values", "y_error", "dx_error", "dw_error")}} for t, rs in reports.items() for r in rs]
Table(rows, ["layer", "rank", "coords", "x_shape", "block", "w_shard_values", "y_error", "dx_error", "dw_error"])

# %%
Table([{"rank": r["rank"], **c} for r in reports[False] for c in r["collectives"]], ["rank", "op", "group", "nbytes"])

# %%
for rs in reports.values():
    for r in rs:
        assert max(r["y_error"], r["dx_error"], r["dw_error"]) < 1e-12, r
print("every rank's Y, dX and dW shard match the serial layer to 1e-12")
engines.stop()

# %% [markdown]
# ## Questions
# 1. With `SHAPE = (1, 1, 4, 1)` the layer is pure depth (FSDP-like): which
#    collectives remain, and how many bytes does each rank store?
# 2. With `SHAPE = (4, 1, 1, 1)` every rank holds whole output features (all
#    `k` inputs of `n/4` outputs): why is there no forward all-reduce, but a
#    backward one?
# 3. In the table of bytes, which group carries the most traffic for this
#    model, and by what factor does one step's traffic grow when the batch
#    doubles? (Weights do not depend on the batch; activations do.)

# %% [markdown]
# ## Answers
# Try the questions first. `lesson.check(n, value)` checks a number of yours
# (right, close or wrong, and why); the cell below checks that the growth factor
# this notebook computed for question 3 agrees with the kit's (it shows the
# verdict only while the answers are open). `lesson.answers(context)` opens every
# answer, its reasoning and the kit's number for this notebook's sizes. A
# teacher can hide the answers for a course (`GPULAB_HIDE_ANSWERS=1`).

# %%
from gpulab.lessons import Lesson

lesson = Lesson("04")
context = {"n_out": N_OUT, "k_in": K_IN, "gpt_config": config, "grid": (2, 2, 2, 1), "batch_size": 8}
lesson.self_check(3, growth, context)

# %%
lesson.answers(context)
