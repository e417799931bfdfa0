"""Answers to notebook 03's questions (predict, measure, tune)."""

from gpulab.lessons.answers import Answer

VGG_FP32 = "vgg16"


def _chunk_count_factor(ctx: dict) -> float:
    """How the model's best number of chunks changes when the latency doubles."""
    from gpulab.bcast.cost.hockney import Link, Machine, best_chunk

    def chunks(alpha):
        link = Link.plain(alpha, 1e-9)
        n = 64 << 20
        return n / best_chunk("chain", n, 8, Machine("plain", link, link))

    return chunks(20e-6) / chunks(10e-6)


def _latency_share_dgx(ctx: dict) -> float:
    from gpulab.bcast.cost.profiles import profile
    from gpulab.workloads.startup import predicted

    return 100 * predicted(VGG_FP32, "binomial", 64, profile("dgx-h100"))["latency_share"]


def _compute_for_seven_percent(ctx: dict) -> float:
    from gpulab.bcast.cost.profiles import profile
    from gpulab.workloads import layer_bytes
    from gpulab.workloads.gradient_sync import predicted_sync

    r = predicted_sync(sum(layer_bytes(VGG_FP32)), 128, profile("kesch"))
    saving = r["mpi_bcast_ms"] - r["tuned_bcast_ms"]
    return saving / 0.07 - (r["reduce_ms"] + r["mpi_bcast_ms"])


ANSWERS = {
    1: Answer(
        text="""On one machine both "levels" are shared memory: the fit gives nearly the same `a` and `b` for
both, and nothing like a network. Against the profiles, `a` is usually the further off: a fitted `a`
contains MPI's software path and, for gpulab's Python algorithms, a Python call per message (microseconds),
where NCCL plans with 0.5-3 us per hop; the fitted `b` of a memory copy is within a small factor of a
fast link. On the emulated cluster the inter-node `b` follows the rate-limited link. One machine cannot
show the levels' difference because there is no second kind of link: every pair of ranks talks through
the same memory, whatever `ranks_per_node` says."""),
    2: Answer(
        text="""Look at the accuracy table's `ratio[fitted]` (predicted over measured: below 1 the model is
optimistic): the worst row is usually a pipelined or scatter-allgather algorithm at a large size, or any
algorithm at the smallest size.
Mechanisms the model leaves out or simplifies: ranks waiting for a core when they outnumber the cores
(busy-polling), contention of concurrent messages for memory bandwidth, the eager/rendezvous hand-shake
beyond the two fitted regimes, cache effects, and noise from other work on the machine.
`docs/bcast_model.md` says where each model is wrong and why."""),
    3: Answer(
        text="""`k*` is proportional to `sqrt(n·b/a)`. Doubling `a` divides it by `sqrt 2`: **0.71x** as many
chunks (each chunk twice the bytes / sqrt 2, i.e. 1.41x larger), because each chunk's latency now costs
more. Doubling the bandwidth halves `b`: also **0.71x** the chunks, because the bytes of a chunk cost
less, so fewer, larger chunks keep the pipeline full for less latency. The kit's `best_chunk` gives the
same factor (it evaluates the model around `k*`).""",
        value=_chunk_count_factor, unit="x the chunks", rel_tol=0.05, close_tol=0.25,
        hint="k* ~ sqrt(n·b/a): doubling a divides k* by sqrt(2), it does not halve it.",
        exercise="exercises/source/02_chain"),
    4: Answer(
        text="""On a shared machine one measurement can be slow because something else ran at that moment.
Without confirmation, a single lucky sweep can crown an algorithm that is not really faster, and `auto`
then runs it on every call, slower than `MPI_Bcast` for good. Requiring the margin (10%) in the sweep and
again in several interleaved rounds makes that unlikely: a real difference survives repetition, a lucky
one does not. Interleaving matters too: measuring the two candidates alternately exposes both to the same
background load."""),
    5: Answer(
        text="""By the model, very little: VGG-16 has 32 weight and bias tensors and 553 MB, so even 32
broadcasts' latencies (a few microseconds each, times `log2 64 = 6` levels) are a small share next to
moving 553 MB; the kit's number is for binomial at 64 GPUs on the DGX H100 profile. The share is larger
on the DGX H100 than on KESCH because its links are faster (less bandwidth time) while the latencies are
NCCL's similar per-hop constants, so fusing helps **more on the DGX H100**, though little on either for
VGG-16. In gpulab's own measurement the layer-wise cost is larger, because each tensor is a Python call
with its own set-up: the table's `extra_share` shows it.""",
        value=_latency_share_dgx, unit="%", rel_tol=0.1, close_tol=0.5,
        hint="Sum the alpha terms of every tensor's broadcast and divide by the whole predicted time."),
    6: Answer(
        text="""The model's saving is `S = mpi_bcast_ms - tuned_bcast_ms` per iteration (the reduce is the
same in both). For `S` to be 7% of the whole iteration with MPI_Bcast, `S / (compute + reduce + mpi_bcast)
= 0.07`, so `compute = S / 0.07 - (reduce + mpi_bcast)`. That is several hundred milliseconds per
iteration on 128 GPUs, plausible for VGG-16 on K80s at a modest batch per GPU, but the paper's compute
time is not known here, and neither is how CNTK's allreduce ran inside MVAPICH2-GDR (see section 8): the
number is what the miniature's assumption implies, not what the paper measured.""",
        value=_compute_for_seven_percent, unit="ms", rel_tol=0.05, close_tol=0.25,
        hint="The 7% is of the whole iteration: compute + reduce + broadcast, not of the broadcast."),
}
