"""In the ranks: the remembered (fast) path of repeated broadcasts keeps every check of the API, and the
bench's OSU / nccl-tests options (tests/bcast/test_fast_path.py)."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

import gpulab.bcast


def _raises(call) -> str:
    try:
        call()
    except (TypeError, ValueError) as error:
        return type(error).__name__
    return "nothing raised"


def repeated_calls_keep_their_checks(world: MPI.Comm, algorithm: str) -> dict:
    """After a plan exists for (comm, algorithm, root, 1 KiB), bad buffers of that size still raise, and
    other dtypes of that size still arrive bit for bit."""
    expected = np.arange(128, dtype=np.float64)
    for _ in range(3):  # the first call makes the plan, the others take it
        buf = expected.copy() if world.rank == 0 else np.zeros(128)
        gpulab.bcast.bcast(buf, 0, world, algorithm=algorithm)
        assert np.array_equal(buf, expected), f"rank {world.rank}: wrong data on a repeated call"
    read_only = np.zeros(128)
    read_only.flags.writeable = False
    strided = np.zeros(256)[::2]  # 1 KiB too, but not contiguous
    fortran = np.asfortranarray(np.zeros((8, 16)))  # 1 KiB, contiguous in memory, but not in C order
    objects = np.array([object()] * 128)  # 1 KiB of pointers: they must never travel
    out = {"read_only": _raises(lambda: gpulab.bcast.bcast(read_only, 0, world, algorithm=algorithm)),
           "strided": _raises(lambda: gpulab.bcast.bcast(strided, 0, world, algorithm=algorithm)),
           "fortran": _raises(lambda: gpulab.bcast.bcast(fortran, 0, world, algorithm=algorithm)),
           "objects": _raises(lambda: gpulab.bcast.bcast(objects, 0, world, algorithm=algorithm))}
    for dtype in ("float16", "datetime64[s]", "V8"):  # MPI maps the first, not the others: same bytes arrive
        source = np.frombuffer(expected.tobytes(), dtype=dtype)
        buf = source.copy() if world.rank == 0 else np.zeros_like(source)
        gpulab.bcast.bcast(buf, 0, world, algorithm=algorithm)
        out[dtype] = buf.tobytes() == expected.tobytes()
    out["package_attribute_kept"] = "bcast" in vars(gpulab.bcast)
    out["entry"] = which_entry()
    return out


def which_entry() -> str:
    """Which entry ``gpulab.bcast.bcast`` is: "c" (fastpath.c, configured) or "python"."""
    from gpulab.bcast import entry

    c = entry._c is not None and gpulab.bcast.bcast is entry._c.bcast
    assert c == (entry.entry_record()["bcast_entry"] == "c"), entry.entry_record()
    return "c" if c else "python"


def entry_after_broadcasts(world: MPI.Comm) -> dict:
    """The entry every name points to after two binomial broadcasts, and the fast path's status."""
    from gpulab.bcast import entry
    from gpulab.bcast.runtime import fastpath

    for _ in range(2):
        buf = np.arange(128.0) if world.rank == 0 else np.zeros(128)
        gpulab.bcast.bcast(buf, 0, world, algorithm="binomial")
        assert np.array_equal(buf, np.arange(128.0)), f"rank {world.rank}: wrong data"
    c = entry._c.bcast if entry._c is not None else None
    return {"status": fastpath.status(), "entry": which_entry(), **entry.entry_record(),
            "c_everywhere": c is not None and gpulab.bcast.bcast is entry.bcast is c
            and entry.ALGORITHMS["binomial"].func is c,
            "python_everywhere": gpulab.bcast.bcast is entry.bcast is entry.bcast_in_python
            and entry.ALGORITHMS["binomial"].func is entry.bcast_in_python}


def ranks_on_different_paths_meet(world: MPI.Comm, algorithm: str) -> list[bool]:
    """MPI's own Bcast with the ranks on different paths: the odd ranks pass what only the checked path
    takes (a bytearray, a numpy integer root), the even ranks a numpy array and an int root, which
    the fast path takes. Both paths must call MPI_Bcast on the same communicator, or the ranks wait
    for each other forever. Returns, per round, whether this rank holds the root's bytes."""
    comm, ok = world.Dup(), []
    for round_ in range(3):
        expected = np.arange(128, dtype=np.float64) + round_
        odd = comm.rank % 2 == 1
        buf = (bytearray(expected.tobytes()) if comm.rank == 0 else bytearray(1024)) if odd else \
            (expected.copy() if comm.rank == 0 else np.zeros(128))
        root = np.int64(0) if odd else 0
        gpulab.bcast.bcast(buf, root, comm, algorithm=algorithm)
        ok.append(bytes(buf) == expected.tobytes())
    comm.Free()
    return [*ok, which_entry()]


