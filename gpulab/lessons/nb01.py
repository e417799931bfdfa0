"""Answers to notebook 01's questions (broadcast algorithms: code, pattern, cost)."""

from gpulab.lessons.answers import Answer


def _knomial_rounds(ctx: dict) -> float:
    from gpulab.bcast.algorithms.critical_path import tree_depth
    from gpulab.bcast.algorithms.trees import knomial

    return tree_depth(knomial, 4, serial=False, options=(("radix", 4),))


def _chain_steps(ctx: dict) -> float:
    from gpulab.bcast.cost.hockney import pipeline_shape

    d, f = pipeline_shape("chain", 4, serial=False)
    return d + ((1 << 20) // (16 << 10) - 1) * f


def _scatter_allgather_from(ctx: dict) -> float:
    """The smallest p at which scatter + ring allgather beats binomial when bandwidth dominates."""
    from gpulab.bcast.cost.hockney import Link, Machine, predict

    link = Link.plain(1e-9, 1e-9)  # 1 ns latency, 1 GB/s: a 64 MiB message is all bandwidth
    machine = Machine("bandwidth-bound", link, link)
    n = 64 << 20
    return next(p for p in range(2, 65)
                if predict("scatter_allgather_ring", n, p, machine) < predict("binomial", n, p, machine))


def _hierarchical_gain(ctx: dict) -> float:
    from gpulab.bcast.cost.hockney import predict
    from gpulab.bcast.cost.profiles import profile

    kesch, n = profile("kesch"), 64 << 20
    return (predict("binomial", n, 64, kesch)
            / predict("hierarchical", n, 64, kesch, inter="binomial", intra="binomial"))


ANSWERS = {
    1: Answer(
        text="""With radix 4 on 4 ranks the root sends to all three others in **one round** (k-nomial:
`ceil(log_4 4) = 1` round of up to `k - 1 = 3` sends); binomial (radix 2) needs `ceil(log2 4) = 2` rounds.
The round count is what the kit's schedules give (`gpulab.bcast.algorithms.critical_path.tree_depth`). More children
per round pay off when a rank can really send to several at once (several network ports, or a receiver
that copies for itself, as MPICH's single-copy path on one node) and when latency dominates; if the
sender's one link carries the sends one after another, the three sends cost three message times and
k-nomial is no faster than linear.""",
        value=_knomial_rounds, unit="rounds", rel_tol=0.0, close_tol=0.0,
        hint="Count rounds, not messages: in one round the root may send to k - 1 ranks.",
        exercise="exercises/source/01_broadcast"),
    2: Answer(
        text="""1 MiB in 16 KiB chunks is `k = 64` chunks; the chain's critical path is `p + k - 2 = 66` chunk
messages (the first chunk needs `p - 1 = 3` hops to reach the last rank, then one more message time per
further chunk: the kit's `pipeline_shape("chain", 4)` gives `D = 3`, `F = 1`, and `D + (k - 1)F = 66`).
Binomial sends `log2 4 = 2` whole messages. In the alpha-beta model the chain costs `66(a + n·b/64)` =
`66a + 1.03·n·b`, binomial `2a + 2·n·b`: the chain pays 64 more latencies and saves almost one whole
message's transfer time, so it wins when `n·b` is large against `a` (large messages, slow links).""",
        value=_chain_steps, unit="messages", rel_tol=0.0, close_tol=0.05,
        hint="k = n / chunk = 64 chunks; the path is p + k - 2, not k.",
        exercise="exercises/source/02_chain"),
    3: Answer(
        text="""When bandwidth dominates, a tree costs `ceil(log2 p)·n·b` (every level moves the whole message)
and scatter + allgather `2·((p-1)/p)·n·b`. At `p = 2` both move `n`; at `p = 3` the tree moves `2n` on its
critical path and scatter + allgather `1.33n`: from **3 ranks** on it wins for large messages, and its
advantage grows with `p` (the tree's `log2 p` grows, `2(p-1)/p` stays below 2). The kit's model gives the
same answer for the ring variant with latency negligible (`predict` on a bandwidth-bound link). Its
latency terms (`log2 p + p - 1` messages for the ring) are why MPICH uses it only from 12 KiB and 8
ranks (Thakur, Rabenseifner and Gropp, IJHPCA 2005).""",
        value=_scatter_allgather_from, unit="ranks", rel_tol=0.0, close_tol=0.0,
        hint="Compare ceil(log2 p) with 2(p-1)/p at p = 2, 3, 4: the tree moves the whole message per level.",
        exercise="exercises/source/03_scatter_allgather"),
    4: Answer(
        text="""On the KESCH profile (16 GPUs per node on PCIe, FDR InfiniBand between nodes; numbers and
sources in `gpulab/machines/links.json`) the model prices a flat binomial tree over 64 GPUs, every hop on
the network, against hierarchical (binomial across the 4 node leaders, then binomial inside each node
over PCIe). Hierarchical crosses the network `log2 4 = 2` times instead of `log2 64 = 6`; the other hops
run on the faster node links, so it wins by the factor the kit computes. Of the measured curves (4 ranks,
2 per node, block placement), the pipelined ones would change most: the chain and the binary and split
binary trees (2.1-2.2x slower in the model at 64 MiB with the measured 16 KiB chunks, with KESCH's two
links against the node link alone; the chain 1.8x with 256 KiB chunks), since each chunk crosses the
network and the slowest hop sets the pace. Then scatter + allgather (1.8x: its ring has a network hop at
every step), then linear and k-nomial (1.5x: the root's copies share its network link). Hierarchical and
binomial change least and alike (1.4x): gpulab's binomial sends its largest subtree first, so on 2 nodes
x 2 in block placement it already crosses the network once, as hierarchical does. Hierarchical pulls
ahead only where a flat tree would cross more often: round-robin placement, or more ranks per node.
(Across real nodes `MPI_Bcast` is node-aware too, for p < 8: see section 1.)""",
        value=_hierarchical_gain, unit="x faster", rel_tol=0.05, close_tol=0.25,
        hint="Price both with the KESCH profile: the flat tree pays the network's beta on every level."),
}
