"""A fake GPU for CPU-only machines: memory that host code cannot read, lazy streams, CuPy's rules.

Moving device buffers to MPI is easy to get subtly wrong: forget one copy,
copy the wrong chunk, read a host buffer before the device-to-host copy
finished, hand memory to MPI while a kernel still writes it, or let a numpy
array slip into GPU code. On a real GPU such bugs show up only sometimes, or
only on a GPU. This package makes them show up every time, on any laptop:

- ``FakeDeviceArray`` (``array.py``) wraps a numpy array but offers no buffer
  protocol, no ``__array__``, no ``__cuda_array_interface__`` and no
  ``__dlpack__``: numpy and mpi4py cannot read it. Bytes cross to the host
  only through explicit copies (``FAKE.d2h`` / ``FAKE.h2d``, ``get()`` /
  ``set()``, ``float()``), as on CuPy.
- It does math the way CuPy does: ``array_module(x)`` is ``xp``, numpy's
  functions run "on the device"; mixing in a host numpy array raises
  TypeError, as CuPy does. So the whole engine runs on fake device arrays.
- Copies are enqueued on a ``FakeStream`` (``device.py``) and run *lazily*:
  only when that stream, or an event recorded after the copy, is
  synchronized. Code that skips a synchronize sees stale bytes, the worst
  case a real GPU may produce. Kernels run at once but leave a mark on the
  current stream, as work still in flight.
- Host staging buffers start filled with a poison byte, not zeros.
- A "CUDA-aware" MPI is simulated by ``GPULAB_FAKE_MPI_CUDA_AWARE=1``: only
  then may a fake array reach MPI (through ``__gpulab_mpi_buffer__``), and
  only when nothing is pending on the current stream, so a missing
  synchronize fails loudly.

    from gpulab import fakedevice
    x = fakedevice.from_host(np.arange(10.0))   # like cupy.asarray
    y = (x * 2).sum()                           # a 0-d fake device array
    float(y), x.get()                           # explicit reads, as on CuPy
"""

from gpulab.fakedevice.array import FakeDeviceArray, empty, from_host, xp
from gpulab.fakedevice.device import FAKE, POISON, FakeDevice, FakeEvent, FakeStream

__all__ = ["FAKE", "POISON", "FakeDevice", "FakeDeviceArray", "FakeEvent", "FakeStream", "empty",
           "from_host", "xp"]
