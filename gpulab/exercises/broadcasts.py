"""Checks for exercises 1-3: a learner's broadcast, bit for bit against MPI_Bcast, every root, awkward sizes.

    check_bcast(linear_bcast, comm, shape="linear")          # on every rank; raises CheckFailed, or says what passed
    check_bcast(chain_bcast, comm, shape="chain", chunk_bytes=1000)
    timing(linear_bcast, comm, algorithm="linear")            # once right: yours beside the library's, in us

``shape`` adds what the bytes cannot show: a linear broadcast where another
rank forwards, a binomial tree that takes more steps than ceil(log2 p), a
chain that skips a rank or sends the wrong number of chunks.
"""

from __future__ import annotations

import math

import numpy as np

from gpulab.exercises.report import CheckFailed, first_lines, seconds_per_call
from gpulab.exercises.trial import Outcome, bcast_trial
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())

AWKWARD_SIZES = (4099, 7, 1, 1000, 65541)  # not multiples of p, of a chunk or of a page; both sides of 8 KiB
SHAPES = ("linear", "binomial", "chain", "ring", "scatter")


def _world(comm):
    if comm is None:

        return MPI.COMM_WORLD
    return comm


def shape_problems(shape: str, outcome: Outcome, p: int, chunk_bytes: int | None = None) -> list[str]:
    """What is wrong with the messages' pattern of a broadcast whose bytes were right."""
    root, n, lines = outcome.root, outcome.nbytes, []
    for rank, log in enumerate(outcome.logs):
        received = [e for e in log if e["kind"] == "recv"]
        sent = [e for e in log if e["kind"] == "send"]
        vr = (rank - root) % p
        if shape == "linear":
            if rank != root and [e["peer"] for e in received] != [root]:
                lines.append(f"rank {rank} received from rank(s) {[e['peer'] for e in received]}: in a linear "
                             f"broadcast each rank receives one message, from the root ({root})")
            if rank != root and sent:
                lines.append(f"rank {rank} sent to rank {sent[0]['peer']}: in a linear broadcast only the root sends")
        elif shape == "binomial":
            if rank != root and len(received) != 1:
                lines.append(f"rank {rank} received {len(received)} messages: in a binomial tree each rank "
                             "receives the whole buffer once")
        elif shape == "chain":
            pieces = math.ceil(n / chunk_bytes)
            before, after = (root + vr - 1) % p, (root + vr + 1) % p
            if rank != root and ({e["peer"] for e in received} != {before} or len(received) != pieces):
                lines.append(f"rank {rank} received {len(received)} message(s) from rank(s) "
                             f"{sorted({e['peer'] for e in received})}: in the chain it receives {pieces} "
                             f"chunk(s) of at most {chunk_bytes} B, all from rank {before}")
            last = vr == p - 1
            if not last and ({e["peer"] for e in sent} != {after} or len(sent) != pieces):
                lines.append(f"rank {rank} sent {len(sent)} message(s) to rank(s) {sorted({e['peer'] for e in sent})}:"
                             f" in the chain it forwards {pieces} chunk(s), all to rank {after}")
            if last and sent:
                lines.append(f"rank {rank} is the chain's last rank but sent to rank {sent[0]['peer']}")
        elif shape == "ring":
            right, left = (rank + 1) % p, (rank - 1) % p
            wrong = [e for e in sent if e["peer"] != right] + [e for e in received if e["peer"] != left]
            if wrong:
                e = wrong[0]
                lines.append(f"rank {rank} {'sent to' if e['kind'] == 'send' else 'received from'} rank {e['peer']} "
                             f"at step {e['step']}: in the ring each rank sends only to rank {right} and receives "
                             f"only from rank {left}")
            elif len(sent) > p - 1:
                lines.append(f"rank {rank} sent {len(sent)} messages: the ring allgather takes p - 1 = {p - 1} steps")
        elif shape == "scatter":
            got = sum(e["nbytes"] for e in received)
            if rank != root and n >= p and got >= n:
                lines.append(f"rank {rank} received {got} B, the whole buffer or more: a scatter sends each rank "
                             "only the blocks of its subtree (the root's own block never leaves it)")
    if shape == "binomial" and not lines:
        steps = max((e["step"] for log in outcome.logs for e in log), default=0)
        need = math.ceil(math.log2(p)) if p > 1 else 0
        if steps > need:
            last = max((e for log in outcome.logs for e in log if e["kind"] == "recv"), key=lambda e: e["step"])
            lines.append(f"it took {steps} steps; a binomial tree on {p} ranks needs ceil(log2 {p}) = {need} "
                         f"(rank {last['rank']} received at step {steps}, from rank {last['peer']})")
    return lines


