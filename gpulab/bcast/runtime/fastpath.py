"""The fast path of a repeated broadcast, and its entry in C (``fastpath.c``).

A program broadcasts the same sizes from the same root again and again, and a small MPI_Bcast costs
little more than a call into Python (docs/bcast_calls.md measures both), so the broadcast's entry
(``gpulab.bcast.entry``) makes every check and decision once and remembers it; a repeated call only
looks it up. This docstring is the one description of that plan: ``entry``, ``executor.runner`` and
``fastpath.c`` carry it out.

What is remembered (in ``entry``):

- ``_plans``: (id of the communicator as passed, algorithm as asked ("auto" too), root, nbytes) ->
  (run, communicator, C steps). ``run(buf)`` (``executor.runner``) sends the schedule's messages: a
  schedule of blocking sends and receives (the trees) unpacked once, the array handed to MPI as it is
  when every message is the whole buffer, anything else through ``executor.execute``; it returns False,
  having sent nothing, for a read-only or strided array. The C steps (``executor.c_plan``) are the same
  schedule for the C entry when every message is the whole buffer, else None.
- ``_auto_native``: nbytes -> the communicators (as the caller passed them, None too) on which "auto"
  chose MPI_Bcast at that size: one look-up by size and a test by identity decide.

A call with no options and a host numpy array takes the fast path:

- ``algorithm="mpi"``, or "auto" at a size and communicator in ``_auto_native``: MPI_Bcast on the
  caller's own communicator (MPI's Bcast needs no private duplicate, and must not make one: making it is
  collective), once the buffer is C-contiguous, writable and aligned and argument checking is off. The
  checked path calls MPI_Bcast on the same communicator, so ranks that take different paths still meet.
  What mpi4py refuses before calling MPI (a strided buffer, a dtype it cannot map, a root that is no
  integer) and what MPI refuses before sending (a root outside the communicator, a null one) fall
  through to the full checks, which raise or send the bytes.
- any other algorithm, or "auto" at a size where it chose another: the plan's ``run``.

Only the buffer is checked on every call. Plans are forgotten when a communicator is freed, when this
process's tuning file changes ("auto" decides again), when argument checking across ranks is switched
(while it is on no plan is made and MPI_Bcast is not called directly) and when tracing starts or stops
(no plan is made while it is on: a plan's runner records nothing), so a call checks none of that.

The C entry runs the same path with no Python in front of MPI: it reads the same two dictionaries and
a plan's C steps, and hands every other call, and anything it is unsure of (options, a buffer that is
not a C-contiguous writable aligned numpy array of plain data, a root that is not a Python int inside
the communicator, an intercommunicator), to the Python entry (``entry.bcast_in_python``), which checks
and raises or runs it. The Python module owns every decision; the C module only reads them.

It is compiled at install time (``build``), for mpi.h's types only: it links no MPI library. ``load``
never compiles: at the first broadcast it loads the module from beside this file (or the file
``$GPULAB_FASTPATH_MODULE`` names) when the source, Python, numpy and mpi4py its build record names are
the ones running. At the C entry's first call ``configure`` hands it the MPI functions of the library
mpi4py loaded, and it stays off if that library's handle sizes are not those it was built with.
Wherever it is off the Python entry runs and ``status()`` says why; ``GPULAB_FASTPATH=python`` keeps
the Python entry (to compare the two).

    from gpulab.bcast.runtime import fastpath
    fastpath.status()   # {"active": True, "reason": "", "module": ".../_fastpath....so"} or why not
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
from pathlib import Path

from gpulab.bcast.runtime import build
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())
_status: dict = {"active": False, "reason": "not loaded yet: no broadcast so far"}


def status() -> dict:
    """Whether the C entry is in use, and its module's path or the reason it is not."""
    return dict(_status)


def _off(reason: str) -> None:
    _status.clear()
    _status.update(active=False, reason=reason)


def module_path() -> Path:
    """The built module the loader takes: $GPULAB_FASTPATH_MODULE, else the one beside this file."""
    return Path(os.environ.get("GPULAB_FASTPATH_MODULE") or build.default_target())


def _stale(path: Path) -> str:
    """Why the module at ``path`` does not fit this environment ("" when it does)."""
    try:
        built = json.loads(build.record_of(path).read_text())
    except (OSError, ValueError) as error:
        return f"its build record {build.record_of(path)} is unreadable ({error}): rebuild with `{build.REBUILD}`"
    running = build.versions()
    differ = [f"{name} {built.get(name)!r}, running {value!r}" for name, value in running.items()
              if built.get(name) != value]
    if differ:
        return f"{path.name} was built for another environment ({'; '.join(differ)}): rebuild with `{build.REBUILD}`"
    return ""


def load():
    """The built C module, or None with ``status()`` saying why. Never compiles."""
    if os.environ.get("GPULAB_FASTPATH", "c") == "python":
        _off("GPULAB_FASTPATH=python")
        return None
    path = module_path()
    if not path.exists():
        _off(f"not built: no {path} (pip install builds it where an MPI compiler wrapper is found; "
             f"or run `{build.REBUILD}`)")
        return None
    stale = _stale(path)
    if stale:
        _off(stale)
        return None
    try:
        spec = importlib.util.spec_from_file_location("gpulab.bcast.runtime._fastpath", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (OSError, ImportError) as error:
        _off(f"{path} did not load: {error}")
        return None
    _status.update(active=True, reason="", module=str(path))
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
    """Hand the C entry MPI's functions and the entry's dictionaries (MPI is up); False, with the reason
    in ``status()``, where it must stay off."""
    try:
        world = MPI.COMM_WORLD  # first: it loads mpi4py's MPI library where the caller has not yet
        library = _loaded_mpi()
        functions = {name: ctypes.cast(getattr(library, name), ctypes.c_void_p).value for name in FUNCTIONS}
        module.configure(plans, auto_native, world, MPI.Exception, functions,
                         (MPI._handleof(MPI.BYTE), MPI._handleof(MPI.COMM_NULL), MPI.ERR_TRUNCATE,
                          (MPI._sizeof(MPI.Comm), MPI._sizeof(MPI.Datatype), MPI._sizeof(MPI.Status))))
    except (OSError, RuntimeError, ValueError, AttributeError) as error:
        _off(f"off: {error} (rebuild with the running MPI's wrapper: `{build.REBUILD} --mpicc ...`)")
        return False
    return True
