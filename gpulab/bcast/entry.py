"""The broadcast's entry points: ``bcast()`` and ``ALGORITHMS`` (one per record of ``registry``).

    from gpulab.bcast import bcast
    bcast(buf, root=0, comm=MPI.COMM_WORLD, algorithm="chain", chunk_bytes=1 << 16)

Every entry of ``ALGORITHMS`` has the signature ``f(buf, root, comm, **options)``
and broadcasts ``buf`` in place from ``root``. It works on the buffer's raw
bytes, so any dtype and any C-contiguous shape is moved bit for bit. Each call
validates its input first and raises ``ValueError``/``TypeError`` before any
message is sent.

Device arrays (CuPy) are accepted by every algorithm: ``gpulab.bcast.runtime.gpu``
hands them to a CUDA-aware MPI or stages them through pinned host memory.
Two options apply to every algorithm for that: ``path`` ("auto",
"cuda-aware", "staged") and ``staging_chunk_bytes``; host buffers ignore them.

A repeated call takes the fast path that ``gpulab.bcast.runtime.fastpath`` describes, in C where its
module was built: the first broadcast chooses the entry (``_choose``), and from then on ``bcast``,
``ALGORITHMS`` and ``gpulab.bcast.bcast`` name it.
"""

from __future__ import annotations

import functools
import sys

import numpy as np

from gpulab.backend import is_device_array
from gpulab.bcast.algorithms import registry
from gpulab.bcast.algorithms.native import native
from gpulab.bcast.algorithms.registry import REGISTRY
from gpulab.bcast.runtime import argument_check, fastpath, gpu, trace, waiting
from gpulab.bcast.runtime.executor import Group, c_plan, execute, on_free, private_comm, runner
from gpulab.bcast.selection import tuning
from gpulab.bcast.selection.auto import select
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())


def schedule_of(name: str, g: Group, nbytes: int, root: int, options: dict):
    """This rank's schedule for a flat algorithm, with communicator ranks as peers (cached)."""
    return g.ranks(REGISTRY[name].build(g.size, root, g.me, nbytes, **options))


def option_names(name: str) -> tuple[str, ...]:
    """The keyword options an algorithm accepts (its record's, ``registry.Algorithm.options``)."""
    return REGISTRY[name].options


def _check_options(name: str, options: dict) -> None:
    unknown = set(options) - set(option_names(name))
    if unknown:
        raise TypeError(f"algorithm {name!r} does not take option(s) {sorted(unknown)}; "
                        f"it takes {list(option_names(name)) or 'none'}")
    for key in ("chunk_bytes", "ranks_per_node"):
        value = options.get(key)
        if value is not None and (not isinstance(value, (int, np.integer)) or value <= 0):
            raise ValueError(f"{key} must be a positive integer, got {value!r}")
    radix = options.get("radix")
    if radix is not None and (not isinstance(radix, (int, np.integer)) or radix < 2):
        raise ValueError(f"radix must be an integer >= 2, got {radix!r}")
    if not REGISTRY[name].level:
        for level in ("inter", "intra"):
            sub = options.get(level, "binomial")
            if sub not in REGISTRY or not REGISTRY[sub].level:
                raise ValueError(f"{level}={sub!r} is not a flat algorithm; choose from {registry.level_names()}")
            _check_options(sub, options.get(level + "_options") or {})


# (algorithm, (option, type, value)...) already checked: a program repeats its broadcasts, and the
# check costs more than a small broadcast can spare; options that cannot be hashed (hierarchical's
# per-level dicts) are checked every time
_checked: set = set()


def _check_options_once(name: str, options: dict) -> None:
    key = (name, *((k, type(v), v) for k, v in options.items())) if options else name
    try:
        if key in _checked:
            return
    except TypeError:
        key = None
    _check_options(name, options)
    if key is not None:
        _checked.add(key)


