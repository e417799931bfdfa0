"""What the mesh explorer runs on the engines: a few training iterations on a grid, and the machine fit.

    from gpulab.cluster.mesh_runner import MeshRunner
    runner = MeshRunner(engines)                  # engines = gpulab.cluster.start_engines(4)
    row = runner.measure(4, config, (2, 1, 2, 1), 16, Overlap())
    row["iter_s"], row["iter_s_interval"]         # the median over rounds, and its 95% interval

A measurement is ``rounds`` separate runs of ``iters`` iterations each (``timing.over_rounds``): the
interval comes from the rounds, since the iterations of one run share whatever the machine did then.

The engines import this module to run its ``_on_engine`` functions, so it
imports no widgets or plotting (each engine would pay about 0.6 CPU-s more
for ipywidgets and matplotlib, which it never uses); the mesh explorer
(``gpulab.widgets.mesh_explorer``) only draws what it returns.
"""

from __future__ import annotations

from dataclasses import asdict
from functools import cached_property

from gpulab.cluster.bcast_runner import engine_devices
from gpulab.engine import GPTConfig
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.perf.fitted_machine import FittedMachine, fit
from gpulab.engine.perf.timing import measure, over_rounds
from gpulab.launch import first_ranks
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())


def _measure_on_engine(world, config, shape, batch_size, overlap, iters, warmup, device, options, rounds):
    comm = first_ranks(MPI.COMM_WORLD, world)
    if comm is None:
        return None
    try:
        rows = [measure(comm, GPTConfig.from_dict(config), tuple(shape), batch_size, Overlap.from_dict(overlap),
                        iters=iters, warmup=warmup, keep_events=True, device=device, **options)
                for _ in range(rounds)]
        return over_rounds(rows) if comm.rank == 0 else None
    finally:
        comm.Free()


def _fit_on_engine(reps, device):
    machine = fit(MPI.COMM_WORLD, reps=reps, device=device)
    return None if machine is None else asdict(machine)  # its fields: what from_dict takes


ROUNDS = 6  # runs per measurement by default: the fewest whose order statistics bracket the median at 95%


class MeshRunner:
    """Runs the measurements on a ``gpulab.cluster.Engines``, each bounded by ``timeout``."""

    def __init__(self, engines, *, iters: int = 3, warmup: int = 1, rounds: int = ROUNDS, timeout: float = 120):
        self.engines, self.iters, self.warmup, self.timeout = engines, iters, warmup, timeout
        self.rounds = rounds

    @property
    def p(self) -> int:
        return self.engines.n

    @cached_property
    def devices(self) -> list:
        """Where the engines can keep the model: "host", "cupy" (every engine has a GPU), "fake"."""
        return engine_devices(self.engines, self.timeout)

    def measure(self, world: int, config, shape, batch_size: int, overlap: Overlap, device: str = "host",
                **options) -> dict:
        """``timing.measure`` ``rounds`` times on the first ``world`` engines, one row of them
        (``timing.over_rounds``); ``options``: its pipe, micro_batches, schedule, virtual_stages."""
        what = (f"{self.rounds} rounds of {self.iters} iterations on grid {tuple(shape)} ({overlap.label()}, "
                f"{device}) {options or ''}")
        rows = self.engines.run(_measure_on_engine, world, config.to_dict(), list(shape), batch_size,
                                overlap.to_dict(), self.iters, self.warmup, device, options, self.rounds,
                                timeout=self.timeout, what=what)
        return rows[0]

    def fit_machine(self, reps: int = 3, device: str = "host"):
        """This computer fitted on all the engines (``gpulab.engine.perf.fitted_machine``), with arrays on ``device``:
        it prices the runs on that device."""
        raw = self.engines.run(_fit_on_engine, reps, device, timeout=self.timeout,
                               what=f"perf.fitted_machine.fit(device={device!r})")[0]
        return FittedMachine.from_dict(raw)
