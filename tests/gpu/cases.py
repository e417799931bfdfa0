"""Rank functions for broadcasts of device buffers (run through tests.mpi_harness.run_mpi).

``device`` is "fake" (``gpulab.fakedevice``: runs anywhere, and makes every
staging bug visible) or "cupy" (a real GPU). Every case is compared bitwise
with what MPI_Bcast delivers, the root's bytes, as in tests/bcast/cases.py.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from gpulab.bcast import ALGORITHMS, gather_trace, tracing
from gpulab.bcast.runtime.gpu import path_of
from tests.bcast.cases import VARIANTS, _payload, communicators, runs
from tests.mpi_steps import step

# dtypes and sizes that stress chunking: empty, one byte, odd sizes, nd shapes, 16-bit floats
PAYLOADS = [("uint8", (0,)), ("int8", (1,)), ("float16", (7,)), ("int32", (1000,)),
            ("float32", (3, 101)), ("complex128", (2, 129)), ("bool", (11,))]
# staging chunks that do not divide the messages, one byte, and the default (one chunk here);
# cases take them in turn (not every combination) to keep the suite fast
STAGING = [{}, {"staging_chunk_bytes": 7}, {"staging_chunk_bytes": 1000}, {"staging_chunk_bytes": 1}]


def device_module(device: str):
    if device == "fake":
        from gpulab import fakedevice

        return fakedevice
    import cupy

    return cupy


def device_buffer(device: str, host: np.ndarray, mine: bool):
    """A device array for one rank: the payload on the root, garbage elsewhere.

    Both are written with ``set`` and, on the fake device, stay queued on the
    current stream: a broadcast that does not synchronize the stream first
    sends poison (root) or has its result overwritten by the late write.
    """
    buf = device_module(device).empty(host.shape, dtype=host.dtype)
    garbage = np.full(host.nbytes, 0x5A, np.uint8).view(host.dtype).reshape(host.shape)
    buf.set(host if mine else garbage)
    return buf


def check_device_algorithm(world: MPI.Comm, algorithm: str, device: str = "fake", expect_path: str = "staged",
                           staging: list | None = None, payloads: list | None = None) -> int:
    """Every communicator x root x option set x payload (tests.bcast.cases.communicators), bitwise against
    what MPI_Bcast delivers.

    Staging chunk sizes rotate through ``staging`` from case to case (all
    combinations would triple the run time and find nothing new); tiny chunks
    only on small payloads (tests.bcast.cases.runs).
    """
    checked = 0
    staging = STAGING if staging is None else staging
    for comm_name, comm, roots in communicators(world):
        for root in roots:
            for v, variant in enumerate(VARIANTS.get(algorithm, [{}])):
                for i, (dtype, shape) in enumerate(PAYLOADS if payloads is None else payloads):
                    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
                    choices = [s for s in staging if runs(s, nbytes)] or [{}]
                    options = {**variant, **choices[(root + v + i) % len(choices)]}
                    if not runs(options, nbytes):
                        continue
                    where = f"{algorithm} {device} on {comm_name} (p={comm.size}) root={root} {options} {dtype}{shape}"
                    step(where)
                    _check_one(world, comm, algorithm, device, expect_path, root, options,
                               _payload(dtype, shape, seed=1000 * root + i), where)
                    checked += 1
    return checked


def _check_one(world, comm, algorithm, device, expect_path, root, options, expected, where) -> None:
    buf = device_buffer(device, expected, comm.rank == root)
    assert path_of(buf) == expect_path, f"{where}: path {path_of(buf)}"
    out = ALGORITHMS[algorithm](buf, root, comm, **options)
    assert out is buf, "the algorithm must return the buffer it was given"
    got = buf.get()
    assert got.tobytes() == expected.tobytes(), (
        f"{where}: rank {world.rank} differs from MPI_Bcast at byte "
        f"{np.flatnonzero(got.view(np.uint8).ravel() != expected.view(np.uint8).ravel())[:1]}")


def trace_device(world: MPI.Comm, algorithm: str, nbytes: int, options: dict, device: str = "fake"):
    """The gathered trace of one device broadcast (on rank 0)."""
    host = np.arange(nbytes, dtype=np.uint8)
    buf = device_buffer(device, host, world.rank == 0)
    with tracing() as events:
        ALGORITHMS[algorithm](buf, 0, world, **options)
    assert buf.get().tobytes() == host.tobytes()
    return gather_trace(events, world)


def measure_device(world: MPI.Comm, algorithm: str, nbytes: int, device: str = "fake", **options) -> dict:
    from gpulab.bcast.measurement.measure import measure_bcast

    return measure_bcast(world, algorithm, nbytes, iters=3, warmup=1, device=device, **options)


# Deliberate staging bugs: each must make check_device_algorithm fail, or the tests above prove nothing.
def _break(bug: str) -> None:
    from gpulab import fakedevice
    from gpulab.bcast.runtime import staging

    S = staging.Stager
    if bug == "no_sync_before_mpi":
        fakedevice.FakeDevice.synchronize = lambda self: None
    elif bug == "send_before_copy_out":
        S.before_send = lambda self, view: None
    elif bug == "no_copy_in":
        S.after_recv = lambda self, view: None
    elif bug == "return_before_copy_in":
        S.finish = lambda self: None
    elif bug == "copy_in_wrong_chunk":
        def after_recv(self, view):  # right place on the device, but always the mirror's first bytes
            if view.nbytes and not self.is_root:
                begin, end = self._span(view)
                self.device.h2d(self.dev[begin:end], self.host[: end - begin], self.stream)
        S.after_recv = after_recv
    elif bug == "copy_out_misses_last_chunk":
        def start(self, original=S.start):
            original(self)
            if len(self._copied_out) > 1:  # the last chunk's event fires, but its copy never happened
                self._copied_out[-1] = (self._copied_out[-1][0], self.device.event(self.device.stream()))
        S.start = start
    else:
        raise ValueError(bug)


def staged_with_bug(world: MPI.Comm, bug: str) -> list[str]:
    """Broadcast fake device buffers with one bug planted; return the cases this rank got wrong.

    Only the bytes go wrong, never the message pattern, so every rank makes
    the same MPI calls and the job ends normally whatever the data.
    """
    _break(bug)
    wrong = []
    for algorithm, options in (("binomial", {}), ("chain", {"chunk_bytes": 1000}),
                               ("scatter_allgather_ring", {}), ("mpi", {})):
        for root in range(world.size):
            step(f"{bug}: {algorithm} root={root}")
            expected = _payload("int32", (1000,), seed=root)
            buf = device_buffer("fake", expected, world.rank == root)
            ALGORITHMS[algorithm](buf, root, world, staging_chunk_bytes=1500, **options)
            if buf.get().tobytes() != expected.tobytes():
                wrong.append(f"{algorithm} root={root}")
    return wrong


def check_all_algorithms(world: MPI.Comm, device: str = "cupy", expect_path: str = "staged",
                         staging: list | None = None) -> dict:
    """check_device_algorithm for every algorithm in one job (one mpiexec, one CUDA start-up)."""
    return {algorithm: check_device_algorithm(world, algorithm, device, expect_path, staging)
            for algorithm in sorted(ALGORITHMS)}


def check_nccl(world: MPI.Comm) -> int:
    """NCCL's broadcast on CuPy buffers, every root and payload, bitwise against MPI_Bcast."""
    import cupy

    from gpulab.bcast.measurement.nccl import nccl_bcast

    cupy.cuda.Device(world.rank % cupy.cuda.runtime.getDeviceCount()).use()  # NCCL: one GPU per rank
    checked = 0
    for root in range(world.size):
        for i, (dtype, shape) in enumerate(PAYLOADS):
            step(f"nccl root={root} {dtype}{shape}")
            expected = _payload(dtype, shape, seed=1000 * root + i)
            buf = device_buffer("cupy", expected, world.rank == root)
            assert nccl_bcast(buf, root, world) is buf
            assert buf.get().tobytes() == expected.tobytes(), \
                f"nccl root={root} {dtype}{shape}: rank {world.rank} differs"
            checked += 1
    return checked


