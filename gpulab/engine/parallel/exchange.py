"""The buffers one engine collective hands to MPI, and how its result gets back to the device.

Host arrays go to MPI as they are ("host"). Device arrays (CuPy, or the CPU
tests' ``gpulab.fakedevice``) take one of the paths of ``gpulab.mpi_cuda``:

- "cuda-aware": MPI reads and writes device memory itself. The current
  stream is synchronized first: MPI does not wait for kernels still writing.
- "staged": each operand is copied whole into pinned host memory on the
  current stream (so after every kernel that wrote it), the stream is
  synchronized, MPI works on the host copies, and ``finish()`` copies the
  result back on the current stream. Whole, not pipelined in chunks as the
  broadcast does (``gpulab.bcast.runtime.staging``): MPI's reductions want the whole
  buffer. ``finish`` waits for its copy too, because the pinned buffer goes
  back to CuPy's pool as soon as it is dropped.

    ex = Exchange(shard)
    send, recv = ex.send(shard), ex.recv(out)
    comm.Allgather(send, recv)
    ex.finish()                      # out now holds the result, on the device
"""

from __future__ import annotations

from gpulab.backend import device_of, mpi_view
from gpulab.mpi_cuda import choose_path


class Exchange:
    def __init__(self, sample, path: str = "auto"):
        self.device = device_of(sample)
        self.path = "host" if self.device is None else choose_path(self.device, path)[0]
        self._back: list = []  # (device array, host mirror) pairs to copy in by finish()
        if self.device is not None and self.path == "cuda-aware":
            self.device.synchronize()

    def _mirror(self, x):
        return self.device.host_buffer(x.nbytes).view(x.dtype).reshape(x.shape)

    def send(self, x):
        """The buffer MPI reads for ``x``: ``x`` itself, or a host copy of it (made and waited for)."""
        if self.path == "host":
            return x
        if self.path == "cuda-aware":
            return mpi_view(x)
        host = self._mirror(x)
        self.device.d2h(host, x, self.device.current_stream())
        self.device.synchronize()  # the copy (and every kernel before it) done before MPI reads
        return host

    def recv(self, out):
        """The buffer MPI writes for ``out``: ``out`` itself, or a host mirror copied in by ``finish``."""
        if self.path == "host":
            return out
        if self.path == "cuda-aware":
            return mpi_view(out)
        host = self._mirror(out)
        self._back.append((out, host))
        return host

    def inout(self, x):
        """For in-place collectives: one buffer that MPI reads and overwrites."""
        buf = self.send(x)
        if self.path == "staged":
            self._back.append((x, buf))
        return buf

    def finish(self) -> None:
        """After MPI completed: staged results back into device memory, copies done."""
        if not self._back:
            return
        stream = self.device.current_stream()
        for dev, host in self._back:
            self.device.h2d(dev, host, stream)
        self._back = []
        self.device.synchronize()
