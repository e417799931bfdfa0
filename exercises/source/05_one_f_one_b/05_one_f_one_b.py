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

# %% [markdown] nbgrader={"grade": false, "grade_id": "statement", "locked": true, "schema_version": 3, "solution": false}
# # Exercise 5 · The 1F1B schedule of one pipeline stage
#
# With pipeline parallelism each stage owns a slice of the layers and the
# batch is cut into `micro` micro-batches. GPipe runs every forward, then
# every backward, and holds all `micro` micro-batches' activations. 1F1B
# (PipeDream-Flush, Megatron-LM's default) holds at most `pipe - stage`:
#
# 1. warm-up: `min(pipe - stage - 1, micro)` forwards;
# 2. steady state: one forward, then one backward (of the oldest micro-batch
#    still waiting), while forwards remain;
# 3. cool-down: the remaining backwards, oldest first.
#
# Write `one_f_one_b(pipe, stage, micro)`, returning the stage's order as a list
# of `("F", i)` and `("B", i)`. The check compares it with the engine's order
# (`gpulab.engine.parallel.pipeline.schedule`) for every pipe up to 6, and runs
# it on the engines, one rank per stage, the way the engine does (an activation
# sent forward after each F, its gradient back after each B): an order that
# deadlocks is reported stage by stage. Background: `docs/engine_pipeline.md`.

# %% tags=["parameters"] nbgrader={"grade": false, "grade_id": "parameters", "locked": true, "schema_version": 3, "solution": false}
N_ENGINES = 4

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
from gpulab.cluster import start_engines
from gpulab.exercises import check_1f1b, on_engines

engines = start_engines(N_ENGINES)

# %% nbgrader={"grade": false, "grade_id": "one_f_one_b", "locked": false, "schema_version": 3, "solution": true}
def one_f_one_b(pipe, stage, micro):
    """The order of forwards ("F", i) and backwards ("B", i) on this stage."""
    ### BEGIN SOLUTION
    warmup = min(pipe - stage - 1, micro)
    ops = [("F", i) for i in range(warmup)]
    for i in range(micro - warmup):
        ops += [("F", warmup + i), ("B", i)]
    return ops + [("B", i) for i in range(micro - warmup, micro)]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "check_1f1b", "locked": true, "points": 4, "schema_version": 3, "solution": false}
print(on_engines(engines, check_1f1b, one_f_one_b))

# %% [markdown] nbgrader={"grade": false, "grade_id": "bubble_statement", "locked": true, "schema_version": 3, "solution": false}
# ## The bubble
#
# Both schedules leave the same idle share at the start and end of a step,
# (p - 1)/(m + p - 1). What does 1F1B buy, then? Count the activations each
# stage holds at its peak under both.

# %% nbgrader={"grade": false, "grade_id": "stop", "locked": true, "schema_version": 3, "solution": false}
engines.stop()
