"""Per-call cost of gpulab's broadcast: back-to-back 1 KiB broadcasts, bare comm.Bcast beside gpulab's entries.

    python benchmarks/bcast_calls.py            # p = 2 and 4, writes docs/results/bcast_calls.json
    python benchmarks/bcast_calls.py --ranks 4 --calls 20000 --rounds 7

A framework broadcasting layer after layer calls back to back, with no barrier
between calls, so every microsecond of Python in front of MPI_Bcast adds up.
Each variant runs ``calls`` broadcasts in a loop on every rank; the time per
call is the slowest rank's loop time / calls. Variants are interleaved in
``rounds`` (a burst of load elsewhere hits one round of each) and the median
round is kept. The reference, ``bare``, is ``comm.Bcast`` on the user's own
communicator: what a program gets with no gpulab at all. ``mpi``, ``binomial`` and
``auto`` call ``gpulab.bcast.bcast``, the C entry where it is built (the record's
``bcast_entry``); the ``_py`` rows call the Python entry it falls back to.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "bcast_calls.json"
sys.path.insert(0, str(ROOT))

from mpi_job import rank0_json  # noqa: E402

VARIANTS = ("bare", "python_call", "python_call_checked", "python_binomial", "python_binomial_checked",
            "mpi_py", "binomial_py", "auto_py", "mpi", "binomial", "auto")
TARGETS = {"mpi": 1.1, "binomial": 1.3, "auto": 1.2}  # at most this many times bare, issue 29 section 4
_ndarray = np.ndarray  # as gpulab's fast path reads it


def python_binomial(comm, buf, root: int = 0, status=None) -> None:
    """A plain binomial tree in mpi4py (MPICH's own loop, MPIR_Bcast_intra_binomial), for reference.

    With a ``status`` it checks each receive's size, as gpulab's executor does (`python_binomial_checked`)."""
    p, me = comm.size, comm.rank
    rel = (me - root) % p
    mask = 1
    while mask < p:
        if rel & mask:
            comm.Recv(buf, (me - mask) % p, 0, status)
            if status is not None and status.Get_count() != buf.nbytes:  # in bytes
                raise RuntimeError(f"rank {me}: received {status.Get_count()} bytes of {buf.nbytes}")
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if rel + mask < p:
            comm.Send(buf, (me + mask) % p)
        mask >>= 1


def python_call(buf, root=0, comm=None, algorithm="auto", **options):
    """A Python function with bcast's signature that calls comm.Bcast and nothing else: what one call
    into Python costs, the floor under any front end written in Python (it checks nothing)."""
    comm.Bcast(buf, root)
    return buf


def python_call_checked(buf, root=0, comm=None, algorithm="auto", **options):
    """``python_call`` with the one check gpulab makes on every call of its fast path (a C-contiguous,
    writable numpy array: ``buf.flags.carray``) and the test that tells "mpi" apart: the floor under a
    front end that checks its input."""
    if not options and type(buf) is _ndarray and algorithm == "mpi" and buf.flags.carray:
        comm.Bcast(buf, root)
        return buf
    raise ValueError("not a case this reference handles")


def python_binomial_checked(comm, buf, root: int = 0, status=None) -> None:
    """``python_binomial`` with gpulab's checks: the buffer's flags, each receive's size (``status``)."""
    if not buf.flags.carray:
        raise ValueError("buffer must be C-contiguous and writable")
    python_binomial(comm, buf, root, status)


def in_ranks(calls: int, rounds: int, nbytes: int) -> None:
    import numpy as np
    from mpi4py import MPI

    import gpulab.bcast
    from gpulab.bcast import entry
    from gpulab.bcast.runtime import fastpath
    from gpulab.bcast.selection import auto, tuning

    comm, status = MPI.COMM_WORLD, MPI.Status()
    python_entry = entry.bcast_in_python  # the Python function, which the C entry calls for what it leaves
    buf = np.zeros(nbytes, dtype=np.uint8)
    if comm.rank == 0:
        buf[:] = 7
    # the package attribute on every call, as a program writing gpulab.bcast.bcast(...) calls it
    runs = {"bare": lambda: comm.Bcast(buf, 0),
            "python_call": lambda: python_call(buf, 0, comm, algorithm="mpi"),
            "python_call_checked": lambda: python_call_checked(buf, 0, comm, algorithm="mpi"),
            "python_binomial": lambda: python_binomial(comm, buf, 0),
            "python_binomial_checked": lambda: python_binomial_checked(comm, buf, 0, status),
            "mpi_py": lambda: python_entry(buf, 0, comm, algorithm="mpi"),
            "binomial_py": lambda: python_entry(buf, 0, comm, algorithm="binomial"),
            "auto_py": lambda: python_entry(buf, 0, comm),
            "mpi": lambda: gpulab.bcast.bcast(buf, 0, comm, algorithm="mpi"),
            "binomial": lambda: gpulab.bcast.bcast(buf, 0, comm, algorithm="binomial"),
            "auto": lambda: gpulab.bcast.bcast(buf, 0, comm)}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            for _ in range(calls // 10):  # warm-up: plans made, caches filled
                run()
            comm.Barrier()
            t0 = MPI.Wtime()
            for _ in range(calls):
                run()
            elapsed = comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
            times[name].append(elapsed / calls)
    assert int(buf.sum()) == 7 * nbytes, f"rank {comm.rank}: the broadcasts did not deliver"
    if comm.rank == 0:
        decision = auto.select(nbytes, comm)
        print(json.dumps({"p": comm.size, "nbytes": nbytes, "calls": calls, "rounds": rounds,
                          "tuning_file": str(tuning.table_path()),
                          "auto_chose": {"algorithm": decision.name, "source": decision.source},
                          **entry.entry_record(), "fastpath": fastpath.status(),
                          "us": {k: statistics.median(v) * 1e6 for k, v in times.items()},
                          "rounds_us": {k: [t * 1e6 for t in v] for k, v in times.items()}}))


def front_end(calls: int, rounds: int, nbytes: int) -> dict:
    """Microseconds per call on a one-rank communicator (COMM_SELF), where MPI_Bcast returns at once and no
    other rank's scheduling enters: what gpulab's front end adds is the difference to ``bare``. Loops of
    1000 calls, the entries interleaved, ``rounds * 8`` times; the least of each (quiet moments)."""
    import timeit

    import numpy as np
    from mpi4py import MPI

    import gpulab.bcast
    from gpulab.bcast import entry

    comm, buf = MPI.COMM_SELF, np.zeros(nbytes, dtype=np.uint8)
    python_entry = entry.bcast_in_python
    runs = {"bare": lambda: comm.Bcast(buf, 0),
            "python_call": lambda: python_call(buf, 0, comm, algorithm="mpi"),
            "python_call_checked": lambda: python_call_checked(buf, 0, comm, algorithm="mpi"),
            "mpi_py": lambda: python_entry(buf, 0, comm, algorithm="mpi"),
            "auto_py": lambda: python_entry(buf, 0, comm),
            "mpi": lambda: gpulab.bcast.bcast(buf, 0, comm, algorithm="mpi"),
            "binomial": lambda: gpulab.bcast.bcast(buf, 0, comm, algorithm="binomial"),
            "auto": lambda: gpulab.bcast.bcast(buf, 0, comm)}
    best = {name: float("inf") for name in runs}
    for run in runs.values():
        run()
    for _ in range(rounds * 8):
        for name, run in runs.items():
            best[name] = min(best[name], timeit.timeit(run, number=1000) / 1000 * 1e6)
    return best


def table(rows: list[dict]) -> str:
    """Microseconds per call, then each variant's ratio to ``bare`` (the targets beside gpulab's entries)."""
    others = VARIANTS[1:]
    lines = ["| p | " + " | ".join(VARIANTS) + " | " + " | ".join(f"{k} / bare" for k in others) + " |",
             "|---|" + "---|" * (len(VARIANTS) + len(others))]
    for r in rows:
        us, bare = r["us"], r["us"]["bare"]
        ratios = " | ".join(f"{us[k] / bare:.2f}" + (f" (target <= {TARGETS[k]})" if k in TARGETS else "")
                            for k in others)
        lines.append(f"| {r['p']} | " + " | ".join(f"{us[k]:.2f}" for k in VARIANTS) + f" | {ratios} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="2,4", help="process counts (default 2,4)")
    parser.add_argument("--calls", type=int, default=20000, help="broadcasts per timed loop")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds; the median is kept")
    parser.add_argument("--bytes", type=int, default=1024, help="message size (default 1 KiB)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--in-ranks", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.in_ranks:
        in_ranks(args.calls, args.rounds, args.bytes)
        return 0
    rows = []
    for p in (int(x) for x in args.ranks.split(",")):
        load = os.getloadavg()[0]
        row = rank0_json(__file__, p, ["--in-ranks", "--calls", str(args.calls), "--rounds", str(args.rounds),
                                       "--bytes", str(args.bytes)])
        row.update(load_before=load, load_after=os.getloadavg()[0], cpus=os.cpu_count())
        rows.append(row)
    print(table(rows))
    single = front_end(args.calls, args.rounds, args.bytes)
    print("one rank (COMM_SELF), us per call: " + ", ".join(f"{k} {v:.2f}" for k, v in single.items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    from gpulab.records import provenance

    args.out.write_text(json.dumps({"provenance": provenance(__doc__),
                                    "command": "python benchmarks/bcast_calls.py " + " ".join(sys.argv[1:]),
                                    "rows": rows, "one_rank_us": single}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
