"""Check for exercise 6: ping-pong, a fit of alpha and beta, and a broadcast predicted with them.

    check_alpha_beta((pingpong, fit_alpha_beta, predict_bcast), comm)   # on every rank
    prediction_vs_measured((pingpong, fit_alpha_beta, predict_bcast), comm)

The learner's functions: ``pingpong(comm, nbytes, iters)`` -> one-way seconds
per message between ranks 0 and 1 (on rank 0); ``fit_alpha_beta(sizes, seconds)``
-> (alpha, beta) of t = alpha + n beta; ``predict_bcast(algorithm, nbytes, p,
alpha, beta, chunk_bytes=None)`` -> seconds for "linear", "binomial" or "chain".
The references: the pattern a ping-pong must send, exact synthetic data, and
``gpulab.bcast.cost.hockney.predict`` on a machine with that one link.
"""

from __future__ import annotations

import math
import time

import numpy as np

from gpulab.exercises.report import CheckFailed, raised
from gpulab.exercises.traffic import Stuck, Traffic
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())

SYNTHETIC = ((2e-6, 1e-10), (40e-6, 8e-9))  # (alpha s, beta s/B): a fast node's link, a 1 Gbit/s network
SIZES = (8, 1024, 65536, 1 << 20, 4 << 20)
FIT_TOLERANCE = 1e-6  # exact data: any least-squares line recovers them to rounding


def _pingpong_problems(fn, comm, nbytes: int, iters: int, seconds: float) -> list[str]:
    me = comm.Get_rank()
    lines = []
    with Traffic(comm, seconds) as traffic:
        t0 = time.perf_counter()
        try:
            result = fn(traffic.comm, nbytes, iters)
        except Stuck as stuck:
            result, lines = None, [f"rank {me} stopped waiting: {stuck}"]
        except Exception as error:  # noqa: BLE001 - the learner's error is the finding
            result, lines = None, [f"rank {me} raised {raised(error, fn)}"]
        elapsed = time.perf_counter() - t0
    want = {0: [("send", 1), ("recv", 1)] * iters, 1: [("recv", 0), ("send", 0)] * iters}.get(me, [])
    got = [(e["kind"], e["peer"]) for e in traffic.log]
    if not lines and got != want:
        k = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        lines.append(f"rank {me}'s message {k} is {got[k] if k < len(got) else 'missing'}, a ping-pong of "
                     f"{iters} round trips has {want[k] if k < len(want) else 'nothing more'} there")
    sizes = {e["nbytes"] for e in traffic.log}
    if not lines and sizes - {nbytes}:
        lines.append(f"rank {me} sent or received {sorted(sizes)} B messages, not {nbytes} B")
    if not lines and me == 0:
        one_way = elapsed / (2 * iters)
        ratio = (result or 0) / one_way if isinstance(result, (int, float)) and one_way > 0 else float("nan")
        if not 0.3 <= ratio <= 1.05:
            hint = " (the round trip, not one way?)" if 1.5 <= ratio <= 2.2 else \
                " (all iterations, not one?)" if ratio > 2.2 else ""
            lines.append(f"rank 0 returned {result!r} s for {nbytes} B; the call took {elapsed * 1e6:.0f} us for "
                         f"{iters} round trips, about {one_way * 1e6:.1f} us per one-way message{hint}")
    return lines


def _fit_problem(fn) -> str | None:
    n = np.array(SIZES, float)
    for alpha, beta in SYNTHETIC:
        t = alpha + n * beta
        try:
            a, b = (float(v) for v in fn(list(SIZES), list(t)))
        except Exception as error:  # noqa: BLE001
            return f"fit_alpha_beta raised {raised(error, fn)}"
        if abs(a - alpha) > FIT_TOLERANCE * alpha + 1e-15 or abs(b - beta) > FIT_TOLERANCE * beta:
            swapped = " (alpha and beta swapped?)" if math.isclose(a, beta, rel_tol=1e-3) else ""
            return (f"on exact data t = {alpha * 1e6:g} us + n x {beta * 1e9:g} ns/B at sizes {list(SIZES)} "
                    f"fit_alpha_beta gave alpha {a * 1e6:.4g} us, beta {b * 1e9:.4g} ns/B{swapped}")
    return None


