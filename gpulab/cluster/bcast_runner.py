"""What the broadcast widgets call to measure and trace on the live MPI engines (a fake in tests).

A runner has ``p`` (number of ranks), ``algorithms`` (name -> option names),
``devices`` (the buffer kinds every engine can use: "host", "cupy" where each
engine has a GPU, "fake"), ``measure(algorithm, nbytes, root, options,
device)`` -> one ``measure_bcast`` summary, and ``trace(algorithm, p, nbytes,
root, options)`` -> all ranks' trace events.

    runner = EngineRunner(engines)      # engines = gpulab.cluster.start_engines(4)
    runner.measure("chain", 1 << 20, 0, {"chunk_bytes": 1 << 16})

The ``_on_engine`` functions run on the engines (``Engines.run``); only they
communicate, so the notebook kernel, which imports this module, never
initialises MPI. The engines import this module too, so it imports no
widgets or plotting.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from gpulab.backend import DEVICES, cupy_or_none
from gpulab.bcast.entry import ALGORITHMS, bcast, option_names
from gpulab.bcast.measurement.measure import measure_bcast
from gpulab.bcast.runtime.trace import gather_trace, tracing
from gpulab.launch import first_ranks
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())


def _algorithms_on_engine() -> dict:
    return {name: option_names(name) for name in ALGORITHMS}


def engine_devices(engines, timeout: float) -> list:
    """The buffer kinds every engine can use, in the order of ``gpulab.backend.DEVICES``."""
    per_engine = engines.run(_devices_on_engine, timeout=timeout, what="which devices the engines have")
    return [d for d in per_engine[0] if all(d in mine for mine in per_engine)]


def _devices_on_engine() -> list:
    """Buffer kinds this engine can broadcast: host and the fake GPU always, CuPy when it sees a GPU."""
    cp = cupy_or_none()
    try:
        gpu = cp is not None and cp.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - CuPy without a driver or a device
        gpu = False
    return [d for d in DEVICES if gpu or d != "cupy"]


def _measure_on_engine(algorithm, nbytes, root, options, iters, warmup, time_budget, device):
    return measure_bcast(MPI.COMM_WORLD, algorithm, nbytes, root=root, iters=iters, warmup=warmup,
                         validate=True, time_budget=time_budget, device=device, **options)


def _trace_on_engine(algorithm, p, nbytes, root, options):
    world = MPI.COMM_WORLD
    comm = first_ranks(world, p)
    if comm is None:
        return None
    try:
        buf = np.full(nbytes, 7 if comm.rank == root else 0, dtype=np.uint8)
        with tracing() as events:
            bcast(buf, root=root, comm=comm, algorithm=algorithm, **options)
        if not (buf == 7).all():
            raise AssertionError(f"rank {comm.rank}: {algorithm} delivered wrong bytes")
        return gather_trace(events, comm)
    finally:
        comm.Free()


class EngineRunner:
    """Measure and trace on the engines of a ``gpulab.cluster.Engines``, each call bounded by ``timeout``.

    iters/warmup default to OSU's counts; time_budget (s) caps the timed
    iterations of one point so that large messages on a laptop stay quick.
    """

    def __init__(self, engines, *, iters: int | None = None, warmup: int | None = None,
                 time_budget: float | None = 0.5, timeout: float = 120):
        self.engines, self.iters, self.warmup, self.timeout = engines, iters, warmup, timeout
        self.time_budget = time_budget
        self._algorithms = None

    @property
    def p(self) -> int:
        return self.engines.n

    @property
    def algorithms(self) -> dict:
        if self._algorithms is None:
            self._algorithms = self.engines.run(_algorithms_on_engine, timeout=self.timeout)[0]
        return self._algorithms

    @cached_property
    def devices(self) -> list:
        return engine_devices(self.engines, self.timeout)

    def measure(self, algorithm: str, nbytes: int, root: int = 0, options: dict | None = None,
                device: str = "host") -> dict:
        what = f"measure_bcast({algorithm!r}, {nbytes} B, root={root}, {options or {}}, device={device!r})"
        rows = self.engines.run(_measure_on_engine, algorithm, nbytes, root, dict(options or {}),
                                self.iters, self.warmup, self.time_budget, device, timeout=self.timeout, what=what)
        bad = [rank for rank, row in enumerate(rows) if not row["valid"]]
        if bad:
            raise AssertionError(f"{what}: ranks {bad} did not receive the root's data")
        return rows[0]

    def trace(self, algorithm: str, p: int, nbytes: int, root: int = 0, options: dict | None = None) -> list:
        if not 1 <= p <= self.p:
            raise ValueError(f"can trace on 1..{self.p} ranks (the engines running), not {p}")
        what = f"trace of {algorithm!r} on {p} ranks"
        return self.engines.run(_trace_on_engine, algorithm, p, nbytes, root, dict(options or {}),
                                timeout=self.timeout, what=what)[0]
