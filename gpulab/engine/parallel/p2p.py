"""Point-to-point sends between pipeline stages: activations forward, their gradients backward.

    h = isend(x, mesh.pipe_comm, dest=stage + 1, tag=mb)     # non-blocking; h.wait() before x changes
    y = recv((b, T, C_col), x.dtype, like=x, comm=mesh.pipe_comm, source=stage - 1, tag=mb)

Sends are non-blocking (Isend): in 1F1B two neighbouring stages can each be
sending to the other at the same moment (an activation one way, a gradient
the other), which blocking rendezvous sends would deadlock. Receives block:
a stage has nothing else to do until its input arrives, and the time it
waits there is the pipeline bubble, recorded as a "pipe" communication event
on the timeline. Device arrays take the same path as the collectives
(``exchange``: CUDA-aware or staged through host memory); calls appear in
``collectives.trace()`` as ops "send" and "recv".
"""

from __future__ import annotations

from gpulab.backend import array_module
from gpulab.engine.parallel.collectives import Handle, _blocking, _note, _start
from gpulab.engine.parallel.exchange import Exchange


def isend(x, comm, dest: int, tag: int) -> Handle:
    """Start sending ``x`` to ``dest``; the handle keeps the buffer alive until ``wait()``."""
    x = array_module(x).ascontiguousarray(x)
    ex = Exchange(x)
    buf = ex.send(x)
    _note("send", comm, x.nbytes, ex.path)
    return _start("send", comm, x.nbytes, buf, ex, lambda: comm.Isend(buf, dest=dest, tag=tag))


def recv(shape, dtype, *, like, comm, source: int, tag: int):
    """Receive an array of ``shape`` and ``dtype`` from ``source``, on the device of ``like``."""
    out = array_module(like).empty(shape, dtype=dtype)
    ex = Exchange(out)
    buf = ex.recv(out)
    _note("recv", comm, out.nbytes, ex.path)
    _blocking("recv", comm, out.nbytes, ex, lambda: comm.Recv(buf, source=source, tag=tag))
    return out
