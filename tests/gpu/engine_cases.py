"""Rank functions: the engine's collectives on device buffers (fake or CuPy), checked against host.

Every collective (blocking and non-blocking) runs on host arrays and on device
copies of the same values; the device results must be bit-identical. Planted
bugs in ``gpulab.engine.parallel.exchange`` must each make a case fail, or the check
proves nothing.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from gpulab.backend import to_device, to_host
from gpulab.engine.parallel import collectives as coll

OPS = {
    "all_reduce": lambda x, c: coll.all_reduce(x, c),
    "iall_reduce": lambda x, c: coll.iall_reduce(x, c).wait(),
    "all_reduce max": lambda x, c: coll.all_reduce(x, c, op="max"),
    "all_gather": lambda x, c: coll.all_gather(x, c),
    "iall_gather": lambda x, c: coll.iall_gather(x, c).wait(),
    "reduce_scatter": lambda x, c: coll.reduce_scatter(x, c),
    "ireduce_scatter": lambda x, c: coll.ireduce_scatter(x, c).wait(),
}


def _plant(bug: str) -> None:
    from gpulab.engine.parallel import exchange
    from gpulab.fakedevice import FakeDevice

    E = exchange.Exchange

    def without_sync(method):
        def run(*args, **kwargs):
            sync, FakeDevice.synchronize = FakeDevice.synchronize, lambda self: None
            try:
                return method(*args, **kwargs)
            finally:
                FakeDevice.synchronize = sync
        return run

    if bug == "no_copy_back":  # staged results never reach the device
        E.finish = lambda self: None
    elif bug == "no_sync_before_mpi":  # MPI reads the host mirror before the device-to-host copy ran
        E.send = without_sync(E.send)
    elif bug == "no_sync_cuda_aware":  # MPI handed device memory that kernels may still be writing
        E.__init__ = without_sync(E.__init__)
    elif bug == "no_copy_out":  # MPI gets a host mirror that the device's values were never copied into
        E.send = lambda self, x, original=E.send: self._mirror(x) if self.path == "staged" else original(self, x)
    else:
        raise ValueError(bug)


def collectives_on_device(world: MPI.Comm, device: str = "fake", expect_path: str = "staged",
                          bug: str | None = None) -> list[str]:
    """Run every collective on host and device buffers; return the cases whose results differ."""
    if bug:
        _plant(bug)
    comm = world.Dup()
    comm.Set_name("world")
    rng = np.random.default_rng(world.rank)
    wrong = []
    for dtype in ("float64", "float32", "float16"):
        for name, op in OPS.items():
            x = rng.normal(size=6 * world.size).astype(dtype)
            want = op(x.copy(), comm)
            with coll.trace() as calls:
                try:
                    got = to_host(op(to_device(x, device), comm))
                except Exception as error:  # noqa: BLE001 - every rank fails alike: record it
                    wrong.append(f"{name} {dtype}: {type(error).__name__}: {error}")
                    continue
            if [c["path"] for c in calls] != [expect_path]:
                wrong.append(f"{name} {dtype}: path {[c['path'] for c in calls]}")
            elif got.dtype != want.dtype or got.tobytes() != want.tobytes():
                wrong.append(f"{name} {dtype}: values differ")
    comm.Free()
    return wrong


def bench_on_device(world: MPI.Comm, device: str = "fake") -> dict | None:
    """``gpulab.engine.perf.timing.measure`` (what the mesh explorer runs) with the model on ``device``."""
    from gpulab.engine.perf.timing import measure
    from tests.engine.util import tiny_config

    shape = (1, world.size, 1, 1)
    row = measure(world, tiny_config(shape, "float32"), shape, 4, iters=2, warmup=1, keep_events=True, device=device)
    if row is None:
        return None
    paths = {e.get("path") for events in row["events"] for e in events if e["kind"] == "comm"}
    return {"device": row["device"], "iter_s": row["iter_s"], "paths": sorted(paths)}