def measure_sweep(world: MPI.Comm, algorithms: list, sizes: list, device: str = "cupy", time_budget: float = 0.5,
                  **options) -> list:
    """measure_bcast for each algorithm and size (the GPU check script's numbers)."""
    from gpulab.bcast.measurement.measure import applicable_options, measure_bcast

    return [measure_bcast(world, algorithm, nbytes, device=device, time_budget=time_budget,
                          **applicable_options(algorithm, options))
            for nbytes in sizes for algorithm in algorithms]


def auto_on_device(world: MPI.Comm, device: str = "fake") -> list:
    """``bcast(..., algorithm="auto")`` on device buffers: tests.bcast.cases.check_auto's rows."""
    from tests.bcast.cases import check_auto

    return check_auto(world, make=lambda expected, is_root: device_buffer(device, expected, is_root),
                      read=lambda buf: buf.get())


def cuda_aware_forced(world: MPI.Comm) -> None:
    """Rank 0 sends a fake device buffer with the CUDA-aware path forced; the others receive on the host.

    Only rank 0 can raise, so the job ends with its error (two ranks raising at
    once could abort each other while writing their reports).
    """
    expected = _payload("uint8", (64,), seed=0)
    buf = device_buffer("fake", expected, True) if world.rank == 0 else np.zeros_like(expected)
    ALGORITHMS["binomial"](buf, 0, world, path="cuda-aware" if world.rank == 0 else "auto")
