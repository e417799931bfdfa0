"""Answers to notebook 00's questions (start here)."""

from gpulab.lessons.answers import Answer
from gpulab.stats import order_statistic_ranks

ANSWERS = {
    1: Answer(
        text="""With `algorithm="linear"` the root sends one message to each other rank: **p - 1 messages**
(gpulab posts them at once, but one link carries them one after another). If each costs `a + n·b` (Hockney: latency `a`,
seconds per byte `b`), the last rank has its data after `(p - 1)(a + n·b)`. The binomial tree that the cell
ran instead needs only `ceil(log2 p)` rounds, because every rank that has the data forwards it: on 4 ranks 2
rounds instead of 3 sends, on 1024 ranks 10 instead of 1023.""",
        value=lambda ctx: ctx["p"] - 1, unit="messages", needs=("p",), rel_tol=0.0, close_tol=0.0,
        hint="Count the sends of the root only: every other rank receives exactly once.",
        exercise="exercises/source/01_broadcast"),
    2: Answer(
        text="""On one machine `MPI_Bcast` is usually fastest and binomial next; the chain and scatter +
allgather, which send many more messages, come last. The order of close entries can change from run to
run: the ranks share the machine's cores with each other and with everything else running, so one
measurement is a sample, not a fact. Repeat it, interleave the algorithms, and look at the spread before
you call a difference real: "How sure is a number?" measures one broadcast a dozen times and reports the
median with its interval. Why `MPI_Bcast` wins on one machine (C against Python per message, shared
memory with no link to pipeline over, busy-polling ranks sharing cores) is in the notebook's text above
the questions."""),
    3: Answer(
        text="""A rank's call returns when *its* part is done. The root's part is to hand its data to its
children: once its own sends are done it is free (below 8 KiB an eager send returns as soon as the data is
copied out; at 1 MiB MPICH's single-copy send returns when the child has read it, still only its children),
while the last receiver must wait for the data to travel the whole critical path (`ceil(log2 p)` rounds for
binomial, `p + k - 2` chunk steps for the chain). So `min_us` is often the root and `max_us` the last
receiver; the time of the broadcast as a whole is the *slowest* rank's (notebook 03 compares its model
with `max_us` for this reason). The barrier after each iteration (OSU-style timing) stops the root from
running ahead into the next broadcast."""),
    4: Answer(
        text="""A broadcast between processes on one node copies through shared memory: each receiver's
bytes are read once and written once (twice for an eager copy through a shared buffer), and the
ranks share the cores that do the copies. Main-memory bandwidth of a server is tens of GB/s (a
`STREAM` copy test measures yours), so a `busbw` of a few GB/s is a fraction of it: the copies, the
per-message calls and the ranks taking turns on the cores all cost. `busbw` for a broadcast equals
`algbw` = bytes / time (the glossary has the rule for each collective, after NCCL's nccl-tests)."""),
    5: Answer(
        text="""Sort the `n` runs, fastest first: `x(1) <= ... <= x(n)`. How many of them fall below the
true median is binomial(`n`, 1/2), like heads in `n` tosses of a fair coin, so `[x(j), x(n+1-j)]` misses
the median only when fewer than `j` runs fall on one side of it: probability `2·P(B <= j-1)`. The interval
takes the largest `j` that keeps this at 5% or less. For 12 runs, `j = 3`: `2·(1 + 12 + 66)/4096` = 3.9%,
so `[x(3), x(10)]` covers the median with 96%; `j = 4` would give only 85%
(`gpulab.stats.order_statistic_ranks(n)` computes it, after Le Boudec, 2010, section 2.2). The range
from the fastest to the slowest run covers the median too (`1 - 2/2^n`), but it is wider than it needs
to be and set by the two most extreme runs, which on a shared machine are the ones a stray process or a
lucky time slice made. The interval is about the median, the typical run, not about where the next
single run will fall. Below 9 runs the largest `j` is 1, so the interval is exactly the range (6 runs:
97%, and fewer than 6 runs give no 95% interval at all): that is why the kit measures at least 6 rounds
before it judges.""",
        value=lambda ctx: order_statistic_ranks(ctx["repeats"])[0], needs=("repeats",), rel_tol=0.0, close_tol=0.0,
        hint="Sort the samples and find the interval's lower end among them; the fastest run is j = 1."),
}
