"""Rank functions for the multi-rank broadcast tests (run through tests.mpi_harness)."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from gpulab.bcast import ALGORITHMS, bcast, gather_trace, option_names, tracing
from tests.mpi_steps import step

# (dtype, shape): every numeric kind, 16-bit types, empty and awkward sizes, nd shapes
PAYLOADS = [
    ("uint8", (0,)), ("int8", (1,)), ("float16", (7,)), ("int16", (3, 5, 7)), ("uint16", (513,)),
    ("int32", (1000,)), ("float32", (4, 1001)), ("float64", (3, 2, 1999)), ("int64", (257,)),
    ("complex64", (33,)), ("complex128", (2, 2, 2, 129)), ("bool", (11,)),
]

# option sets per algorithm: chunk sizes that do not divide the messages, several radices and node sizes
VARIANTS = {
    "knomial": [{}, {"radix": 2}, {"radix": 3}, {"radix": 8}],
    "binary_tree": [{}, {"chunk_bytes": 7}, {"chunk_bytes": 1000}],
    "split_binary_tree": [{}, {"chunk_bytes": 5}, {"chunk_bytes": 999}],
    "chain": [{}, {"chunk_bytes": 3}, {"chunk_bytes": 1024}],
    "hierarchical": [{}, {"ranks_per_node": 1}, {"ranks_per_node": 2, "inter": "chain", "intra": "linear",
                                                  "inter_options": {"chunk_bytes": 100}},
                     {"ranks_per_node": 3, "inter": "mpi", "intra": "scatter_allgather_ring"},
                     {"ranks_per_node": 4, "inter": "knomial", "intra": "mpi"}],
}


# Chunks of a few bytes exercise every pipeline path (first, middle, short last chunk) on small
# payloads already; on the 96 KB ones they cost ~45,000 messages per hop and minutes of suite time.
TINY_CHUNK, SMALL_PAYLOAD = 64, 2048  # chunks below TINY_CHUNK bytes run on payloads of <= SMALL_PAYLOAD bytes

# The algorithms see bytes only (run_algorithm takes every buffer's byte view first): all PAYLOADS'
# dtypes and shapes run with each algorithm's default options, and the other option sets take the
# sizes that fall differently on their chunks: empty; 1 byte; 11 (whole chunks of 3, 5 or 7 and a
# short last one, less than one larger chunk); 210 = 2*3*5*7 (whole tiny chunks only); 1026 (a whole
# chunk of 999, 1000 or 1024 and a short one); 4000 (four chunks of 1000); 95952 (two 64 KiB default
# chunks, a hundred of 1000). The sizes left out (14, 264, 2056, 16016, 16512) fall on no new place.
VARIANT_PAYLOADS = [PAYLOADS[i] for i in (0, 1, 11, 3, 4, 5, 7)]


def runs(options: dict, nbytes: int) -> bool:
    """Whether a case with these options (chunk_bytes, staging_chunk_bytes, ...) is worth its messages."""
    chunks = [v for k, v in options.items() if k.endswith("chunk_bytes")]
    return nbytes <= SMALL_PAYLOAD or min(chunks, default=TINY_CHUNK) >= TINY_CHUNK


def _payload(dtype: str, shape: tuple, seed: int) -> np.ndarray:
    """Random bytes reinterpreted as ``dtype``: covers NaN and every bit pattern, so only a bitwise compare is fair."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)
    if dtype == "bool":
        raw &= 1
    return raw.view(dtype).reshape(shape)


def communicators(world: MPI.Comm):
    """(name, communicator, roots): COMM_WORLD, a Dup of it, COMM_SELF and (for p > 2) an odd/even split,
    as in mpi4py's own tests; every root, but one on the Dup: it has world's ranks in world's order, so
    each root would run world's schedules again; what it adds is another communicator (another private
    duplicate, messages that must not meet world's)."""
    dup = world.Dup()
    comms = [("world", world, range(world.size)), ("dup", dup, [world.size - 1]), ("self", MPI.COMM_SELF, [0])]
    if world.size > 2:
        split = world.Split(world.rank % 2, -world.rank)
        comms.append(("split", split, range(split.size)))
    return comms