def _run(name: str, g: Group, data, root: int, options: dict) -> None:
    """Execute algorithm ``name`` on a group (hierarchical calls back here for its two levels).

    ``run_algorithm`` has checked the options, both levels' too.
    """
    record = REGISTRY[name]
    if record.build is not None:
        execute(g, schedule_of(name, g, data.nbytes, root, options), data)
    elif record.level:
        record.run(g, data, root, **options)
    else:  # it runs other algorithms at its levels
        record.run(g, data, root, run=_run, **options)


def byte_view(buf):
    """A flat uint8 view of ``buf``'s memory (no copy), after checking it is usable as a receive buffer."""
    if isinstance(buf, np.ndarray) and buf.dtype.hasobject:
        raise TypeError(f"buffer holds Python objects (dtype {buf.dtype}): their bytes are pointers, "
                        "meaningless on another rank; send objects with comm.bcast (pickled)")
    if type(buf) is np.ndarray:  # the common case first: every check below costs a small broadcast time
        flags = buf.flags
        if flags.c_contiguous and flags.writeable:
            return buf if buf.dtype == np.uint8 and buf.ndim == 1 else buf.reshape(-1).view(np.uint8)
    if is_device_array(buf):
        if not buf.flags.c_contiguous:
            raise ValueError("buffer must be C-contiguous (use xp.ascontiguousarray)")
        return buf.reshape(-1).view("uint8")
    if not isinstance(buf, np.ndarray):
        try:
            buf = np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8)
        except TypeError as error:
            raise TypeError(f"buffer must be an array or support the buffer protocol: {error}") from None
    if not buf.flags.c_contiguous:
        raise ValueError("buffer must be C-contiguous (a slice with steps or a transpose is not): "
                         "use np.ascontiguousarray() and copy back")
    if not buf.flags.writeable:
        raise ValueError("buffer is read-only: non-root ranks receive into it")
    return buf.reshape(-1).view(np.uint8)


def _nbytes_or_error(buf):
    try:
        return byte_view(buf).nbytes
    except (TypeError, ValueError) as error:
        return f"unusable buffer ({error})"


def run_algorithm(name: str, buf, root: int = 0, comm: MPI.Comm | None = None, **options):
    """Broadcast ``buf`` in place from ``root`` over ``comm`` with algorithm ``name``; return ``buf``."""
    return bcast(buf, root, comm, name, **options)


def _checked_run(name: str, buf, root, comm, options: dict):
    """``run_algorithm`` the first time (or with options): every check, then the broadcast and its plan."""
    asked, comm = comm, MPI.COMM_WORLD if comm is None else comm
    if argument_check.checking():  # before any check that could fail on some ranks only
        argument_check.agree(private_comm(comm), name, int(root) if isinstance(root, (int, np.integer)) else repr(root),
                        options, _nbytes_or_error(buf))
    record = REGISTRY.get(name)
    if record is None:
        raise ValueError(f"unknown broadcast algorithm {name!r}; valid names: {sorted(ALGORITHMS)}")
    _check_root(root, comm)
    device_options = {key: options.pop(key) for key in gpu.DEVICE_OPTIONS if key in options} if options else {}
    if device_options:  # their defaults are valid
        gpu.check_device_options(**device_options)
    data = byte_view(buf)
    _check_options_once(name, options)
    # after every check: bad input raises before any message. MPI's own Bcast needs no private
    # duplicate, and must not make one: creating it is collective, and the ranks whose calls take
    # the fast path (MPI_Bcast on ``comm`` at once) would never join it
    private = comm if record.run is native else private_comm(comm)
    if type(data) is not np.ndarray and is_device_array(data):
        gpu.run_on_device(_run, name, data, int(root), private, options, native=comm, **device_options)
        return buf
    g = Group(private, range(private.size), private.rank, name, comm)  # MPI_Bcast on the caller's own
    build = record.build
    if build is not None:
        schedule = g.ranks(build(g.size, int(root), g.me, data.nbytes, **options))  # schedule_of, inlined
        if not options:
            _remember(name, buf, root, (asked, comm), g, schedule)
        execute(g, schedule, data)
        return buf
    _run(name, g, data, int(root), options)
    return buf


