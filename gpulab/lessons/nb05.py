"""Answers to notebook 05's questions (the mesh explorer)."""

import statistics

from gpulab.lessons.answers import Answer


def _median_error(ctx: dict) -> float:
    """Median |predicted - measured| / measured over the notebook's sweep of grid shapes, in percent."""
    return 100 * statistics.median(abs(r["predicted ms"] - r["measured ms"]) / r["measured ms"]
                                   for r in ctx["sweep"])


ANSWERS = {
    1: Answer(
        text="""With overlap off, `(1, 1, 1, 4)` (pure data parallelism) issues **one** gradient all-reduce over
the data group after backward: every parameter once, `2(p-1)/p` of the gradient bytes on the wire, and
nothing during forward or backward. `(1, 4, 1, 1)` puts every layer's activations on the col group: a
forward all-reduce of Y (and of the LayerNorm statistics) per layer, in the middle of the computation,
so the rank waits for it every time; and attention, which col does not split, is computed again on every
col rank. Expect the col bars to be many and short, and the data bar one and long; expect col to cost
more in total, because its volume grows with the tokens and its calls pay their latency (and, here,
a wait for descheduled peers) once per layer (`gpulab.engine.perf.volume.collective_calls` lists every
call)."""),
    2: Answer(
        text="""Partly, and how much depends on the grid. A non-blocking MPI collective (MPI_Iallreduce and
friends) moves data only while some thread of the rank is inside the MPI library: MPICH and Open MPI make
progress in the calling thread unless an asynchronous progress thread is switched on (the MPI standard
only promises progress inside MPI calls; MPICH's switch for a progress thread is
`MPIR_CVAR_ASYNC_PROGRESS`). With progress `none` it moves only when the rank enters MPI for something
else (another group's blocking collective, the next issue) or at the final `wait`; between those calls it
sits. Where the backward pass still makes blocking calls, much of it moves inside them
(docs/engine_overlap.md, "no progress" with every switch on: on (1, 1, 2, 2) exposed communication fell
from 60 to 29 ms); where nothing else enters MPI, its time comes back at the
wait. `poll` calls MPI_Test between kernels; `thread` keeps a thread inside MPI.
On a GPU with NCCL the collective runs as kernels on their own stream, which move the bytes inside a
node with no host thread; across nodes NCCL's own proxy thread on the host drives the network
(`src/proxy.cc` in NVIDIA/nccl): a host thread is still involved, but it is NCCL's, not the
application's."""),
    3: Answer(
        text="""The cache keeps every weight that the forward all-gathered over depth until backward uses it, so
backward needs **no all-gathers** (each layer's backward one, and the LM head's forward one, which reuses
the embedding's gathered `wte`; `gpulab.engine.perf.volume` docstring). The price is memory: about every
block's gathered weights, `(12 · n_layer · n_embd² + vocab · n_embd) / (row · col)` values
(`gpulab.engine.perf.terms.memory_terms`), instead of the `1/depth` shard. The kit's number below is the
cache the notebook's overlap-on run measured (`on["memory"]["weight_cache"]`, in KiB): read it from the
explorer's "cache KiB" column. With depth = 1 nothing is gathered and the cache holds nothing.""",
        value=lambda ctx: ctx["weight_cache_bytes"] / 1024, unit="KiB", needs=("weight_cache_bytes",),
        rel_tol=0.01, close_tol=0.1,
        hint="The cache holds gathered (full-block) weights of every layer, not the 1/depth shards: "
             "read the 'cache KiB' column of the overlap-on run."),
    4: Answer(
        text="""Here a collective is memory copies (shared memory, or TCP through the emulated link) done by the
**same cores** that compute, and several ranks share each core (`gpulab.host.describe`
says how many here). Overlap can hide *waiting*: time a rank would spend blocked for a peer or for the
link; the `hidden` time in the timelines is real. But it cannot make copies free, because the copy needs
a core that is also computing, so the iteration shrinks much less than the hidden time, and where the
ranks outnumber the cores it can even grow: the polling, the progress thread and the extra messages take
core time of their own (docs/engine_overlap.md has the measurements on a 2-core machine: with every
switch on, some grids took less time than with overlap off and others more, by grid and progress mode).
With NCCL, as production frameworks run, the collectives are kernels on a few of the GPU's SMs (and the
NICs carry the bytes between nodes) while the other SMs compute, so
overlap hides most of the communication, though not all of its cost: those SMs and some memory
bandwidth are taken from the compute. gpulab's engine calls MPI from the host even on a GPU: on one H200, with
MPI staging through host memory, overlap shortened the iterations by 5.5 ms at most where the timelines
counted 11-19 ms hidden, because no overlap saves more than the communication exposed without it
(docs/gpu.md)."""),
    5: Answer(
        text="""The kit's number below is the median error of the model's iteration times over the notebook's
sweep, `|predicted - measured| / measured`, in percent. On a shared laptop it is often tens of percent:
the fit times each collective with every rank starting it together, while in training a rank on
oversubscribed cores also waits for peers that the OS has descheduled. So the fit charges the col
all-reduces a wait measured on one grid, the row all-reduces one measured on another, and the
replicas' gradient all-reduce, once an iteration, one measured on a third (the sweep's "calibrated on"
rows). With those waits, on 8 ranks of a 2-core machine the model came out 12.7% off over 9 runs (each
run's median error 8-28%, overlap off), and on the emulated clusters at 1 Gbit/s 3-8%
(docs/engine_model_accuracy.md, "Each setting over its runs"). The wait at every other call stays
unpriced.
For choosing a grid the **order** matters, and the Spearman rank correlation printed under the sweep
says how well the model orders the shapes (1 = the same order); the
model's pick measured against the measured best says what a wrong order costs. What the model leaves out
(`gpulab.engine.perf.predict`, docs/engine_model.md): load imbalance, contention between groups that share
cores or links, the OS scheduler, and a matmul rate that changes with the matrix size. AxoNN uses its own
model the same way: to shortlist shapes, then runs them.""",
        value=_median_error, unit="%", needs=("sweep",), rel_tol=0.05, close_tol=0.25,
        hint="Take |predicted - measured| / measured for each shape, then the median over the shapes "
             "(not the mean, and not the error of the best shape only)."),
    6: Answer(
        text="""Not for this model. On one NVIDIA H200 shared by 2 ranks (docs/gpu.md), the four 2-rank grids of
this notebook's GPT computed 32-41 ms per iteration on CuPy, where a 2-core machine, one rank per core,
computed the same grids in 22-38 ms with numpy (both in that record). The model is so small
(width 128) that a step is hundreds of tiny kernels, each launched from Python (the model fitted on that
GPU found 94 us per array operation), and the GPU's arithmetic never shows. Compute shrinks only when the
model is wide: at width 2048 the engine's float32 training step reached 68% of the float32 matmul rate
measured on that H200 (51.3 TFLOP/s, itself below the datasheet's peak). Communication
staged through host memory costs more than on the host (a stream synchronization and two PCIe copies per
call: a 4 KiB broadcast took 56-78 us there, against about 1.4 us for host buffers), so its share grows.
`staged` means the engine copied each buffer to host memory, called MPI there, and copied back (MPI
without CUDA support); `cuda-aware` means MPI read the device buffer directly (e.g. Open MPI or MPICH
built with CUDA/UCX), which saves the two copies. Overlap hides more on a GPU, because the transfer no
longer needs the cores that compute, but only as much as there is compute to hide behind. Without a GPU
in this session, leave the menu on host: the question is for a GPU node."""),
}