def check_algorithm(world: MPI.Comm, algorithm: str) -> dict:
    """Every communicator x root x payload x option set, compared bitwise with what MPI_Bcast delivers:
    the root's bytes, which every rank makes itself from the case's seed (no MPI_Bcast per case).

    A case that delivers wrong bytes is counted, not raised: the ranks stay in step (wrong bytes do not
    change the messages), so one job checks every algorithm and each test reads its own algorithm's
    count. Returns {"checked": cases, "wrong": the first few cases this rank got wrong}.
    """
    checked, wrong = 0, []
    for comm_name, comm, roots in communicators(world):
        for root in roots:
            for variant in VARIANTS.get(algorithm, [{}]):
                for dtype, shape in PAYLOADS if not variant else VARIANT_PAYLOADS:
                    if not runs(variant, int(np.prod(shape)) * np.dtype(dtype).itemsize):
                        continue
                    where = f"{algorithm} on {comm_name} (p={comm.size}) root={root} {variant} {dtype}{shape}"
                    step(where)
                    expected = _payload(dtype, shape, seed=PAYLOADS.index((dtype, shape)) + 1000 * root)
                    buf = expected.copy() if comm.rank == root else np.zeros_like(expected)
                    out = ALGORITHMS[algorithm](buf, root, comm, **variant)
                    assert out is buf, "the algorithm must return the buffer it was given"
                    if buf.tobytes() != expected.tobytes() and len(wrong) < 3:
                        first = np.flatnonzero(buf.view(np.uint8).ravel() != expected.view(np.uint8).ravel())[:1]
                        wrong.append(f"{where}: rank {world.rank} differs from MPI_Bcast at byte {first}")
                    checked += 1
    return {"checked": checked, "wrong": wrong}


def check_every_algorithm(world: MPI.Comm, planted: str | None = None) -> dict:
    """check_algorithm for every algorithm in one job (one mpiexec start per process count, not per case).

    ``planted``: an algorithm whose non-root ranks get their first byte flipped after each broadcast,
    the proof that a wrong algorithm fails its own tests and no other's.
    """
    if planted:
        _plant_flipped_byte(planted)
    return {algorithm: check_algorithm(world, algorithm) for algorithm in sorted(ALGORITHMS)}


def _plant_flipped_byte(algorithm: str) -> None:
    correct = ALGORITHMS[algorithm]

    def flipped(buf, root, comm, **options):
        correct(buf, root, comm, **options)
        if comm.rank != root and buf.nbytes:
            buf.view(np.uint8).reshape(-1)[0] ^= 1
        return buf
    ALGORITHMS[algorithm] = flipped


AUTO_SIZES = (0, 100, 12288, 600_000)  # around MPICH's switch points


def check_auto(world: MPI.Comm, make=lambda expected, is_root: expected.copy() if is_root else np.zeros_like(expected),
               read=lambda buf: buf) -> list:
    """``algorithm="auto"`` moves the data correctly and runs what ``select`` decided, around the switch points.

    ``make(expected, is_root)`` builds each rank's buffer (host by default), ``read(buf)`` brings it to the host.
    Returns (nbytes, the decision's algorithm, source and reason, the algorithms the trace saw) per size,
    on rank 0.
    """
    from gpulab.bcast import gather_trace, select, tracing

    chosen = []
    for nbytes in AUTO_SIZES:
        expected = _payload("uint8", (nbytes,), seed=nbytes)
        buf = make(expected, world.rank == 0)
        with tracing() as events:
            assert bcast(buf, comm=world) is buf
        assert read(buf).tobytes() == expected.tobytes(), nbytes
        ran = gather_trace(events, world)
        if ran is not None:
            decision = select(nbytes, world)
            chosen.append((nbytes, decision.name, decision.source, decision.reason,
                           sorted({e["algorithm"] for e in ran})))
    return chosen


