"""How a rank waits for a pipeline's chunk: MPI's own Wait, or polling that naps once the wait is long.

MPI's Wait busy-polls: the waiting rank holds its core for the whole wait.
That is right on a cluster with a core per rank, and wrong wherever ranks
outnumber cores, as on a laptop or the emulated cluster, where every byte
between "nodes" is moved by the kernel's network stack on the same cores:
four ranks spinning on two cores take turns with the work that would end
their wait, and a chunk that arrives while its rank waits for a core waits a
scheduler time slice (milliseconds) before it is forwarded.

``wait`` (the default, ``GPULAB_BCAST_WAIT=nap``) tests the request, keeps
testing for ``SPIN_S`` (a wait that short is a fast link's, and napping would
only add to it), then naps ``NAP_S`` between tests, so that a long wait
leaves the core to whatever ends it. ``GPULAB_BCAST_WAIT=spin`` keeps MPI's
Wait. docs/emulated_bcast.md measures both.
"""

from __future__ import annotations

import os
import time

from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())

MODES = ("nap", "spin")
SPIN_S = 100e-6  # waits shorter than this never nap: shared memory, fast networks
NAP_S = 20e-6  # asked of the kernel; it wakes up after its timer slack too (about 50 us more on Linux)


def mode() -> str:
    """The wait ``GPULAB_BCAST_WAIT`` asks for (default "nap"); anything else is refused by name."""
    chosen = os.environ.get("GPULAB_BCAST_WAIT", "nap") or "nap"
    if chosen not in MODES:
        raise ValueError(f"GPULAB_BCAST_WAIT={chosen!r}: choose one of {', '.join(MODES)}")
    return chosen


def waiter(chosen: str):
    """(wait(request, status), wait_all(requests)) for a mode of ``MODES``."""
    if chosen == "spin":
        return (lambda request, status: request.Wait(status)), (lambda requests: MPI.Request.Waitall(requests))
    return wait, wait_all


def wait(request, status) -> None:
    """``request.Wait(status)``, napping between tests once the wait is longer than ``SPIN_S``."""
    if request.Test(status):
        return
    test, clock, sleep = request.Test, time.perf_counter, time.sleep
    spin_until = clock() + SPIN_S
    while not test(status):
        if clock() > spin_until:
            sleep(NAP_S)


def wait_all(requests: list) -> None:
    """``MPI.Request.Waitall(requests)``, napping the same way (one request after another: a send that
    completed while an earlier one was waited for passes its first test)."""
    for request in requests:
        wait(request, None)
