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
        text="""1D tensor parallelism splits each layer's weights over g GPUs, but every GPU still holds and
all-reduces the layer's *whole* activations (tokens x width): 2(g-1)/g of them per all-reduce, which tends
to a constant as g grows, while the compute per GPU shrinks as 1/g, so communication takes over. The 3D grid
splits the activations over row and col (each all-reduce moves a 1/row or 1/col slice) and the weights over
depth (each GPU gathers only its block), so the bytes per GPU fall roughly like g^(-1/3) to g^(-1/2)
(Singh et al., AxoNN). 1D also stops where the heads no longer split over g.""")
}
