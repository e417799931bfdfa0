"""One run of a learner's broadcast on every rank, compared bit for bit with MPI_Bcast, and its diagnosis.

    outcome = bcast_trial(fn, comm, root=1, nbytes=4099, seed=7)   # on every rank; same result on all
    outcome.ok, outcome.problems, outcome.logs

Non-root ranks start with the complement of the root's bytes, so a byte that
no message wrote is told apart from one that a message wrote wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpulab.exercises.report import assign_steps, pattern, raised, ranges
from gpulab.exercises.traffic import ExerciseRule, Stuck, Traffic
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())


@dataclass
class Outcome:
    root: int
    nbytes: int
    problems: list[str] = field(default_factory=list)  # one line per fault, rank by rank
    logs: list[list[dict]] = field(default_factory=list)  # every rank's sends and receives, with steps

    @property
    def ok(self) -> bool:
        return not self.problems


def _wrong_bytes(me: int, got: np.ndarray, expected: np.ndarray, start: np.ndarray, log: list[dict]) -> str:
    """What is wrong with this rank's buffer, and which of its receives wrote the first wrong byte."""
    wrong = got != expected
    first = int(np.argmax(wrong))
    line = (f"rank {me} has {int(wrong.sum())} wrong byte(s) at {ranges(wrong)}: byte {first} is "
            f"{got[first]:#04x}, MPI_Bcast gives {expected[first]:#04x}")
    writer = [e for e in log if e["kind"] == "recv" and e["done"] and e["offset"] is not None
              and e["offset"] <= first < e["offset"] + e["nbytes"]]
    if np.array_equal(got[wrong], start[wrong]) and not writer:
        line += "; none of them was ever written"
    elif np.array_equal(got[wrong], start[wrong]):
        line += " (what the ranks held before the broadcast: sent by a rank that did not have the data yet?)"
    else:
        piece = got[first:first + 16]
        if piece.size >= 4 and not np.array_equal(piece, start[first:first + piece.size]):
            at = [i for i in np.flatnonzero(expected[:expected.size - piece.size + 1] == piece[0])
                  if np.array_equal(expected[i:i + piece.size], piece)]
            if at and at[0] != first:
                line += f"; they are the root's bytes from offset {at[0]} (an offset {at[0] - first:+d} too far)"
    if writer:
        e = writer[-1]
        line += (f"; byte {first} came in the receive at step <step{e['seq']}> from rank {e['peer']} "
                 f"into bytes [{e['offset']}, {e['offset'] + e['nbytes']})")
    elif any(e["kind"] == "recv" for e in log):
        line += f"; none of its receives covered byte {first}"
    else:
        line += "; it received no message"
    return line


def run_logged(fn, args: tuple, options: dict, me: int) -> list[str]:
    """Call the learner's fn; [] if it returned, else one line saying where it stopped or what it raised."""
    try:
        fn(*args, **options)
    except Stuck as problem:
        step = f" after step <step{problem.event['seq']}>" if problem.event and problem.event["seq"] else ""
        return [f"rank {me} stopped waiting{step}: {problem}"]
    except ExerciseRule as problem:
        return [f"rank {me}: {problem}"]
    except Exception as problem:  # noqa: BLE001 - the learner's error is the finding
        return [f"rank {me} raised {raised(problem, fn)}"]
    return []


def blocks(nbytes: int, p: int) -> list[tuple[int, int]]:
    """The scatter's blocks: block i is bytes [lo, hi) of relative rank i, ceil(nbytes/p) bytes each
    (the last ones shorter or empty), as MPICH and gpulab.bcast cut them."""
    size = -(-nbytes // p)
    return [(min(i * size, nbytes), min((i + 1) * size, nbytes)) for i in range(p)]


def bcast_trial(fn, comm, *, root: int, nbytes: int, seed: int, seconds: float = 10.0, kind: str = "bcast",
                **options) -> Outcome:
    """Run ``fn(buf, root, comm, **options)`` once on every rank through a logged communicator.

    kind "bcast": the root starts with the bytes, every rank must end with them.
    "scatter": the same start; each rank is judged on its own block only.
    "allgather": every rank starts with only its own block, and must end with all.
    """
    me, p = comm.Get_rank(), comm.Get_size()
    source = pattern(nbytes, seed)
    expected = source.copy() if me == root else np.zeros(nbytes, np.uint8)
    comm.Bcast([expected, MPI.BYTE], root=root)  # the reference: MPI's own broadcast of the same bytes
    start = source if me == root and kind != "allgather" else ~source
    lo, hi = blocks(nbytes, p)[(me - root) % p]
    if kind == "allgather":
        start[lo:hi] = source[lo:hi]
    buf = start.copy()
    mine = []
    with Traffic(comm, seconds, base=buf) as traffic:
        mine += run_logged(fn, (buf, root, traffic.comm), options, me)
    judged = slice(lo, hi) if kind == "scatter" else slice(0, nbytes)
    stuck = any("stopped waiting" in line for line in mine)  # its bytes are wrong, and the wait says why
    if not stuck and not np.array_equal(buf[judged], expected[judged]):
        mask = np.zeros(nbytes, bool)
        mask[judged] = True
        got = np.where(mask, buf, expected)  # bytes outside the judged block count as right
        mine.append(_wrong_bytes(me, got, expected, start, traffic.log))
    gathered = comm.allgather((mine, traffic.log))
    outcome = Outcome(root, nbytes, logs=[log for _, log in gathered])
    assign_steps(outcome.logs)
    for rank, (lines, _) in enumerate(gathered):
        for line in lines:
            for e in outcome.logs[rank]:
                line = line.replace(f"<step{e['seq']}>", str(e["step"]))
            outcome.problems.append(line)
    lost = [f"rank {rank} sent {e['nbytes']} B to rank {e['peer']} (tag {e['tag']}) at step {e['step']}, and "
            f"rank {e['peer']} never received it"
            for rank, log in enumerate(outcome.logs) for e in log if e["kind"] == "send" and not e.get("received")]
    outcome.problems = lost + outcome.problems  # where a message went is what explains a wait
    return outcome
