"""``gpulab bench bcast`` with native variants: one MPI job per variant, their rows merged into one report.

``run_jobs`` (outside any job) starts a job for gpulab's own algorithms and a
job per ``mpi:<MPICH algorithm>``, each with the control variables that force
it (``gpulab.bcast.measurement.native_variants.environment``); ``measure_variant`` is what
a variant's job runs: the plain MPI_Bcast, under the name of the variant.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from gpulab.bcast.measurement import native_variants
from gpulab.cli.bench_rounds import measure_rounds, snapshot_env
from gpulab.launch import relaunch
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())


def run_jobs(args, algorithms: list[str], native: list[str], report) -> int:
    """A job for the Python algorithms (if any), then one per native variant, each with the machine's state
    read just before it and, without --rounds, a share of --budget by its number of algorithms; one table of
    them all, written by ``report(args, records, p, metadata, sweeps)`` (``gpulab.cli.bench.report``)."""
    groups = [([a for a in algorithms if a not in native], {})] if len(native) < len(algorithms) else []
    groups += [([name], native_variants.environment(name, chunk_bytes=args.chunk_bytes, radix=args.radix))
               for name in native]
    records, sweeps, meta, failed = [], [], None, 0
    with tempfile.TemporaryDirectory(prefix="gpulab-bench-") as tmp:
        for i, (names, env) in enumerate(groups):
            out = os.path.join(tmp, f"job{i}.json")
            if not args.quiet:
                print(f"gpulab bench bcast: job {i + 1}/{len(groups)}: {','.join(names)}"
                      + "".join(f" {k}={v}" for k, v in env.items() if k != native_variants.ENV),
                      file=sys.stderr, flush=True)
            # the last --algorithms and --budget win: this job measures only its group, in its share of the time
            share = ["--budget", str(args.budget * len(names) / len(algorithms))] if args.rounds is None else []
            code = relaunch(args.ranks, [*sys.argv[1:], "--algorithms", ",".join(names), *share, "--inner-out", out],
                            env={**env, **snapshot_env(args.ranks)})
            if not os.path.exists(out):
                print(f"gpulab bench bcast: the job for {','.join(names)} failed (exit {code})", file=sys.stderr)
                return code or 1
            failed |= code != 0
            with open(out) as f:
                job = json.load(f)
            records += job["records"]
            sweeps += job["sweeps"]
            meta = meta or job["metadata"]
    meta = {**meta, "command": "gpulab " + " ".join(sys.argv[1:]),
            "jobs": [{"algorithms": names, "environment": env} for names, env in groups]}
    return report(args, records, args.ranks, meta, sweeps) or int(failed)


def measure_variant(comm, args, algorithms: list[str], native: list[str], report) -> int:
    """Inside a variant's job: time MPI_Bcast, which MPICH's control variables force to the variant, in the
    same rounds as any other point."""
    from gpulab.bcast.entry import entry_record
    from gpulab.records import metadata

    forced = os.environ.get(native_variants.ENV)
    name = native[0]
    row = native_variants.variant_name(name, args.chunk_bytes, args.radix) if len(algorithms) == 1 else None
    if row is None or forced != row:
        if comm.rank == 0:
            print(f"gpulab bench bcast: error: {','.join(native)} must each run in a job of its own, started with "
                  f"the variables that force it (MPICH reads them at MPI_Init): run gpulab bench outside an "
                  f"MPI job and it starts those jobs", file=sys.stderr)
        return 2
    try:
        native_variants.check_library(MPI.Get_library_version(), name)
    except ValueError as e:
        if comm.rank == 0:
            print(f"gpulab bench bcast: error: {e}", file=sys.stderr)
        return 2
    records, sweep = measure_rounds(comm, args, ["mpi"])  # in rounds, as the other job's points
    forcing = {k: v for k, v in os.environ.items() if k.startswith("MPIR_CVAR_BCAST")}
    for r in records:
        r.update(algorithm=row, options=forcing)
    sweep["algorithms"] = [row]
    return report(args, records, comm.size, metadata(comm.size, **entry_record()), [sweep]) if comm.rank == 0 else 0
