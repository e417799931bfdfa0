"""The broadcast entry's fast path in C (``fastpath.c``), built on first use with the MPI's ``mpicc``.

    from gpulab.bcast import fastpath
    fastpath.status()   # {"active": True, "module": ".../_fastpath....so"} or why not

A repeated 1 KiB broadcast costs 1.5 us on two ranks of one machine, and any Python function
in front of MPI_Bcast costs 0.1-0.3 us of it (docs/bcast_calls.md measures both). The C entry
handles the calls the Python fast path handles, with the same checks, and hands every other
call to the Python function. It is compiled once per environment (the source, Python, numpy,
mpi4py and the compiler wrapper name the build) into ``$GPULAB_CACHE`` (default
``~/.cache/gpulab``), with ``$MPICC`` or the ``mpicc`` next to Python or on PATH, for mpi.h's
types only: it links no MPI library, so loading it at import (before mpi4py has chosen its
MPI) loads none. At its first call it takes the MPI functions from the library mpi4py loaded,
and stays off if that library's handle sizes are not the ones it was built with. Where no
compiler is found, the build fails or the checks refuse, the Python entry runs, and
``status()`` says why. ``GPULAB_FASTPATH=python`` keeps the Python entry (to compare the two).
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())
SOURCE = Path(__file__).with_name("fastpath.c")
_status: dict = {"active": False, "reason": "not loaded yet"}


def status() -> dict:
    """Whether the C entry is in use, and its module's path or the reason it is not."""
    return dict(_status)


def mpicc() -> str | None:
    """The MPI compiler wrapper the C entry is built with: $MPICC, the one next to Python, or PATH's."""
    if os.environ.get("MPICC"):  # a name (MPICC=mpicc) or a path
        return shutil.which(os.environ["MPICC"])
    here = Path(sys.executable).parent / "mpicc"
    return str(here) if here.exists() else shutil.which("mpicc")


def _build(wrapper: str, target: Path) -> None:
    import mpi4py
    import numpy

    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:  # then one rename: readers never see half a file
        out = Path(tmp) / target.name
        includes = [sysconfig.get_paths()["include"], numpy.get_include(), mpi4py.get_include()]
        # --as-needed: the wrapper's -lmpi is dropped, since every MPI call goes through a pointer
        command = [wrapper, "-O2", "-shared", "-fPIC", *(f"-I{d}" for d in includes), str(SOURCE),
                   "-Wl,--as-needed", "-o", str(out)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()[-2000:]}")
        if b"libmpi" in out.read_bytes():
            raise RuntimeError(f"{out.name} was linked to an MPI library; it must take mpi4py's")
        os.replace(out, target)


def load():
    """The compiled module (built if needed), or None with ``status()`` saying why."""
    if os.environ.get("GPULAB_FASTPATH", "c") == "python":
        _status.update(active=False, reason="GPULAB_FASTPATH=python")
        return None
    wrapper = mpicc()
    if wrapper is None:
        asked = os.environ.get("MPICC")
        _status.update(active=False, reason=f"MPICC={asked} is no command" if asked else
                       "no mpicc found (set MPICC to the MPI's compiler wrapper)")
        return None
    try:
        import mpi4py
        import numpy

        key = hashlib.sha256("\0".join([SOURCE.read_text(), sys.version, numpy.__version__, mpi4py.__version__,
                                        os.path.realpath(wrapper), str(os.stat(wrapper).st_mtime)]).encode()
                             ).hexdigest()[:16]
        cache = Path(os.environ.get("GPULAB_CACHE") or Path.home() / ".cache" / "gpulab")
        target = cache / "fastpath" / key / ("_fastpath" + sysconfig.get_config_var("EXT_SUFFIX"))
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target.parent / "lock", "w") as lock:  # many ranks start at once: one builds
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not target.exists():
                    _build(wrapper, target)
        spec = importlib.util.spec_from_file_location("gpulab.bcast._fastpath", target)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (OSError, RuntimeError, ImportError, subprocess.SubprocessError) as error:
        _status.update(active=False, reason=f"build or load failed: {error}")
        return None
    _status.update(active=True, reason="", module=str(target))
    return module


FUNCTIONS = ("MPI_Bcast", "MPI_Send", "MPI_Recv", "MPI_Get_count", "MPI_Comm_size", "MPI_Comm_test_inter",
             "MPI_Error_class")


def _loaded_mpi() -> ctypes.CDLL:
    """The MPI library mpi4py loaded (the one mapped file that is named libmpi* and has MPI_Bcast)."""
    with open("/proc/self/maps") as maps:
        paths = {line.split(maxsplit=5)[5].strip() for line in maps if len(line.split(maxsplit=5)) == 6}
    found = []
    for path in sorted(p for p in paths if os.path.basename(p).startswith("libmpi")):
        try:
            library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)  # the loaded copy, never a new one
        except OSError:
            continue
        if hasattr(library, "MPI_Bcast"):
            found.append(library)
    if len(found) != 1:
        raise RuntimeError(f"{len(found)} MPI libraries loaded (libmpi* with MPI_Bcast): expected one")
    return found[0]


def configure(module, plans: dict, auto_native: dict) -> bool:
    """Hand the C entry MPI's functions and gpulab's dictionaries (MPI is up); False, with the reason
    in ``status()``, where it must stay off."""
    try:
        library = _loaded_mpi()
        functions = {name: ctypes.cast(getattr(library, name), ctypes.c_void_p).value for name in FUNCTIONS}
        module.configure(plans, auto_native, MPI.COMM_WORLD, MPI.Exception, functions,
                         (MPI._handleof(MPI.BYTE), MPI._handleof(MPI.COMM_NULL), MPI.ERR_TRUNCATE,
                          (MPI._sizeof(MPI.Comm), MPI._sizeof(MPI.Datatype), MPI._sizeof(MPI.Status))))
    except (OSError, RuntimeError, ValueError, AttributeError) as error:
        _status.update(active=False, reason=f"off: {error}")
        return False
    return True
