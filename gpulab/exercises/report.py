"""How a check reports: what is wrong (the failure type, byte differences, message steps, a learner's
exception) and, once right, the timing beside the library's version.

The messages are plain Python on gathered logs, so every rank builds the same
message and the same verdict.
"""

from __future__ import annotations

import traceback

import numpy as np

from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())

MAX_LINES = 6  # rank lines per failing case: enough to see the pattern, short enough to read


class CheckFailed(AssertionError):
    """The learner's code gave a wrong result; the message names the rank, the bytes or value, and the step."""


def pattern(nbytes: int, seed: int) -> np.ndarray:
    """Reproducible random bytes (every rank makes the same ones)."""
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def raised(error: BaseException, fn) -> str:
    """'ValueError: ... (line 7 of your linear_bcast)': the learner's innermost frame, if any."""
    code = getattr(fn, "__code__", None)
    frames = traceback.extract_tb(error.__traceback__)
    mine = [f for f in frames if code is not None and f.filename == code.co_filename]
    where = f" (line {mine[-1].lineno - code.co_firstlineno + 1} of your {fn.__name__}: {mine[-1].line})" \
        if mine else ""
    return f"{type(error).__name__}: {error}{where}"


def ranges(mask: np.ndarray, most: int = 3) -> str:
    """'[0, 4096), [8192, 8200)' for the True runs of a boolean array."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.view(np.int8), [0]))))
    runs = [f"[{a}, {b})" for a, b in zip(edges[::2], edges[1::2])]
    return ", ".join(runs[:most]) + (f" and {len(runs) - most} more" if len(runs) > most else "")


def hexbytes(a: np.ndarray, most: int = 6) -> str:
    return " ".join(f"{x:02x}" for x in a[:most]) + (" ..." if a.size > most else "")


def assign_steps(logs: list[list[dict]]) -> None:
    """Give every event of every rank's log a logical step, in place, and pair sends with receives.

    A send's step is one more than its rank's previous event's; a receive's is
    the later of its rank's previous event and the matched send (MPI matches the
    k-th send from a to b with tag t to b's k-th receive from a with tag t). A
    binomial broadcast on 4 ranks takes steps 1 and 2, a linear one 1, 2, 3.
    """
    sends: dict = {}
    for rank, log in enumerate(logs):
        for e in log:
            e["rank"] = rank
            if e["kind"] == "send":
                sends.setdefault((rank, e["peer"], e["tag"]), []).append(e)
    taken: dict = {}
    for rank, log in enumerate(logs):
        for e in log:
            if e["kind"] == "recv":
                key = (e["peer"], rank, e["tag"])
                k = taken.get(key, 0)
                taken[key] = k + 1
                e["match"] = sends.get(key, [])[k] if k < len(sends.get(key, [])) else None
                if e["match"] is not None:
                    e["match"]["received"] = True
    for log in logs:
        for e in log:
            e["step"] = 0
    changed = True
    while changed:  # a fixpoint: each pass carries steps one message further
        changed = False
        for log in logs:
            previous = 0
            for e in log:
                step = previous + 1 if e["kind"] == "send" else max(previous, (e.get("match") or {}).get("step", 0))
                if step != e["step"]:
                    e["step"], changed = step, True
                previous = e["step"]


def first_lines(lines: list[str]) -> str:
    extra = f"\n  ... and {len(lines) - MAX_LINES} more" if len(lines) > MAX_LINES else ""
    return "\n".join(f"  {line}" for line in lines[:MAX_LINES]) + extra


def seconds_per_call(run, comm, iters: int) -> float:
    """Median over ``iters`` of the slowest rank's time for one call of ``run`` (a barrier before each):
    the timing every check shows beside the library's version once the learner's code is right."""
    times = []
    for _ in range(iters):
        comm.Barrier()
        t0 = MPI.Wtime()
        run()
        times.append(comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
    return float(np.median(times))
