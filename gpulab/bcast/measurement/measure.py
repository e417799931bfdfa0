"""OSU-style broadcast measurement, shared by the CLI, the notebooks and the tuner.

Conventions follow osu_bcast and nccl-tests: a validated broadcast first,
warm-up iterations, then timed iterations with a barrier after each (so one
iteration's stragglers do not overlap the next); each rank's mean time,
reported as the average, minimum and maximum over ranks, and percentiles of
the per-iteration times; algbw = bytes/time and busbw = algbw for a broadcast
(all data must leave the root). ``back_to_back`` drops the barriers (a
framework's loop), ``check`` validates every iteration, ``dtype`` types the
buffer. 'mpi' on host buffers is the bare ``comm.Bcast`` on the caller's
communicator. docs/bench_schema.md describes the record.

    summary = measure_bcast(comm, "chain", 1 << 20, chunk_bytes=65536)   # on every rank
    measure_bcast(comm, "chain", 1 << 20, device="cupy")   # GPU buffers; summary["path"] says how
    measure_bcast(comm, "nccl", 1 << 20)                    # NCCL's broadcast, on GPU buffers

``device`` is "host" (numpy), "cupy" or "fake" (``gpulab.fakedevice``, for
CPU tests of the GPU code path). The summary's ``path`` says how the bytes
reached MPI: "host", "cuda-aware", "staged" (see ``gpulab.bcast.runtime.gpu``) or "nccl".
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from gpulab.backend import copy_from_host, empty_bytes, to_host
from gpulab.bcast.entry import ALGORITHMS, in_use, option_names
from gpulab.bcast.measurement.nccl import nccl_bcast
from gpulab.bcast.runtime.gpu import DEVICE_OPTIONS, path_of
from gpulab.bcast.selection.auto import select
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())


def osu_iterations(nbytes: int) -> tuple[int, int]:
    """(timed, warm-up) iterations as in OSU: 1000/100 up to 8 KiB, 100/10 above."""
    return (1000, 100) if nbytes <= 8192 else (100, 10)


def applicable_options(algorithm: str, options: dict) -> dict:
    """The subset of ``options`` that ``algorithm`` takes, so one sweep can pass chunk/radix to all."""
    # auto's options would override those of whatever it chooses: it takes the device options only
    accepted = () if algorithm == "nccl" else DEVICE_OPTIONS if algorithm == "auto" else \
        option_names(algorithm) + DEVICE_OPTIONS
    return {k: v for k, v in options.items() if k in accepted and v is not None}


@lru_cache(maxsize=2)  # a sweep in rounds validates each point twice a round (salts 1 and 2), size by size
def _pattern(nbytes: int, salt: int) -> np.ndarray:
    pattern = ((np.arange(nbytes, dtype=np.uint32) * 2654435761 + salt) >> 13).astype(np.uint8)
    pattern.flags.writeable = False  # shared by every call that asks for it
    return pattern


def _fill(comm, raw, root: int, salt: int) -> np.ndarray:
    """Put the root's pattern in its buffer and its complement everywhere else; return the pattern."""
    expected = _pattern(raw.nbytes, salt)
    copy_from_host(raw, expected if comm.rank == root else ~expected)
    return expected


def _validated_run(comm, run, buf, raw, root: int, salt: int) -> bool:
    expected = _fill(comm, raw, root, salt)
    run(buf)
    return bool(np.array_equal(to_host(raw), expected))


def _broadcast_function(algorithm: str, device: str, options: dict):
    """(bcast_fn(buf, root, comm, **options), device, entry): NCCL runs on CuPy buffers only; 'mpi' on host
    buffers is the bare ``comm.Bcast`` on the caller's communicator (entry "comm.Bcast"), the reference a
    program gets without gpulab; everything else goes through gpulab's front end (entry "gpulab")."""
    if algorithm == "nccl":
        if options:
            raise TypeError(f"the nccl baseline takes no options, got {sorted(options)}")
        if device not in ("host", "cupy"):
            raise ValueError("the nccl baseline runs on CuPy buffers (device='cupy')")
        return nccl_bcast, "cupy", "nccl"
    if algorithm == "mpi" and device == "host" and not options:
        return (lambda buf, root, comm: comm.Bcast(buf, root)), device, "comm.Bcast"
    bcast = in_use()  # the entry itself (C where built), not the first call's hand-over
    if algorithm == "auto":
        return (lambda buf, root, comm, **options: bcast(buf, root, comm, "auto", **options)), device, "gpulab"
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown broadcast algorithm {algorithm!r}; valid names: "
                         f"{sorted(ALGORITHMS) + ['auto', 'nccl']}")
    return ALGORITHMS[algorithm], device, "gpulab"


def typed(raw, dtype: str):
    """The byte buffer as an array of ``dtype`` (what the broadcast is handed: MPI sees its datatype)."""
    itemsize = np.dtype(dtype).itemsize
    if raw.nbytes % itemsize:
        raise ValueError(f"{raw.nbytes} B is not a whole number of {dtype} ({itemsize} B each)")
    return raw.view(dtype)


