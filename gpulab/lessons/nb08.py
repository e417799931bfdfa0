"""Answers to notebook 08's questions (the calculator)."""

from gpulab.lessons.answers import Answer


def _state_gb(ctx) -> float:
    from gpulab.engine.perf.machines import machine
    from gpulab.engine.perf.memory_model import machine_precision, memory_breakdown
    from gpulab.engine.perf.predict import gpt_config

    b = memory_breakdown(gpt_config("gpt-80b"), (1, 1, 1, 1), global_batch=1,
                         precision=machine_precision(machine("perlmutter")))
    return (b["weights"] + b["gradients"] + b["optimizer"]) / 1e9


def _zero3_factor(ctx) -> float:
    from gpulab.engine.perf.predict import gpt_config
    from gpulab.engine.perf.wire import wire_by_group

    cfg = gpt_config("gpt-5b")
    data = [wire_by_group(cfg, (1, 1, 1, 8), global_batch=8, value_bytes=2, zero=z)["data"] for z in (0, 3)]
    return data[1] / data[0]


def _traffic_over_weights(ctx) -> float:
    """3D's per-GPU bytes per iteration at the plot's last GPU count over the model's weights in the
    machine's precision, at the shape the performance model picks (as the notebook's plot)."""
    from gpulab.engine.parallel.overlap import Overlap
    from gpulab.engine.perf.flops import params_count
    from gpulab.engine.perf.machines import machine
    from gpulab.engine.perf.predict import DEFAULT_BUCKET_MB, DEFAULT_OVERLAP, gpt_config
    from gpulab.engine.perf.wire import tensor_parallel_volume

    overlap = Overlap.parse(DEFAULT_OVERLAP, bucket_bytes=int(DEFAULT_BUCKET_MB * 2**20))  # the calculator's

    cfg, m = gpt_config(ctx["gpt_model"]), machine(ctx["machine"])
    row = tensor_parallel_volume(cfg, [ctx["gpus"]], global_batch=ctx["global_batch"], machine=m,
                                 overlap=overlap)[0]
    return row["3d"] / (params_count(cfg) * m.value_bytes)


ANSWERS = {
    1: Answer(
        text="""gpt-80b has about 76.8 billion parameters (42 blocks of 12 x 12288^2, plus the embeddings). At 16
bytes each (bf16 weight and gradient, fp32 master copy, momentum and variance) that is about **1230 GB**:
at least 31 GPUs of 40 GB just for the parameter state, before a single activation, and more in practice,
since only about 90% of a GPU's memory is usable.""",
        value=_state_gb, unit="GB", rel_tol=0.02,
        hint="Count 16 bytes per parameter: 2 + 2 + 12 (the ZeRO paper's K = 12 for AdamW in mixed precision)."),
    2: Answer(
        text="""**1.5x.** DDP all-reduces the gradients once: a ring all-reduce sends 2(p-1)/p of the buffer from
each GPU. ZeRO-3 runs an all-gather of the weights in forward, another in backward, and a reduce-scatter of
the gradients: three collectives, but each of the two halves of an all-reduce, (p-1)/p each, so 3(p-1)/p in
all: 1.5 times DDP's bytes, not 3 times. Counting buffer sizes instead of wire bytes gives the wrong 3x.""",
        value=_zero3_factor, unit="x DDP", rel_tol=0.01,
        hint="Count bytes on the wire, not buffers: all-reduce = reduce-scatter + all-gather."),
    3: Answer(
        text="""At the notebook's batch (1024 sequences of 2048 tokens) the model picks **all depth**, `1 x 1 x g`:
the activations of two million tokens are far larger than the weights, and depth moves only weights, in
all-gathers that run a layer ahead of the compute and hide. A depth group of `g` sends, per GPU, `(g-1)/g` of
the weights for the forward all-gather, the same again for backward's, and `(g-1)/g` of the gradients in the
reduce-scatter: **3(g-1)/g times the weights' bytes**, about 3x at 512 GPUs, rising from 2.26x at 4
(the kit's count is a little above the formula: the tied embedding is gathered once more for the LM head).
That is without recomputation, as the plot counts; recomputing the forward pass gathers the weights a third
time, 4(g-1)/g (4.0x at 512 GPUs).
It does not fall because every GPU must receive every weight it computes with, however many GPUs share them.

1D tensor parallelism all-reduces every layer's activations (tokens x width), `2(g-1)/g` of them per
all-reduce, which also tends to a constant: 13-17 TB per GPU here, 30-40 times the 3D pick, and it stops
where the 96 heads no longer split over `g`. What 3D buys is the choice: put the GPUs where the bytes are
smallest and can hide. A grid with some row (`4 x 1 x 128` at 512 GPUs) sends about half of all-depth's
bytes, but the model predicts it slower, because its activation all-reduces wait between matmuls; at a
small batch the activations shrink and the pick moves towards row and col (Singh et al., AxoNN).""",
        value=_traffic_over_weights, unit="x the weights", needs=("gpt_model", "gpus", "global_batch", "machine"),
        rel_tol=0.02, close_tol=0.1,
        hint="Read the shape of the last 3D point: depth gathers the weights twice and reduce-scatters the "
             "gradients once, (g-1)/g of them each time."),
}
