"""What every record a command writes says about the run: when, what command, where, with which MPI and
which entry of the broadcast (C or Python)."""

from __future__ import annotations

import datetime
import os
import platform
import sys

from gpulab.bcast.entry import entry_record
from gpulab.jobsite import topology_metadata
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())


def metadata(ranks: int) -> dict:
    """Date, command line (without the internal ``--inner-out``), ranks, host, CPU and cores, Python, MPI,
    the broadcast's entry ("bcast_entry": "c" or "python", and why not C), topology.

    Call it inside the MPI job (it asks the MPI library for its version).
    """
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "gpulab " + " ".join(a for a in sys.argv[1:] if not a.startswith("--inner-out")
                                            and "gpulab-tune-" not in a),
            "ranks": ranks, "host": platform.node(), "cpu": platform.processor() or platform.machine(),
            "cores": len(os.sched_getaffinity(0)), "python": platform.python_version(),
            "mpi": " ".join(MPI.Get_library_version().split()[:3]), **entry_record(), **topology_metadata()}