def size_mismatch(world: MPI.Comm, algorithm: str, extra_bytes: int, nbytes: int = 1000) -> None:
    """The last rank passes a buffer of a different size; it must raise (the harness then aborts the job)."""
    n = nbytes + (extra_bytes if world.rank == world.size - 1 else 0)
    buf = np.full(n, world.rank, dtype=np.uint8)
    options = {"chunk_bytes": 300} if "chunk_bytes" in option_names(algorithm) else {}
    ALGORITHMS[algorithm](buf, 0, world, **options)


def user_messages_untouched(world: MPI.Comm) -> list:
    """Messages of the user's own, pending on the same communicator with any tag (gpulab's included),
    are neither taken nor disturbed by broadcasts, pipelined or not."""
    from gpulab.bcast.runtime.executor import LAST_TAG, TAG

    tags = [TAG, LAST_TAG, 7]
    sent = [world.isend(f"user {tag}", dest=1, tag=tag) for tag in tags] if world.rank == 0 else []
    for algorithm, options in [("chain", {"chunk_bytes": 300}), ("binary_tree", {"chunk_bytes": 500}),
                               ("binomial", {})]:
        buf = np.full(1200, 5 if world.rank == 0 else 0, np.uint8)
        ALGORITHMS[algorithm](buf, 0, world, **options)
        assert (buf == 5).all(), algorithm
    got = [world.recv(source=0, tag=tag) for tag in reversed(tags)] if world.rank == 1 else []
    assert got == [f"user {tag}" for tag in reversed(tags)][:len(got)]
    MPI.Request.waitall(sent)
    return len(got)


def freed_communicators_free_their_duplicates(world: MPI.Comm) -> int:
    """Each communicator broadcast over gets a private duplicate; freeing it frees that too."""
    from gpulab.bcast.runtime import executor

    before = len(executor._private)
    for _ in range(100):
        comm = world.Dup()
        bcast(np.zeros(10), comm=comm, algorithm="chain")
        comm.Free()
    return len(executor._private) - before


def trace_pattern(world: MPI.Comm, algorithm: str, nbytes: int, options: dict) -> list | None:
    """The gathered trace of one broadcast (on rank 0)."""
    buf = np.ones(nbytes, np.uint8) if world.rank == 0 else np.zeros(nbytes, np.uint8)
    with tracing() as events:
        ALGORITHMS[algorithm](buf, 0, world, **options)
    assert buf.all()
    return gather_trace(events, world)


def measure(world: MPI.Comm, algorithm: str, nbytes: int) -> dict:
    from gpulab.bcast.measurement.measure import measure_bcast

    return measure_bcast(world, algorithm, nbytes, iters=5, warmup=2)


def measure_a_broken_algorithm(world: MPI.Comm) -> bool:
    """An 'algorithm' that moves nothing must be reported invalid, not timed as fast."""
    from gpulab.bcast.measurement.measure import measure_bcast

    ALGORITHMS["does_nothing"] = lambda buf, root, comm: buf
    try:
        return measure_bcast(world, "does_nothing", 100, iters=2, warmup=1)["valid"]
    finally:
        del ALGORITHMS["does_nothing"]


def mismatched_call(world: MPI.Comm, differ: str) -> str:
    """In check mode, rank 1 calls the broadcast differently; every rank must raise, none may hang."""
    from gpulab.bcast import BcastArgumentMismatch
    from gpulab.bcast.runtime.argument_check import checking

    call = {"algorithm": "chain", "root": 0, "chunk_bytes": 256}
    if world.rank == 1:
        call.update({"root": {"root": 2}, "algorithm": {"algorithm": "binomial"},
                     "options": {"chunk_bytes": 512}}[differ])
    algorithm, root = call.pop("algorithm"), call.pop("root")
    checking(True)
    buf = np.zeros(1000, np.uint8)
    try:
        ALGORITHMS[algorithm](buf, root, world, **call)
    except BcastArgumentMismatch as error:
        return str(error)
    finally:
        checking(False)
    raise AssertionError("the mismatch went unnoticed")


