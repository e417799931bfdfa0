"""What a blocking call costs the compute around it, all ranks computing at once (explored 2026-12-04).

    cd docs/results/engine_accuracy_sync_penalty_explored
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 mpiexec -n 8 python sync_penalty.py   # and -n 4

Every rank runs 240 of the fit's kernels (``probes.work_kernel``), with an 8-byte all-reduce in groups
of 2 or of every rank after each ``n`` kernels, or none; each loop the slowest rank's time, the median
of 3. The penalty per call is what the loop took beyond the loop without calls, per call.
"""

import time

import numpy as np
from mpi4py import MPI

from gpulab.engine.perf.probes import work_kernel
from gpulab.engine.perf.timing import sleeping_barrier

TOTAL = 240
comm = MPI.COMM_WORLD
work = work_kernel(comm.rank)
for _ in range(5):
    work()
x, y = np.zeros(1), np.zeros(1)
loops = {}
for g in (2, comm.size):
    sub = comm.Split(comm.rank // g, comm.rank)
    for n in (TOTAL, 1, 2, 4, 8, 16, 40):
        times = []
        for _ in range(3):
            sleeping_barrier(comm)
            start = time.perf_counter()
            for _ in range(TOTAL // n):
                for _ in range(n):
                    work()
                if n != TOTAL:
                    sub.Allreduce(x, y)
            times.append(comm.allreduce(time.perf_counter() - start, op=MPI.MAX))
        loops[g, n] = float(np.median(times))
    sub.Free()
if comm.rank == 0:
    for g in (2, comm.size):
        base = loops[g, TOTAL] / TOTAL
        print(f"ranks {comm.size} group {g}: per kernel, no call {base * 1e3:.3f} ms")
        for n in (1, 2, 4, 8, 16, 40):
            per = loops[g, n] / TOTAL
            print(f"   a call every {n:3} kernels (segment {n * base * 1e3:5.2f} ms): per kernel {per * 1e3:.3f} ms, "
                  f"penalty per call {(per - base) * n * 1e3:5.2f} ms")