def _check_root(root, comm) -> None:
    if not isinstance(root, (int, np.integer)) or not 0 <= root < comm.size:
        raise ValueError(f"root must be a rank in [0, {comm.size}), got {root!r}")


# The fast path's memory and the entry in use (gpulab.bcast.runtime.fastpath describes the plan)
_plans: dict = {}
_auto_native: dict = {}
_ndarray = np.ndarray
_checking = argument_check.checking()
_c = None  # the C module, once loaded
_c_ready: bool | None = None  # configured (True), or refused (False): at the C entry's first call, MPI up
_chosen = None  # the entry every call goes to, chosen at the first broadcast: the C one or bcast_in_python


def _forget() -> None:
    global _checking
    _checking = argument_check.checking()
    for memory in (_plans, _auto_native):
        memory.clear()
    if _c_ready:
        _c.set_checking(_checking)


def _c_configure() -> None:
    """Hand the C entry what it reads (its first call does this: a broadcast means MPI is up); where MPI's
    library does not match its build it stays off, and the Python entry takes every call."""
    global _c_ready
    if _c is None or _c_ready is not None:
        return
    _c_ready = fastpath.configure(_c, _plans, _auto_native)
    if _c_ready:
        _c.set_checking(_checking)
    else:
        _use(bcast_in_python)


for _hooks in (on_free, tuning.on_forget, argument_check.on_switch, trace.on_switch):
    _hooks.append(_forget)


def _remember(name: str, buf, root, comms, g: Group, schedule) -> None:
    """Keep the plan under each communicator key the caller may use (None stands for COMM_WORLD)."""
    if type(buf) is not np.ndarray or argument_check.checking() or trace.active():  # the runner records nothing
        return
    if len(_plans) > 65536:
        _plans.clear()
    run = runner(g, schedule, buf.nbytes)
    in_use()  # the Python entry may be called directly, before any broadcast (benchmarks/bcast_calls.py)
    _c_configure()
    steps = c_plan(_c, g, schedule, buf.nbytes) if _c_ready else None
    for comm in comms:
        _plans[(id(comm), name, root, buf.nbytes)] = (run, comm, steps)


def _remember_auto_native(nbytes: int, comms) -> None:
    """"auto" chose MPI_Bcast for ``nbytes`` on these communicators (as passed, and as resolved)."""
    if argument_check.checking():
        return
    known = _auto_native.get(nbytes, ())
    for comm in comms:  # the caller's and the resolved one may be the same object: keep it once
        if not any(comm is k for k in known):
            known += (comm,)
    _auto_native[nbytes] = known


def bcast_in_python(buf, root: int = 0, comm=None, algorithm: str = "auto", **options):
    """The Python entry: ``bcast`` (whose docstring says what it does) where no C entry was built, and
    every call the C entry does not take where one was."""
    if not options and type(buf) is _ndarray:  # the fast path, inlined (gpulab.bcast.runtime.fastpath)
        if algorithm == "mpi" or algorithm == "auto" and comm in _auto_native.get(buf.nbytes, ()):
            if not _checking and buf.flags.carray:  # C-contiguous, writable, aligned
                try:
                    (MPI.COMM_WORLD if comm is None else comm).Bcast(buf, root)
                    return buf
                # strided, a dtype MPI has no name for, a root that is no integer or out of C's range
                except (BufferError, KeyError, TypeError, ValueError, OverflowError):
                    pass
                except MPI.Exception as error:  # MPI checks these before sending
                    if error.Get_error_class() not in (MPI.ERR_ROOT, MPI.ERR_COMM):
                        raise
        else:
            try:
                plan = _plans.get((id(comm), algorithm, root, buf.nbytes))
            except TypeError:  # an unhashable root: the checks will say what is wrong
                plan = None
            if plan is not None and plan[0](buf):  # False: read-only or strided, nothing sent
                return buf
    if algorithm != "auto":
        return _checked_run(algorithm, buf, root, comm, options)
    asked, comm = comm, MPI.COMM_WORLD if comm is None else comm
    decision = select(buf.nbytes if isinstance(buf, np.ndarray) else byte_view(buf).nbytes, comm)
    _checked_run(decision.name, buf, root, comm, {**decision.options, **options})
    if options or type(buf) is not np.ndarray:
        return buf
    record = REGISTRY[decision.name]
    if record.run is native and not decision.options:
        _remember_auto_native(buf.nbytes, (asked, comm))
    elif record.build is not None and record.level:  # remember what auto ran, options too
        private = private_comm(comm)
        g = Group(private, range(private.size), private.rank, decision.name, comm)
        _remember("auto", buf, root, (asked, comm),
                  g, schedule_of(decision.name, g, buf.nbytes, int(root), decision.options))
    return buf