def measure_with_options(world: MPI.Comm, algorithm: str, **kwargs) -> dict:
    from gpulab.bcast.measurement.measure import measure_bcast

    return measure_bcast(world, algorithm, 4096, iters=20, warmup=2, **kwargs)


def check_catches_a_broken_algorithm(world: MPI.Comm) -> dict:
    """--check validates every iteration: an 'algorithm' that moves nothing fails every one."""
    from gpulab.bcast.entry import ALGORITHMS
    from gpulab.bcast.measurement.measure import measure_bcast

    ALGORITHMS["does_nothing"] = lambda buf, root, comm: buf
    try:
        return measure_bcast(world, "does_nothing", 100, iters=4, warmup=1, validate=False, check=True)
    finally:
        del ALGORITHMS["does_nothing"]


def repeated_binomial_follows_switches(world: MPI.Comm) -> dict:
    """The lean loop of a repeated schedule: every call records while tracing is on (no plan is made
    there) and the fast path resumes after it, checking switched on is obeyed at once (the plans are
    forgotten), and a sender of another size is caught on the receiving rank."""
    from gpulab.bcast import entry
    from gpulab.bcast.runtime import argument_check, trace
    from gpulab.bcast.runtime.executor import BcastSizeError

    def call(nbytes=1024, root=0):
        buf = np.full(nbytes, 5, np.uint8) if world.rank == root else np.zeros(nbytes, np.uint8)
        gpulab.bcast.bcast(buf, root, world, algorithm="binomial")
        return buf

    for _ in range(3):
        assert call().min() == 5, f"rank {world.rank}: wrong data on a repeated call"
    with trace.tracing() as events:
        for _ in range(3):
            call()
        planned_while_tracing = len(entry._plans)
    out = {"traced": len(events), "planned_while_tracing": planned_while_tracing}
    for _ in range(2):
        assert call().min() == 5, f"rank {world.rank}: wrong data after tracing"
    out["planned_after"] = len(entry._plans)
    out["entry"] = which_entry()
    argument_check.checking(True)
    try:
        call(root=world.rank % 2)
        out["mismatch"] = "nothing raised"
    except argument_check.BcastArgumentMismatch:
        out["mismatch"] = "BcastArgumentMismatch"
    finally:
        argument_check.checking(False)
    world.Barrier()
    for name, nbytes in (("larger", 2048), ("smaller", 512)):  # the root sends another size than planned
        try:
            call(nbytes=nbytes if world.rank == 0 else 1024)
            out[name] = "nothing raised"
        except BcastSizeError as error:
            out[name] = str(error)
        world.Barrier()
    return out


def plans_carry_their_c_copy(world: MPI.Comm) -> list[bool]:
    """A plan made by a call of the Python entry (before any call of the C one) still gets the C copy of its
    steps, so that the C entry runs it: per root, whether every remembered binomial plan has one."""
    from gpulab.bcast import entry

    out = []
    for root in (0, world.size - 1):
        for _ in range(2):
            buf = np.arange(128.0) if world.rank == root else np.zeros(128)
            entry.bcast_in_python(buf, root, world, algorithm="binomial")
            assert np.array_equal(buf, np.arange(128.0)), f"rank {world.rank}: root {root}"
        out.append(all(plan[2] is not None for key, plan in entry._plans.items() if key[2] == root))
    return out


def report_entry_on_this_mpi(outdir: str) -> None:
    """Run directly on the ranks of any MPI's launcher (tests/bcast/test_c_entry.py, Open MPI): broadcast
    with mpi, binomial and auto, try an object array, and write rank{r}.json into ``outdir`` (the ranks'
    printed lines can interleave)."""
    import json
    from pathlib import Path

    from gpulab.bcast import entry
    from gpulab.bcast.runtime import fastpath

    world = MPI.COMM_WORLD
    ok = []
    for name in ("mpi", "binomial", "auto"):
        for _ in range(3):
            buf = np.arange(128.0) if world.rank == 0 else np.zeros(128)
            gpulab.bcast.bcast(buf, 0, world, algorithm=name)
            ok.append(bool(np.array_equal(buf, np.arange(128.0))))
    objects = _raises(lambda: gpulab.bcast.bcast(np.array([object()] * 128), 0, world, algorithm="binomial"))
    report = {"rank": world.rank, "library": MPI.Get_library_version(), "entry": which_entry(), "correct": all(ok),
              "objects": objects, "c_plans": [plan[2] is not None for plan in entry._plans.values()],
              "reason": fastpath.status()["reason"]}
    Path(outdir, f"rank{world.rank}.json").write_text(json.dumps(report))
