"""The schedule executor's own cost per message, against the same messages on bare mpi4py.

    python benchmarks/bcast_executor.py            # one process: COMM_SELF, no other rank to wait for

On COMM_SELF a rank sends to itself: an Isend then a checked Recv per message
pair, zero bytes, so MPI's own work is as small as it gets and the difference
per message is what ``gpulab.bcast.runtime.executor.execute`` adds in Python. That is the
per-message overhead the cost model charges (``Machine.overhead``, see
docs/bcast_model.md). Best of 5 rounds of 2000 pairs.
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from gpulab.bcast.runtime.executor import ISEND, RECV, TAG, Group, Op, execute

PAIRS, ROUNDS = 2000, 5


def best(run) -> float:
    times = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return min(times) / (2 * PAIRS)  # per message


def main() -> None:
    comm = MPI.COMM_SELF.Dup()
    data = np.zeros(0, np.uint8)
    pair = (Op(ISEND, 0, 0, 0, None, "p", 0), Op(RECV, 0, 0, 0))
    group = Group(comm, range(1), 0)

    def executor():
        for _ in range(PAIRS):
            execute(group, pair, data)

    def bare():
        status = MPI.Status()
        for _ in range(PAIRS):
            request = comm.Isend(data, 0, TAG)
            comm.Recv(data, 0, TAG, status)
            status.Get_count(MPI.BYTE)
            request.Wait()

    one_schedule = pair * PAIRS

    def executor_one_call():
        execute(group, one_schedule, data)

    b, e, e1 = best(bare), best(executor), best(executor_one_call)
    print(f"bare mpi4py Isend+Recv+Wait:   {b * 1e6:.2f} us per message")
    print(f"execute(), one call per pair:  {e * 1e6:.2f} us per message (+{(e - b) * 1e6:.2f})")
    print(f"execute(), one long schedule:  {e1 * 1e6:.2f} us per message (+{(e1 - b) * 1e6:.2f})")


if __name__ == "__main__":
    main()
