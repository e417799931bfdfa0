"""Find and run ``mpiexec``: the one beside this Python (the ``mpich`` wheel) by default.

A cluster user points gpulab at the site's MPI with ``GPULAB_MPIEXEC``
(for example ``srun`` or ``/opt/cray/pe/mpich/bin/mpiexec``); extra launcher
flags go in ``GPULAB_MPIEXEC_ARGS``. ``relaunch`` is how a ``gpulab`` command
started outside an MPI job re-runs itself on N ranks; ``pin_gpu`` gives each
rank of a job the GPU of its node-local rank (engines, ``gpulab train``,
``gpulab bench``); ``first_ranks`` runs work on part of a job.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import termios
import time
import traceback
from pathlib import Path

from gpulab import jobsite
from gpulab.lazy_mpi import lazy_mpi
from gpulab.procfs import mpi_scratch_held, remove_files

MPI = lazy_mpi(globals())

# Environment variables that MPI launchers set in every rank they start.
_LAUNCHER_VARS = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")
# Set by ``relaunch`` in the job it starts: a launcher that sets none of the above must not make
# a command re-launch itself again and again.
LAUNCHED = "GPULAB_LAUNCHED"
# One BLAS/OpenMP thread per rank of a job of several (as torchrun does): its ranks share the machine's
# cores, and with OpenBLAS's default of a thread per core n ranks ran n x cores threads.
THREAD_LIMITS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def find_mpiexec() -> str:
    override = os.environ.get("GPULAB_MPIEXEC")
    if override:
        return override
    beside_python = Path(sys.executable).parent / "mpiexec"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if found is None:
        raise FileNotFoundError(
            "no mpiexec found: install the MPI wheel (`pip install mpich`), load your site's MPI "
            "module, or set GPULAB_MPIEXEC to the launcher")
    return found


def mpiexec_command(n: int, python_args: list[str]) -> list[str]:
    """The argv that starts ``python *python_args`` on ``n`` ranks.

    Where a cluster is entered (``with EmulatedCluster(...)``) or named by $GPULAB_CLUSTER, the ranks
    go to its nodes, launched as its state file says (see gpulab.jobsite).
    """
    if n < 1:
        raise ValueError(f"number of ranks must be >= 1, got {n}")
    cluster = jobsite.launch_state()
    if cluster is not None:
        return jobsite.mpiexec_command(cluster, n, [sys.executable, *python_args])
    launcher = shlex.split(find_mpiexec())
    extra = shlex.split(os.environ.get("GPULAB_MPIEXEC_ARGS", ""))
    return [*launcher, "-n", str(n), *extra, sys.executable, *python_args]


def inside_mpi_job() -> bool:
    """True when this process was started by an MPI launcher (checked without initialising MPI)."""
    return any(var in os.environ for var in (*_LAUNCHER_VARS, LAUNCHED))


def relaunch(n: int, argv: list[str], env: dict | None = None) -> int:
    """Run ``gpulab *argv`` on ``n`` ranks (``mpiexec_command``), wait for it and return its exit code.

    ``env`` adds variables to this process's environment for the job. Ctrl-C
    (SIGINT) and SIGTERM reach the job once, through mpiexec, which hands them
    to every rank: ``gpulab train`` then saves a checkpoint and stops. (mpiexec
    runs in its own process group; a terminal's Ctrl-C would otherwise reach it
    twice, and hydra takes a second Ctrl-C as "abort now".)
    """
    proc = subprocess.Popen(mpiexec_command(n, ["-m", "gpulab.cli", *argv]), env=job_environment(n, env),
                            start_new_session=True)
    forward = lambda signum, frame: proc.send_signal(signum)  # noqa: E731
    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if proc.poll() is None:  # this process is failing: do not leave the job behind
            proc.kill()
            proc.wait()


def job_environment(n: int, env: dict | None = None) -> dict:
    """The environment of a job of ``n`` ranks that ``relaunch`` starts: this process's with ``env``
    added, and, for n > 1, ``THREAD_LIMITS`` where the user set no limit of their own."""
    return {**(THREAD_LIMITS if n > 1 else {}), **os.environ, **(env or {}), LAUNCHED: "1"}


def run_on_ranks(main, *args) -> int:
    """Call ``main(*args)`` on every rank of a job; an exception on any rank ends the whole job.

    MPI gives a rank that raises no way to tell its peers, which would wait for
    it forever: the failing rank prints one line (and the traceback, unless it
    is a plain ``SystemExit`` message) and calls ``MPI_Abort``.
    """
    try:
        return main(*args)
    except BaseException as err:  # noqa: BLE001 - whatever it is, the peers must not block
        if isinstance(err, SystemExit) and err.code in (None, 0):
            raise
        what = err.code if isinstance(err, SystemExit) else f"{type(err).__name__}: {err}"
        report = "" if isinstance(err, SystemExit) else traceback.format_exc()
        report += f"gpulab: rank {MPI.COMM_WORLD.rank} failed ({what}); ending the job\n"
        _write_before_abort(report)
        _remove_node_scratch()
        MPI.COMM_WORLD.Abort(1)


def _write_before_abort(report: str, grace: float = 3) -> None:
    """Write ``report`` to stderr and wait (at most ``grace`` s) until the launcher has read it.

    On ``MPI_Abort`` hydra kills the job without reading what is left in the
    ranks' output pipes: written line by line and followed at once by the abort,
    a traceback can arrive cut after its first line.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    data = report.encode(errors="replace")
    while data:
        data = data[os.write(2, data):]
    deadline = time.monotonic() + grace
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                continue  # a file or terminal has it already
            while _unread_bytes(fd) and time.monotonic() < deadline:
                time.sleep(0.01)


def _unread_bytes(fd: int) -> int:
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def _remove_node_scratch() -> None:
    """Remove this node's MPI scratch files (``gpulab.procfs.MPI_SCRATCH``) before aborting, which would leave them.

    The ranks' shared memory is mapped by every rank of the node already (the
    mappings outlive the name); hydra's topology file is held open by this
    rank's parent, the node's proxy, which removes it only when the job ends
    cleanly. Ranks on other nodes are left to their own launcher.
    """
    with contextlib.suppress(OSError):
        remove_files(mpi_scratch_held([os.getpid(), os.getppid()]))


def pin_gpu(comm=None) -> dict:
    """Learn the node-local rank and make one GPU visible to this rank; return where it runs.

    Must run before CUDA is initialised (before cupy allocates anything): the CUDA
    runtime reads CUDA_VISIBLE_DEVICES once. GPUs are counted from the driver's
    /proc entries, because asking CUDA would initialise it.
    """
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


def first_ranks(comm, p: int):
    """A communicator of ``comm``'s ranks 0..p-1 (collective over ``comm``), or None on the others.

    The caller frees it. Lets one fixed job (a notebook's engines) run work on fewer ranks.
    """
    sub = comm.Split(0 if comm.rank < p else MPI.UNDEFINED, comm.rank)
    return None if sub == MPI.COMM_NULL else sub

