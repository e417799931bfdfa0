"""What runs a broadcast's messages: beneath the algorithms, which describe them as schedules.

executor (schedules, ``Group``, the one executor that calls MPI for gpulab's own
algorithms, and the fast path's runners), fastpath (the C entry of a repeated call,
``fastpath.c``: its plan is described there once), build (compiling the C entry, at
install time or ``python -m gpulab.bcast.runtime.build``), argument_check (every rank
passed the same call), trace (who sent what to whom), gpu and staging (device buffers:
CUDA-aware MPI, or staged through pinned host memory).
"""
