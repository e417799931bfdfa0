"""One rank of a ``tests.mpi_harness.run_mpi`` job (see there).

argv: OUTDIR MODULE:FUNCTION JSON_KWARGS. Writes OUTDIR/rank{r}.json with the
outcome and OUTDIR/rank{r}.progress with the steps reached. A rank that raises
aborts the whole job, so its peers cannot hang waiting for it.
"""

import importlib
import json
import sys
import traceback
from pathlib import Path

from mpi4py import MPI

from tests import mpi_steps


def main() -> None:
    outdir, target, kwargs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    comm = MPI.COMM_WORLD
    result_path = Path(outdir, f"rank{comm.rank}.json")
    mpi_steps.open_log(Path(outdir, f"rank{comm.rank}.progress"))
    try:
        module_name, func_name = target.split(":")
        func = getattr(importlib.import_module(module_name), func_name)
        result = func(comm, **kwargs)
        record = {"ok": True, "result": result}
    except BaseException:  # noqa: BLE001 - report everything, then abort the job
        record = {"ok": False, "traceback": traceback.format_exc()}
    # write then rename: a peer's abort can kill this rank mid-write, and a half file would hide the error
    partial = result_path.with_suffix(".partial")
    partial.write_text(json.dumps(record))
    partial.rename(result_path)
    if not record["ok"]:
        sys.stderr.write(f"rank {comm.rank}: {record['traceback']}")
        sys.stderr.flush()
        comm.Abort(1)


if __name__ == "__main__":
    main()
