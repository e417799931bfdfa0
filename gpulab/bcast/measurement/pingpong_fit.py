"""Fit alpha and beta from ping-pong measurements between rank pairs, per level.

Rank 0 ping-pongs with every other rank (OSU osu_latency style: one-way time
= round trip / 2) over a range of sizes, twice: with mpi4py's Send/Recv (what
MPI's own collectives pay) and through gpulab's ``Group.send/recv`` (what the
Python algorithms pay); the difference is the per-message Python overhead.
Pairs on one (real or emulated) node fit the intra-node link, pairs across
nodes the inter-node link. Least squares minimises the relative error, so a
1 us message counts as much as a 1 ms one. The protocol switch (MPICH: eager
below 8 KiB, single-copy above) is the MPI library's documented threshold by
default, with alpha and beta fitted on each side; ``switch="auto"`` finds it in
the data instead, keeping the best split only if it cuts the residual sum of
squares of one straight line at least 2.5-fold (5% noise reaches about 2).

    gpulab tune fit -n 2 --no-save                   # print the fit and its residuals
    machine = fit_machine(pingpong(comm, SIZES), p=comm.size)   # on every rank
"""

from __future__ import annotations

import math
import os
import statistics
import time

import numpy as np

from gpulab.bcast.algorithms.hierarchical import node_of_rank
from gpulab.bcast.cost.hockney import Machine
from gpulab.bcast.entry import run_algorithm
from gpulab.bcast.runtime.executor import Group
from gpulab.lazy_mpi import lazy_mpi
from gpulab.machines import Link, LinkLevel
from gpulab.machines.linefit import relative_line

MPI = lazy_mpi(globals())

SIZES = [8, 64, 512, 1024, 2048, 4096, 6144, 8191, 8192, 12288, 16384, 32768, 65536, 131072, 262144,
         524288, 1 << 20, 2 << 20, 4 << 20, 16 << 20, 64 << 20]  # up to the largest broadcast predicted
# MPICH ch4 (the mpich wheel, 4.x/5.0): from this size an intra-node message goes single-copy
# through CMA (the receiver reads the sender's memory with process_vm_readv) instead of
# through 8 KiB eager cells: MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD, default 8192 (`mpivars`)
MPICH_SINGLE_COPY = 8192
SPLIT_GAIN = 2.5  # how much better (in RSS) two regimes must fit than one line to be believed
PYTHON_PATH_MAX = 65536  # the Python overhead is per message: measure it where it is visible
_TAG = 26467


def _exchange(comm, me: int, peer: int, buf, iters: int, via: str) -> float:
    """One-way seconds per message, from ``iters`` round trips (timed on the initiating rank)."""
    g = Group(comm, list(range(comm.size)), comm.rank)
    send = (lambda b, dst: g.send(dst, b, "pingpong", 0)) if via == "python" else \
        (lambda b, dst: comm.Send([b, MPI.BYTE], dst, _TAG))
    recv = (lambda b, src: g.recv(src, b)) if via == "python" else \
        (lambda b, src: comm.Recv([b, MPI.BYTE], src, _TAG))
    start = MPI.Wtime()
    for _ in range(iters):
        if me == 0:
            send(buf, peer)
            recv(buf, peer)
        else:
            recv(buf, peer)
            send(buf, peer)
    return (MPI.Wtime() - start) / iters / 2


