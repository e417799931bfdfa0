"""Check for exercise 5: a learner's 1F1B schedule of one pipeline stage, against the engine's, and run.

    check_1f1b(one_f_one_b, comm)     # on every rank: one rank per stage

``one_f_one_b(pipe, stage, micro)`` returns the stage's order of ("F", i) and
("B", i). The check compares it with ``gpulab.engine.parallel.pipeline.schedule``
for every pipe <= 6, stage and micro <= 8, names the first position that
differs and the rule it breaks, then runs the learner's order on the ranks as
the engine does (an activation sent forward after each F, its gradient back
after each B, non-blocking sends, blocking receives, tag = micro-batch) with a
deadline, so a schedule that deadlocks is reported stage by stage.
"""

from __future__ import annotations

from gpulab.exercises.report import CheckFailed, assign_steps, first_lines, raised
from gpulab.exercises.traffic import Stuck, Traffic
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())


def rule_broken(ops: list, pipe: int, stage: int, micro: int) -> str | None:
    """The first rule of a pipeline schedule that ``ops`` breaks, or None."""
    wanted = sorted([("F", i) for i in range(micro)] + [("B", i) for i in range(micro)])
    if sorted(ops) != wanted:
        missing, extra = set(wanted) - set(ops), [op for op in ops if op not in wanted or ops.count(op) > 1]
        return f"it must run each F and B of micro-batches 0..{micro - 1} once (missing {sorted(missing)[:4]}, " \
               f"extra {extra[:4]})"
    done, held, most = set(), 0, pipe - stage
    for k, (kind, i) in enumerate(ops):
        if kind == "B" and ("F", i) not in done:
            return f"position {k}: B of micro-batch {i} before its F"
        held += 1 if kind == "F" else -1
        if held > most:
            return f"position {k}: it holds {held} micro-batches' activations; 1F1B holds at most pipe - stage = {most}"
        done.add((kind, i))
    return None


def _order_problem(fn, reference) -> str | None:
    for pipe in range(1, 7):
        for stage in range(pipe):
            for micro in range(1, 9):
                try:
                    ops = [tuple(op) for op in fn(pipe, stage, micro)]
                except Exception as error:  # noqa: BLE001 - the learner's error is the finding
                    return f"one_f_one_b({pipe}, {stage}, {micro}) raised {raised(error, fn)}"
                want = reference("1f1b", pipe, stage, micro)
                if ops != want:
                    k = next((k for k, (a, b) in enumerate(zip(ops, want)) if a != b), min(len(ops), len(want)))
                    got = ops[k] if k < len(ops) else "nothing"
                    rule = rule_broken(ops, pipe, stage, micro)
                    return (f"pipe={pipe}, stage={stage}, micro={micro}: position {k} is {got}, the engine runs "
                            f"{want[k] if k < len(want) else 'nothing'} there\n  yours:  {ops}\n  engine: {want}"
                            + (f"\n  rule broken: {rule}" if rule else ""))
    return None


def _run(ops: list, comm, stage: int, pipe: int) -> None:
    """Run one stage's order as the engine does: F receives an activation and sends one on, B a gradient back."""
    import numpy as np

    pending = []
    for kind, i in ops:
        value = np.zeros(1)
        if kind == "F":
            if stage > 0:
                comm.Recv(value, source=stage - 1, tag=i)
            if stage < pipe - 1:
                pending.append(comm.Isend(np.full(1, 100.0 * i + stage), dest=stage + 1, tag=i))
        else:
            if stage < pipe - 1:
                comm.Recv(value, source=stage + 1, tag=i)
            if stage > 0:
                pending.append(comm.Isend(np.full(1, -100.0 * i - stage), dest=stage - 1, tag=i))
    for request in pending:
        request.Wait()


def _deadlocks(fn, comm, micro: int, seconds: float) -> list[str]:
    """Run the learner's order on one rank per stage; a line per stage that stopped waiting (same on all ranks)."""
    pipe, stage = comm.Get_size(), comm.Get_rank()
    mine = []
    with Traffic(comm, seconds) as traffic:
        try:
            _run([tuple(op) for op in fn(pipe, stage, micro)], traffic.comm, stage, pipe)
        except Stuck as stuck:
            mine.append(f"stage {stage} stopped waiting at its step <step{stuck.event['seq']}>: {stuck}")
        except Exception as error:  # noqa: BLE001 - the learner's error is the finding
            mine.append(f"stage {stage}: one_f_one_b({pipe}, {stage}, {micro}) raised {raised(error, fn)}")
    gathered = comm.allgather((mine, traffic.log))
    logs = [log for _, log in gathered]
    assign_steps(logs)
    lines = []
    for rank, (found, _) in enumerate(gathered):
        for line in found:
            for e in logs[rank]:
                line = line.replace(f"<step{e['seq']}>", str(e["step"]))
            lines.append(line)
    return lines


def check_1f1b(fn, comm=None, *, micro: int = 6, seconds: float = 5.0) -> str:
    """Run the learner's order on the ranks, then compare it with the engine's; raise CheckFailed naming the
    stages that deadlocked and the first position that differs, with the rule it breaks."""
    from gpulab.engine.parallel.pipeline import schedule

    if comm is None:

        comm = MPI.COMM_WORLD
    pipe = comm.Get_size()
    stuck = _deadlocks(fn, comm, micro, seconds)
    problem = _order_problem(fn, schedule)
    parts = []
    if stuck:
        parts.append(f"it deadlocks on {pipe} stages with {micro} micro-batches:\n{first_lines(stuck)}")
    if problem:
        parts.append(f"it differs from the engine's 1F1B order at {problem}")
    if parts:
        raise CheckFailed(f"{fn.__name__}: " + "\n".join(parts))
    return (f"{fn.__name__}: the engine's 1F1B order for every pipe <= 6, stage and micro <= 8, and it ran "
            f"without deadlock on {pipe} stages with {micro} micro-batches")