def _predict_problem(fn) -> str | None:
    from gpulab.bcast.cost.hockney import Link, Machine, predict

    for alpha, beta in SYNTHETIC:
        machine = Machine("one link", Link.plain(alpha, beta), Link.plain(alpha, beta))
        for algorithm, options in (("linear", {}), ("binomial", {}), ("chain", {"chunk_bytes": 65536})):
            for p in range(2, 9):
                for nbytes in (1024, 1 << 20):
                    want = predict(algorithm, nbytes, p, machine, **options)
                    try:
                        got = float(fn(algorithm, nbytes, p, alpha, beta, **options))
                    except Exception as error:  # noqa: BLE001
                        return f"predict_bcast({algorithm!r}, {nbytes}, {p}, ...) raised {raised(error, fn)}"
                    if not math.isclose(got, want, rel_tol=1e-6):
                        steps = want / (alpha + min(nbytes, options.get("chunk_bytes", nbytes)) * beta)
                        return (f"predict_bcast({algorithm!r}, {nbytes}, p={p}, alpha={alpha * 1e6:g} us, "
                                f"beta={beta * 1e9:g} ns/B{', chunk_bytes=65536' if options else ''}) gave "
                                f"{got * 1e6:.4g} us; the model gives {want * 1e6:.4g} us = {steps:.4g} x "
                                f"(alpha + {'chunk' if options else 'n'} x beta)")
    return None


def check_alpha_beta(functions, comm=None, *, seconds: float = 5.0) -> str:
    """``functions`` = (pingpong, fit_alpha_beta, predict_bcast); raise CheckFailed naming the first fault."""
    if comm is None:

        comm = MPI.COMM_WORLD
    pingpong, fit, predict_fn = functions
    lines = []
    for nbytes in (8, 65536):
        lines += [line for per_rank in comm.allgather(_pingpong_problems(pingpong, comm, nbytes, 5, seconds))
                  for line in per_rank]
        if lines:
            break
    problem = _fit_problem(fit)
    if problem:
        lines.append(problem)
    problem = _predict_problem(predict_fn)
    if problem:
        lines.append(problem)
    if lines:
        raise CheckFailed("\n".join(lines))
    return ("pingpong sends the right messages and times one way; fit_alpha_beta recovers alpha and beta from "
            "exact data; predict_bcast agrees with gpulab's model for linear, binomial and chain, p = 2..8")


def prediction_vs_measured(functions, comm=None, *, nbytes: int = 1 << 20, iters: int = 10) -> dict:
    """The learner's ping-pong on this machine, their fit, their prediction of a binomial broadcast of nbytes,
    and the library's binomial broadcast measured (rank 0's numbers on every rank)."""
    from gpulab.bcast import bcast

    pingpong, fit, predict_fn = functions
    comm = comm or MPI.COMM_WORLD
    seconds = [comm.bcast(pingpong(comm, n, 20), root=0) for n in SIZES]
    alpha, beta = (float(v) for v in fit(list(SIZES), seconds))
    p, buf, times = comm.Get_size(), np.zeros(nbytes, np.uint8), []
    for _ in range(iters):
        comm.Barrier()
        t0 = MPI.Wtime()
        bcast(buf, root=0, comm=comm, algorithm="binomial")
        times.append(comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
    return {"alpha_us": alpha * 1e6, "beta_ns_per_byte": beta * 1e9, "nbytes": nbytes, "ranks": p,
            "predicted_binomial_us": float(predict_fn("binomial", nbytes, p, alpha, beta)) * 1e6,
            "measured_binomial_us": float(np.median(times)) * 1e6}