def pingpong(comm, sizes=SIZES, *, ranks_per_node: int | None = None, time_budget: float = 0.01,
             repeats: int = 5) -> list[dict]:
    """Ping-pong rank 0 <-> every other rank (collective; the same samples are returned on every rank).

    Ranks not in the current pair wait in a barrier, as idle ranks wait inside
    MPI during a broadcast, so oversubscription shows in the numbers. Each
    point is the fastest of ``repeats`` timed loops: other processes on the
    machine can only add time, so the minimum is the least disturbed estimate.
    """
    node = node_of_rank(comm, ranks_per_node)
    samples = []
    for peer in range(1, comm.size):
        level = "intra" if node[peer] == node[0] else "inter"
        for nbytes in sizes:
            buf = np.zeros(nbytes, np.uint8)
            for via in ("mpi", "python") if nbytes <= PYTHON_PATH_MAX else ("mpi",):
                if comm.rank in (0, peer):
                    other = peer if comm.rank == 0 else 0
                    _exchange(comm, comm.rank, other, buf, 2, via)  # warm-up
                    probe = _exchange(comm, comm.rank, other, buf, 3, via)
                    if comm.rank == 0:  # rank 0 sizes the loop to the time budget and tells its peer
                        iters = max(3, min(1000, int(time_budget / max(2 * probe, 1e-7))))
                        comm.send(iters, dest=peer, tag=_TAG)
                    else:
                        iters = comm.recv(source=0, tag=_TAG)
                    times = [_exchange(comm, comm.rank, other, buf, iters, via) for _ in range(repeats)]
                    if comm.rank == 0:
                        samples.append({"peer": peer, "level": level, "nbytes": nbytes, "via": via,
                                        "seconds": min(times), "iters": iters})
                comm.Barrier()
    return comm.bcast(samples, root=0)


def call_overhead(repeats: int = 5, calls: int = 2000) -> float:
    """Seconds of Python in one ``bcast`` call before any message: a 0-byte broadcast on COMM_SELF
    (argument checks, byte view, group set-up), fastest of ``repeats`` loops. No communication."""
    buf = np.empty(0, np.uint8)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            run_algorithm("binomial", buf, 0, MPI.COMM_SELF)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def _lsq(n: np.ndarray, t: np.ndarray) -> LinkLevel:
    """The relative-error line through the points, with alpha and beta clamped to >= 0."""
    alpha, beta = relative_line(n, t)
    if alpha < 0 <= beta:  # the small points came faster than the line: keep its slope, clamp alpha
        # A rate limiter's burst (tbf lets its first 32 KB pass at full speed) or socket buffers do
        # this: t = (n - burst) / rate. The slope is the link's rate; a refit through the origin
        # would bend it to the burst-helped points and make the link look faster than it is.
        alpha = 0.0
    if beta < 0:  # pure latency
        alpha, beta = float(len(t) / np.sum(1 / t)), 0.0
    return LinkLevel(float(alpha), float(beta))


def _rss(h: LinkLevel, n, t) -> float:
    return float(np.sum(((h.alpha + h.beta * n) - t) ** 2 / t ** 2))


def fit_link(nbytes, seconds, *, switch: int | str | None = "auto", min_points: int = 3) -> tuple[Link, dict]:
    """Fit one link; ``switch="auto"`` tries every two-regime split and keeps one only if it fits much better.

    Returns the link and a report: residuals per point and the RMS relative error.
    """
    n, t = np.asarray(nbytes, float), np.asarray(seconds, float)
    order = np.argsort(n)
    n, t = n[order], t[order]
    options = [(None, _lsq(n, t), None)]
    splits = sorted(set(n)) if switch == "auto" else [] if switch is None else [switch]
    for s in splits:
        low, high = n < s, n >= s
        if low.sum() >= min_points and high.sum() >= min_points:
            options.append((int(s), _lsq(n[low], t[low]), _lsq(n[high], t[high])))

    def rss(option) -> float:
        s, small, large = option
        return _rss(small, n, t) if s is None else _rss(small, n[n < s], t[n < s]) + _rss(large, n[n >= s], t[n >= s])

    # trying every split finds a "switch" in pure noise (5% noise: up to 2x less RSS); a real
    # protocol switch leaves a systematic kink, so a split must cut the RSS at least 2.5-fold
    s, small, large = min(options, key=rss)
    if switch == "auto" and s is not None and rss((s, small, large)) * SPLIT_GAIN > rss(options[0]):
        s, small, large = options[0]
    if switch not in ("auto", None) and len(options) > 1:  # a given switch: two regimes whenever possible
        s, small, large = options[1]
    link = Link(small, large, s, receiver_copies=s is not None)
    fitted = np.array([link.regime(x).time(x) for x in n])
    residuals = [{"nbytes": int(x), "measured_us": y * 1e6, "fitted_us": f * 1e6, "rel_err": (f - y) / y}
                 for x, y, f in zip(n, t, fitted)]
    rms = float(np.sqrt(np.mean(((fitted - t) / t) ** 2)))
    return link, {"residuals": residuals, "rms_rel_err": rms, "switch": s}


