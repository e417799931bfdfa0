"""Answers to notebook 00's questions (start here)."""

from gpulab.lessons.answers import Answer

ANSWERS = {
    1: Answer(
        text="""The root sends one message to each other rank: **p - 1 messages**, one after another.
If each costs `a + n·b` (Hockney: latency `a`, seconds per byte `b`), the last rank has its data after
`(p - 1)(a + n·b)`. The binomial tree that the cell ran instead needs only `ceil(log2 p)` rounds, because
every rank that has the data forwards it: on 4 ranks 2 rounds instead of 3 sends, on 1024 ranks 10
instead of 1023.""",
        value=lambda ctx: ctx["p"] - 1, unit="messages", needs=("p",), rel_tol=0.0, close_tol=0.0,
        hint="Count the sends of the root only: every other rank receives exactly once.",
        exercise="exercises/01_linear_and_binomial"),
}