def measure_bcast(comm, algorithm: str, nbytes: int, *, root: int = 0, iters: int | None = None,
                  warmup: int | None = None, validate: bool = True, time_budget: float | None = None,
                  device: str = "host", dtype: str = "uint8", check: bool = False,
                  back_to_back: bool = False, **options) -> dict:
    """Time ``algorithm`` on ``comm`` (collective: call on every rank); same summary on every rank.

    ``time_budget`` (seconds) caps the timed iterations so that a sweep of
    large messages on a laptop finishes: the count is cut to what the warm-up
    rate predicts fits in the budget, never below 5. The count used is reported.
    ``dtype``: the buffer's element type (``nbytes`` must hold a whole number).
    ``check``: validate every timed iteration (OSU's -c, nccl-tests' -c), the
    fill and the comparison outside the timed region; ``errors`` counts the failed ones.
    ``back_to_back``: no barrier between iterations (a framework's loop of
    broadcasts); each rank's per-iteration times are then its calls' times.
    Percentiles (p50/p90/p99) are over iterations of the slowest rank's time.
    """
    bcast_fn, device, entry = _broadcast_function(algorithm, device, options)
    osu_timed, osu_warm = osu_iterations(nbytes)
    iters = osu_timed if iters is None else iters
    warmup = osu_warm if warmup is None else warmup
    if options:
        def run(b):
            bcast_fn(b, root, comm, **options)
    else:
        def run(b):
            bcast_fn(b, root, comm)
    raw = empty_bytes(nbytes, device)
    buf = typed(raw, dtype)
    path = "nccl" if algorithm == "nccl" else path_of(raw, options.get("path", "auto"))
    valid = _validated_run(comm, run, buf, raw, root, salt=1) if validate else True

    comm.Barrier()
    start = MPI.Wtime()
    for _ in range(warmup):
        run(buf)
        if not back_to_back:
            comm.Barrier()
    if time_budget is not None and warmup:
        per_iter = comm.allreduce((MPI.Wtime() - start) / warmup, op=MPI.MAX)
        iters = max(min(iters, int(time_budget / per_iter)), min(iters, 5))

    times = np.zeros(max(iters, 1))
    errors = 0
    comm.Barrier()
    loop_start = MPI.Wtime()
    for i in range(iters):
        if check:
            expected = _fill(comm, raw, root, salt=3 + i)
            if back_to_back:  # the fill must not overtake a rank still sending the last iteration
                comm.Barrier()
        t0 = MPI.Wtime()
        run(buf)
        times[i] = MPI.Wtime() - t0
        if check:
            errors += not np.array_equal(to_host(raw), expected)
        if not back_to_back:
            comm.Barrier()
    loop = MPI.Wtime() - loop_start
    if validate:
        valid &= _validated_run(comm, run, buf, raw, root, salt=2)

    chose = {}
    if algorithm == "auto":  # what select() decided for this size: the record says what was timed
        decision = select(nbytes, comm)
        chose = {"chose": {"algorithm": decision.name, "options": decision.options, "source": decision.source,
                           "reason": decision.reason}}
    # back to back, a rank's mean is its loop over the calls (what a framework waits for); with barriers,
    # its timed calls only (OSU's convention)
    mean = (loop if back_to_back and not check else float(times[:iters].sum())) / max(iters, 1)
    avg = comm.allreduce(mean, op=MPI.SUM) / comm.size
    slowest = np.empty_like(times)
    comm.Allreduce(times, slowest, op=MPI.MAX)
    p50, p90, p99 = (float(np.percentile(slowest[:max(iters, 1)], q)) * 1e6 for q in (50, 90, 99))
    algbw = nbytes / avg / 1e9 if avg > 0 else 0.0
    errors = comm.allreduce(errors, op=MPI.MAX)
    return {
        "algorithm": algorithm, "entry": entry, "nbytes": nbytes, "dtype": dtype,
        "count": nbytes // np.dtype(dtype).itemsize, "p": comm.size, "root": root, "options": options,
        "iters": iters, "warmup": warmup, "mode": "back-to-back" if back_to_back else "barrier",
        "avg_us": avg * 1e6, "min_us": comm.allreduce(mean, op=MPI.MIN) * 1e6,
        "max_us": comm.allreduce(mean, op=MPI.MAX) * 1e6, "p50_us": p50, "p90_us": p90, "p99_us": p99,
        "algbw_GBps": algbw, "busbw_GBps": algbw,  # broadcast: busbw = algbw (nccl-tests)
        "check": check, "errors": errors,
        "valid": bool(comm.allreduce(valid, op=MPI.LAND)) and errors == 0,
        "device": device, "path": "+".join(sorted(set(comm.allgather(path)))),  # ranks may differ
        **chose,
    }