def repeated_calls(world: MPI.Comm, table: str) -> list:
    """Repeated broadcasts take the remembered fast path: still correct for every round and root,
    still refusing a read-only buffer, forgotten when the communicator is freed, and ``auto``
    decided again after ``reload()`` (here: a tuning table that names ``linear``)."""
    import json
    import os

    from gpulab.bcast import entry
    from gpulab.bcast.selection.auto import reload

    os.environ["GPULAB_TUNING_TABLE"] = table + ".absent"  # nothing known: MPI_Bcast
    reload()
    comm = world.Dup()
    expected = _payload("float64", (129,), seed=1)
    buf = expected.copy() if comm.rank == 0 else np.zeros_like(expected)
    with tracing() as events:  # what auto runs, over all ranks (only senders record); no plan is kept
        bcast(buf, 0, comm)
    first_auto = sorted(set().union(*comm.allgather({e["algorithm"] for e in events})))
    assert buf.tobytes() == expected.tobytes()
    for round_ in range(4):
        for root in (0, world.size - 1):
            for algorithm in ("auto", "binomial", "chain", "mpi"):
                expected = _payload("float64", (129,), seed=round_ * 10 + root)
                buf = expected.copy() if comm.rank == root else np.zeros_like(expected)
                ALGORITHMS[algorithm](buf, root, comm) if algorithm != "auto" else bcast(buf, root, comm)
                assert buf.tobytes() == expected.tobytes(), (round_, root, algorithm)
    read_only = np.zeros(129)
    read_only.flags.writeable = False
    try:
        bcast(read_only, 0, comm)
    except ValueError as error:
        assert "read-only" in str(error)
    else:
        raise AssertionError("a read-only buffer was accepted on the fast path")
    try:
        bcast(np.zeros(258)[::2], 0, comm)  # the remembered size, strided
    except ValueError as error:
        assert "C-contiguous" in str(error)
    else:
        raise AssertionError("a strided buffer was accepted on the fast path")
    for other in (np.arange(258, dtype=np.int32), np.arange(1032, dtype=np.uint8).reshape(8, 129)):
        buf = other.copy() if comm.rank == 0 else np.zeros_like(other)  # same bytes, another dtype or shape
        bcast(buf, 0, comm)
        assert buf.tobytes() == other.tobytes(), other.dtype
    remembered = (sum(1 for key in entry._plans if key[0] == id(comm)),
                  sorted(n for n, comms in entry._auto_native.items() if any(c is comm for c in comms)))
    comm.Free()
    forgotten = (not any(key[0] == id(comm) for key in entry._plans)
                 and not any(c is comm for comms in entry._auto_native.values() for c in comms))
    bcast(np.zeros(129), 0, world)  # remembered on world: MPI_Bcast
    if world.rank == 0:
        entry = {"lo": 0, "hi": None, "algorithm": "linear", "options": {}, "why": "test", "measured_at": [1032]}
        with open(table, "w") as f:
            json.dump({"version": 1, "models": {}, "tables": {str(world.size): {"ranges": [entry]}}}, f)
    world.Barrier()
    os.environ["GPULAB_TUNING_TABLE"] = table
    reload()
    buf = np.ones(129) if world.rank == 0 else np.zeros(129)
    with tracing() as events:
        bcast(buf, 0, world)
        bcast(buf, 0, world)
    assert buf.all()
    return [first_auto, remembered, forgotten, sorted(set().union(*world.allgather({e["algorithm"] for e in events})))]