def check_bcast(fn, comm=None, *, shape: str | None = None, sizes=AWKWARD_SIZES, roots=None,
                seconds: float = 5.0, kind: str = "bcast", **options) -> str:
    """Run ``fn(buf, root, comm, **options)`` for every root and size; raise CheckFailed naming the first
    fault (which rank got which bytes wrong, at which step, from whom), or return what passed.

    Every rank must call it. A case in which some rank stopped waiting ends the
    check (each such case costs up to ``seconds``); other failing cases are
    listed after the first.
    """
    comm = _world(comm)
    p = comm.Get_size()
    if shape is not None and shape not in SHAPES:
        raise ValueError(f"shape must be one of {SHAPES} or None, got {shape!r}")
    name = getattr(fn, "__name__", "your function")
    roots = range(p) if roots is None else roots
    failures: list[tuple[Outcome, list[str]]] = []
    cases = 0
    for root in roots:
        for nbytes in sizes:
            outcome = bcast_trial(fn, comm, root=root, nbytes=nbytes, seed=1000 * root + nbytes, seconds=seconds,
                                  kind=kind, **options)
            cases += 1
            problems = outcome.problems
            if outcome.ok and shape is not None:
                problems = shape_problems(shape, outcome, p, options.get("chunk_bytes"))
            if problems:
                failures.append((outcome, problems))
                if any("stopped waiting" in line for line in problems):
                    break
        if failures and any("stopped waiting" in line for line in failures[-1][1]):
            break
    if failures:
        outcome, problems = failures[0]
        what = "is wrong" if not outcome.ok else f"gives the right bytes but not in a {shape} pattern"
        extra = ", ".join(f"root {o.root} with {o.nbytes} B" for o, _ in failures[1:6])
        more = f"\nAlso failing: {extra}{' ...' if len(failures) > 6 else ''}" if extra else ""
        raise CheckFailed(f"{name}{_options(options)} {what} on {p} ranks, root {outcome.root}, "
                          f"{outcome.nbytes} B:\n{first_lines(problems)}{more}")
    judged = {"bcast": "", "scatter": " (each rank's own block)", "allgather": " (from each rank's own block)"}[kind]
    return (f"{name}{_options(options)}: right on {p} ranks, {cases} cases (every root; "
            f"{', '.join(map(str, sizes))} B), bit for bit as MPI_Bcast{judged}"
            + (f", a {shape} pattern" if shape else ""))


def _options(options: dict) -> str:
    return "(" + ", ".join(f"{k}={v!r}" for k, v in options.items()) + ")" if options else ""


def check_chain(fn, comm=None, *, chunks=(1000, 4096, 1 << 20), **kwargs) -> str:
    """``check_bcast(shape="chain")`` for chunk sizes that do and do not divide the sizes, and one larger than all."""
    return "\n".join(check_bcast(fn, comm, shape="chain", chunk_bytes=k, **kwargs) for k in chunks)


def check_scatter(fn, comm=None, **kwargs) -> str:
    """``fn(buf, root, comm)`` must leave block ``blocks(n, p)[(rank - root) % p]`` right on every rank."""
    return check_bcast(fn, comm, kind="scatter", shape="scatter", **kwargs)


def check_ring_allgather(fn, comm=None, **kwargs) -> str:
    """``fn(buf, root, comm)``, each rank holding only its own block, must give every rank every block, each
    rank sending only to its right neighbour (rank + 1) % p."""
    return check_bcast(fn, comm, kind="allgather", shape="ring", **kwargs)




def timing(fn, comm=None, *, algorithm: str, nbytes: int = 1 << 20, iters: int = 20, root: int = 0,
           **options) -> dict:
    """Microseconds per broadcast: the learner's ``fn``, the library's ``algorithm`` and MPI_Bcast, same bytes.

    It first checks ``fn`` at that size and root (a wrong or deadlocking function
    raises CheckFailed here instead of hanging the timing loop).
    """
    from gpulab.bcast import bcast

    check_bcast(fn, comm, sizes=(nbytes,), roots=(root,), **options)
    comm = _world(comm).Dup()
    p = comm.Get_size()
    try:
        buf = np.zeros(nbytes, np.uint8)
        yours = seconds_per_call(lambda: fn(buf, root, comm, **options), comm, iters)
        library = seconds_per_call(lambda: bcast(buf, root=root, comm=comm, algorithm=algorithm, **options),
                                    comm, iters)
        native = seconds_per_call(lambda: comm.Bcast([buf, MPI.BYTE], root=root), comm, iters)
    finally:
        comm.Free()
    return {"nbytes": nbytes, "ranks": p, "algorithm": algorithm, "yours_us": yours * 1e6,
            "library_us": library * 1e6, "mpi_bcast_us": native * 1e6}


def chunk_sweep(fn, comm=None, *, nbytes: int = 1 << 22, chunks=(1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22),
                iters: int = 5, machine=None) -> list[dict]:
    """The learner's chain broadcast timed at each chunk size beside the model's prediction for it.

    ``machine``: a ``gpulab.bcast.cost.hockney.Machine``; by default one fitted here by
    ping-pong (``gpulab.bcast.measurement.pingpong_fit``), on the emulated cluster its links.
    """
    from gpulab.bcast.cost.hockney import predict
    from gpulab.bcast.measurement.pingpong_fit import fit_machine, pingpong

    comm = _world(comm).Dup()
    try:
        p = comm.Get_size()
        if machine is None:
            machine = fit_machine(pingpong(comm, [1024, 16384, 1 << 18, 1 << 20]), p=p)
        buf = np.zeros(nbytes, np.uint8)
        rows = []
        for k in chunks:
            seconds = seconds_per_call(lambda k=k: fn(buf, 0, comm, chunk_bytes=k), comm, iters)
            rows.append({"chunk_bytes": k, "measured_ms": seconds * 1e3,
                         "model_ms": predict("chain", nbytes, p, machine, chunk_bytes=k) * 1e3})
    finally:
        comm.Free()
    return rows
