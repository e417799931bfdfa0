"""What gpulab runs on each engine: GPU pinning and the watchdog that records where a task hangs.

These functions are shipped to the engines by ``Engines.run``; they import MPI
there, never in the notebook kernel.
"""

from __future__ import annotations

import faulthandler
import os
import re
import socket
import sys
from pathlib import Path


def pin_gpu(comm=None) -> dict:
    """Learn the node-local rank and make one GPU visible to this rank; return where it runs.

    Must run before CUDA is initialised (before cupy allocates anything): the CUDA
    runtime reads CUDA_VISIBLE_DEVICES once. GPUs are counted from the driver's
    /proc entries, because asking CUDA would initialise it.
    """
    from mpi4py import MPI

    comm = comm or MPI.COMM_WORLD
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)  # the ranks sharing this node's memory
    local_rank, local_size = local.Get_rank(), local.Get_size()
    local.Free()
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if not visible and "CUDA_VISIBLE_DEVICES" not in os.environ:
        gpus = Path("/proc/driver/nvidia/gpus")
        visible = [str(i) for i in range(len(list(gpus.iterdir())))] if gpus.is_dir() else []
    gpu = None
    if visible:
        gpu = visible[local_rank % len(visible)]
        if "cupy" in sys.modules:
            raise RuntimeError("pin_gpu() ran after cupy was imported: CUDA may already use GPU 0")
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    return {"rank": comm.Get_rank(), "host": socket.gethostname(), "pid": os.getpid(),
            "local_rank": local_rank, "local_size": local_size, "gpu": gpu}


def watched(fn, args, kwargs, timeout, what, dump_file):
    """Run fn; if it still runs after timeout s, write its stack to dump_file.

    faulthandler's watchdog is a C thread, so it fires even while the main thread
    is blocked inside an MPI call, which is exactly when we need the stack.
    """
    with open(dump_file, "w") as f:
        f.write(f"{what}\n")
        f.flush()
        faulthandler.dump_traceback_later(timeout, file=f)
        try:
            return fn(*args, **kwargs)
        finally:
            faulthandler.cancel_dump_traceback_later()


def stuck_at(dump_file: Path, frames: int = 4) -> str:
    """The innermost frames of the task from a faulthandler dump ("File ..., line N in f"), innermost first."""
    text = Path(dump_file).read_text() if Path(dump_file).exists() else ""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", text)
    task = [b for b in blocks if "in watched" in b]  # the thread running our task
    lines = [ln.strip() for ln in (task[0] if task else "").splitlines() if ln.strip().startswith("File")]
    inner = lines[:next((i for i, ln in enumerate(lines) if ln.endswith("in watched")), len(lines))]
    return " <- ".join(inner[:frames]) if inner else "no stack recorded"