def bcast(buf, root: int = 0, comm=None, algorithm: str = "auto", **options):
    """Broadcast ``buf`` in place from ``root`` (``comm`` defaults to COMM_WORLD); return ``buf``.

    ``algorithm="auto"`` picks one with ``select()``; options given here then
    override the chosen algorithm's defaults. A repeated call (same
    communicator, root, size, no options) runs its remembered plan at once.

    The first call chooses the entry (C where it was built, else ``bcast_in_python``),
    which ``bcast`` names from then on; this function, kept by whoever took it
    earlier, hands each call to it.
    """
    return (_chosen or _choose())(buf, root, comm, algorithm, **options)  # in_use(), inlined


_first_call = bcast


def _choose():
    """Load the C entry where it was built for this environment (``fastpath.load``: never compiles) and
    make it, or else the Python entry, the one every call goes to. The first broadcast calls this."""
    global _c
    _c = fastpath.load()
    if _c is None:
        return _use(bcast_in_python)
    _c.set_fallback(bcast_in_python, _c_configure)  # every call the C entry does not take
    return _use(_c.bcast)


def _use(chosen):
    """Name ``chosen`` wherever the entry is looked up: ``bcast`` here, ``ALGORITHMS``, ``gpulab.bcast.bcast``."""
    global _chosen, bcast
    _chosen = bcast = chosen
    for name, entry in list(ALGORITHMS.items()):
        if isinstance(entry, functools.partial) and entry.func in (_first_call, _c and _c.bcast):
            ALGORITHMS[name] = _entry(name)
    package = sys.modules.get("gpulab.bcast")
    if package is not None and "bcast" in vars(package):  # already looked up (lazy_exports keeps it)
        package.bcast = chosen
    return chosen


def in_use():
    """The entry every call goes to: the C one or ``bcast_in_python`` (chosen now if no broadcast has yet)."""
    return _chosen or _choose()


def entry_record() -> dict:
    """Which entry the broadcasts run through, for a record: ``{"bcast_entry": "c" or "python",
    "bcast_entry_reason": why not C ("" when C), "bcast_wait": how a pipeline's ranks wait
    (``gpulab.bcast.runtime.waiting``)}``. Chooses and configures it if no broadcast has yet
    (call it inside the MPI job)."""
    in_use()
    _c_configure()
    return {"bcast_entry": "c" if _c_ready else "python", "bcast_entry_reason": fastpath.status()["reason"],
            "bcast_wait": waiting.mode()}


def _entry(name: str) -> functools.partial:
    entry = functools.partial(bcast, algorithm=name)
    record = REGISTRY[name]
    entry.__doc__ = (record.build or record.run).__doc__
    return entry


ALGORITHMS = {name: _entry(name) for name in REGISTRY}


def _registry_changed() -> None:
    """Follow ``registry.register``/``unregister``: entries, and every decision cached by name."""
    for name, entry in list(ALGORITHMS.items()):
        if name not in REGISTRY and isinstance(entry, functools.partial) and entry.func in (bcast, _first_call):
            del ALGORITHMS[name]
    for name in REGISTRY:
        if name not in ALGORITHMS:
            ALGORITHMS[name] = _entry(name)
    _checked.clear()
    _plans.clear()


registry.changed.append(_registry_changed)
