"""The same GPT on a 4D grid of MPI ranks: AxoNN's 3D tensor parallelism times data parallelism.

mesh (the rank grid and its communicators), collectives (every MPI call of
the engine; non-blocking handles, progress), exchange (device buffers to
MPI), shards (which rank holds which piece), tp3d (AxoNN's 3D Linear),
tp_layers (sharded LayerNorm, embedding, cross-entropy), overlap (the
switches OAR, ORS, OAG, cache, buckets), overlap_weights (OAG's prefetch, cache), overlap_grads (bucketed gradient
sync), memory (bytes per rank), gpt (``ParallelGPT``), timeline and
timeline_plot (per-rank events; Gantt charts), check3d (one 3D layer checked
against numpy, for notebook 04), pipeline (stages of blocks, micro-batch
schedules: 1F1B, GPipe), pipeline_step (a step's micro-batches run through a
stage's schedule, gradients accumulated) and p2p (activations sent between stages).
"""
