"""Answers to notebook 02's questions (the broadcast explorer)."""

from gpulab.lessons.answers import Answer


def _pipelining_gain(ctx: dict) -> float:
    """Binomial's time over the best-chunked chain's, for a message where bandwidth dominates."""
    from gpulab.bcast.cost.hockney import Link, Machine, best_chunk, predict

    link = Link.plain(1e-6, 1e-9)  # 1 us, 1 GB/s
    machine, p, n = Machine("plain", link, link), int(ctx["p"]), 1 << 30
    chain = predict("chain", n, p, machine, chunk_bytes=best_chunk("chain", n, p, machine))
    return predict("binomial", n, p, machine) / chain


MPICH_CH4 = ("MPICH 5's ch4 device picks its broadcast from `maint/tuning/coll/ch4/generic.json` "
             "(github.com/pmodels/mpich, compositions in `src/mpid/ch4/src/ch4_coll_impl.h`)")

ANSWERS = {
    1: Answer(
        text="""Binomial costs `log2(p)·(a + n·b)`, the chain `(p + k - 2)·(a + (n/k)·b)`. For small `n` the
latency terms decide: binomial pays `log2 p` of them, the chain `p + k - 2`, so binomial wins. For large
`n` the bandwidth terms decide: binomial moves the whole message `log2 p` times on its critical path, the
chain about once (`(p + k - 2)/k` times), so the chain wins. The crossover is where the two are equal; the
notebook's `crossover(first, "chain", "binomial")` finds it in your run. A larger chunk means fewer
chunks (fewer latencies, less overlap), which moves the crossover to larger sizes; a smaller chunk the
other way, until the per-chunk latency (and Python's per-message cost) dominates.""",
        exercise="exercises/source/02_chain"),
    2: Answer(
        text="""At most `log2 p`: binomial moves the whole message `log2 p` times on its critical path, a
well-chunked chain about once. On 4 ranks that is 2x (the kit's model, on a link where bandwidth
dominates, gives slightly less: the chain still pays its `p + k - 2` latencies). With 16 ranks per node,
as on the paper's KESCH nodes (8 K80 boards = 16 GPUs), `log2 16 = 4`: the larger the node, the more
pipelining can win, which is why Awan et al. proposed the chain for dense GPU nodes.""",
        value=_pipelining_gain, unit="x", needs=("p",), rel_tol=0.05, close_tol=0.25,
        hint="Compare the bandwidth terms only: log2(p)·n·b for binomial against about n·b for the chain.",
        exercise="exercises/source/02_chain"),
    3: Answer(
        text="""Yes: too few chunks and the hops do not overlap (the chain degenerates to `p - 1` whole
messages); too many and every chunk pays the latency `a` (and, in gpulab, a Python call). The model's
optimum `k ≈ sqrt((p-2)·n·b/a)` balances the two; `gpulab.bcast.cost.hockney.best_chunk` computes it for a fitted
machine (notebook 03 §4 compares it with a measured scan). The measured optimum is usually flat: chunk
sizes within 2-4x of it cost about the same.""",
        exercise="exercises/source/02_chain"),
    4: Answer(
        text="""In the alpha-beta model scatter + allgather beats binomial on bandwidth from 3 ranks
(`2(p-1)/p·n` against `ceil(log2 p)·n` bytes on the critical path) but pays many more latencies
(`2 log2 p` for recursive doubling, `log2 p + p - 1` for the ring), so it wins only for large messages;
in Python each of those messages costs extra, which pushes the crossover further up. MPICH's generic rule
(Thakur, Rabenseifner and Gropp 2005; `gpulab.bcast.cost.mpich.mpir_rule`) uses it from 12 KiB but only from
8 processes. """ + MPICH_CH4 + """: for p < 8 on a communicator that spans nodes it runs its node-aware
composition instead, on one node a binomial tree.""",
        exercise="exercises/source/03_scatter_allgather"),
    5: Answer(
        text="""Hierarchical crosses the slow level once per node and does the rest on the fast level. On
one machine both "levels" are the same shared memory, so it can only add bookkeeping. It wins when the
links between nodes are slower than those inside (a real cluster: the profiles in notebook 01 §4 give
1.8x for KESCH to 7.4x for a DGX H100) and when a flat algorithm's hops would cross the network more
often, as binomial with round-robin placement. On the emulated cluster lower the link to 100mbit and use
round-robin placement: binomial then crosses the network on all but its first level (gpulab's binomial
sends the largest subtree first, rank 0 to rank p/2, which round-robin puts on the root's node), each
node sending several copies over its one link; hierarchical crosses once per node."""),
    6: Answer(
        text=MPICH_CH4 + """. When some node holds several of the ranks and p < 8, at every size, it runs
*composition alpha*: the root hands the data to its node's leader, the leaders broadcast across nodes, each
leader broadcasts inside its node. With one rank per node (the first explorer's 4 x 1) there is no hierarchy
and it runs the flat binomial tree; with all ranks on one node the hierarchy has one node, and composition
alpha is only the broadcast inside it, a binomial tree for p < 8 (notebook 01 §1). So on 2 emulated nodes x
2 ranks with round-robin placement the dashed curve follows hierarchical, not the flat binomial, whose later
hops all cross the network; with block placement binomial's one network hop is the leaders' hop, and the three
coincide (docs/results/emulated_placement_2x2.json at 1 Gbit/s, 8 MiB: round-robin `MPI_Bcast` 70.0 ms,
hierarchical 70.4, binomial 136; block 71.2-71.6 ms for all three).
(From 8 ranks on MPICH switches rule: in docs/results/emulated_placement.json, 4 nodes x 2 at 1 Gbit/s,
`MPI_Bcast` at 8 MiB lay between hierarchical and binomial with round-robin placement and beat both with
block placement.)
At small sizes `MPI_Bcast` is faster than every gpulab algorithm by the per-message cost of Python; on one
node MPICH also switches protocol (eager below `MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD`, 8 KiB in the MPICH
5.0 the kit installs, single-copy above), which gpulab's algorithms share
because they call the same MPI underneath."""),
    7: Answer(
        text="""Staging adds a device-to-host copy at the sender and a host-to-device copy at every receiver
(two PCIe copies per hop), after a synchronization of the GPU's stream. For small messages that costs
tens of microseconds, far more than the broadcast itself: on one H200 a staged 4 KiB broadcast took
56-78 us at p = 2, where host buffers take about 1.4 us (docs/gpu.md). For large ones the copies run at
PCIe speed, faster than most networks, so they matter less but do not vanish for a tree, which waits for
each whole copy. A pipelined chain overlaps the copies of chunk `i+1` with the network transfer of chunk
`i`, so only the first and last chunk's copies show, which pays where the copies are a large share: on
that H200, with its ranks sharing the GPU, MPI's transfer through shared memory dwarfed the copies, and
at p = 2 (one hop) the pipelined staging was no faster than one unsegmented copy (19.3-20.2 against
18.6 ms at 64 MiB); the p = 4 runs changed the chain's chunk with the staging chunk, so they do not
separate the two (docs/gpu.md). CUDA-aware MPI (with GPUDirect RDMA)
removes the host copies altogether (glossary: staged vs CUDA-aware)."""),
    8: Answer(
        text="""Measure it: the answer depends on the GPUs and links. What to expect and why: NCCL's kernels
move GPU data over NVLink/PCIe themselves, with no host copies and no Python call per message, so at
small and medium sizes (1 MiB) the MPI-side algorithms pay their per-message and staging costs on top.
At large sizes (64 MiB) both are limited by the links, and a pipelined chain with CUDA-aware MPI can come
close: that was the paper's point (Awan et al., arXiv 1707.09414, report up to 14x and 16.6x lower
broadcast latency than NCCL-*based* solutions inside and across nodes with MVAPICH2-GDR's tuned
broadcast). NCCL is not host-free: across nodes a proxy thread on the host CPU posts the network
operations (InfiniBand verbs) for the GPU kernels (`src/proxy.cc` in NVIDIA/nccl), so host
scheduling can still matter there."""),
}