def library_switch() -> int | None:
    """The MPI library's eager/single-copy switch: MPICH's CVAR (or its default), None for other MPIs."""
    if not MPI.Get_library_version().startswith("MPICH"):
        return None
    return int(os.environ.get("MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD", MPICH_SINGLE_COPY))


def fit_machine(samples: list[dict], *, p: int, cores: int | None = None, ranks_per_node: int | None = None,
                name: str | None = None, switch: int | str | None = "library", call: float = 0.0) -> Machine:
    """A ``Machine`` from ping-pong samples: a link per level, the Python overhead and the core count.

    ``switch``: "library" (the MPI library's documented protocol switch; alpha and
    beta are still fitted on each side of it), "auto" (find it in the data),
    None (one regime) or a byte count.
    """
    cores = cores or len(os.sched_getaffinity(0))
    if switch == "library":
        switch = library_switch()
    links, reports = {}, {}
    for level in ("intra", "inter"):
        rows = [s for s in samples if s["level"] == level and s["via"] == "mpi"]
        if rows:
            sizes, seconds = [r["nbytes"] for r in rows], [r["seconds"] for r in rows]
            links[level], reports[level] = fit_link(sizes, seconds, switch=switch)
            # the plain textbook line through the same points, for comparison (model.textbook)
            line, _ = fit_link(sizes, seconds, switch=None)
            reports[level]["one_line"] = {"alpha": line.small.alpha, "beta": line.small.beta}
    if not links:
        raise ValueError("no ping-pong samples to fit (a fit needs at least 2 ranks)")
    one_level = len(links) == 1
    intra = links.get("intra", links.get("inter"))
    inter = links.get("inter", intra)
    raw = {(s["peer"], s["nbytes"]): s["seconds"] for s in samples if s["via"] == "mpi"}
    extra = [s["seconds"] - raw[s["peer"], s["nbytes"]] for s in samples if s["via"] == "python"]
    overhead = max(0.0, statistics.median(extra)) if extra else 0.0
    notes = {"fit": reports, "python_overhead_samples_us": [e * 1e6 for e in extra],
             "levels": ("one level measured: intra- and inter-node links are the same fit" if one_level else
                        "pairs on one emulated node fit 'intra', across emulated nodes 'inter'; on one "
                        "machine both are the same hardware"),
             "samples": samples}
    return Machine(name or f"fitted on {p} ranks", intra, inter, ranks_per_node, overhead, cores, p, notes, call)


def summary(machine: Machine) -> str:
    """Human-readable alpha/beta per level and regime, with the fit's RMS relative error."""
    lines = [f"{machine.name}: Python overhead {machine.overhead * 1e6:.2f} us/message and "
             f"{machine.call * 1e6:.2f} us/call, {machine.cores} cores"]
    for level in ("intra", "inter"):
        link, report = getattr(machine, level), machine.notes.get("fit", {}).get(level)
        regimes = [("all sizes" if link.switch is None else f"< {link.switch} B", link.small)]
        if link.switch is not None:
            regimes.append((f">= {link.switch} B", link.large))
        text = ", ".join(f"{label}: alpha {h.alpha * 1e6:.2f} us, beta {h.beta * 1e9:.4f} ns/B "
                         f"({1 / h.beta / 1e9 if h.beta else math.inf:.1f} GB/s)" for label, h in regimes)
        rms = f" (RMS error {report['rms_rel_err']:.0%})" if report else " (not measured: same as intra)"
        lines.append(f"  {level}: {text}{rms}")
    return "\n".join(lines)
