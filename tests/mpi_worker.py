"""One rank of a ``tests.mpi_harness.run_mpi`` job (see there).

argv: OUTDIR MODULE:FUNCTION JSON_KWARGS. Writes OUTDIR/rank{r}.json with the
outcome and OUTDIR/rank{r}.progress with the steps reached. A rank that raises
ends the whole job as ``gpulab`` commands do (``gpulab.launch.run_on_ranks``), so
its peers cannot hang waiting for it, and the abort leaves no MPI scratch files
(the harness would otherwise wait seconds to tell them from a running job's).
``run_calls`` is the rank function of ``tests.mpi_harness.batched_jobs``.
"""

import importlib
import json
import sys
import traceback
from pathlib import Path

from mpi4py import MPI

from gpulab.launch import run_on_ranks
from tests import mpi_steps
from tests.mpi_steps import step


def main() -> None:
    outdir, target, kwargs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    comm = MPI.COMM_WORLD
    mpi_steps.open_log(Path(outdir, f"rank{comm.rank}.progress"))
    run_on_ranks(run_and_record, comm, Path(outdir, f"rank{comm.rank}.json"), target, kwargs)


def run_and_record(comm: MPI.Comm, result_path: Path, target: str, kwargs: dict) -> None:
    try:
        _write(result_path, {"ok": True, "result": _function(target)(comm, **kwargs)})
    except BaseException:
        _write(result_path, {"ok": False, "traceback": traceback.format_exc()})
        raise  # run_on_ranks prints it and aborts the job


def run_calls(comm: MPI.Comm, calls: dict) -> dict:
    """The calls {name: [target, kwargs]} of one ``tests.mpi_harness.batched_jobs`` job, in turn, each on
    its own duplicate of ``comm`` (a call that raised on some ranks only cannot take its peers' messages
    into the next call: they wait for it until the job's timeout). Returns {name: outcome} per rank."""
    outcomes = {}
    for name, (target, kwargs) in calls.items():
        step(f"{name}: begins")
        own = comm.Dup()
        try:
            outcomes[name] = {"ok": True, "result": _function(target)(own, **kwargs)}
        except Exception as error:  # noqa: BLE001 - the test of this call reads it; the next call runs
            outcomes[name] = {"ok": False, "traceback": traceback.format_exc()}
            step(f"{name} raised {type(error).__name__}: {error}")
        own.Free()
    return outcomes


def _function(target: str):
    module_name, func_name = target.split(":")
    return getattr(importlib.import_module(module_name), func_name)


def _write(result_path: Path, record: dict) -> None:
    # write then rename: a peer's abort can kill this rank mid-write, and a half file would hide the error
    partial = result_path.with_suffix(".partial")
    partial.write_text(json.dumps(record))
    partial.rename(result_path)


if __name__ == "__main__":
    main()
