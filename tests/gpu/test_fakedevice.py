"""The fake device keeps its promises (single process), and the staging pipeline waits only for what it needs."""

import numpy as np
import pytest
from mpi4py import MPI

from gpulab import fakedevice
from gpulab.backend import array_module, device_of, is_device_array, to_host
from gpulab.bcast import ALGORITHMS, bcast
from gpulab.bcast.runtime.gpu import path_of
from gpulab.bcast.runtime.staging import Stager
from gpulab.mpi_cuda import choose_path, mpi_cuda_support

FAKE = fakedevice.FAKE


def test_host_code_and_mpi_cannot_read_fake_device_memory():
    x = fakedevice.from_host(np.arange(4.0))
    assert is_device_array(x) and device_of(x) is FAKE
    for read in (np.asarray, lambda a: memoryview(a), lambda a: np.asarray(a[0]), lambda a: a + np.ones(4)):
        with pytest.raises(TypeError):
            read(x)
    with pytest.raises(TypeError):  # mpi4py finds no buffer protocol, CUDA array interface or DLPack
        MPI.COMM_SELF.Isend(x, 0, 0)
    assert to_host(x).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_copies_run_only_when_someone_waits():
    dev, host = fakedevice.from_host(np.arange(8, dtype=np.uint8)), FAKE.host_buffer(8)
    stream = FAKE.stream()
    FAKE.d2h(host[:4], dev[:4], stream)
    event = FAKE.event(stream)
    FAKE.d2h(host[4:], dev[4:], stream)
    assert (host == fakedevice.POISON).all()  # nothing yet: an unsynchronized reader sees poison
    event.synchronize()
    assert host[:4].tolist() == [0, 1, 2, 3] and (host[4:] == fakedevice.POISON).all()
    stream.synchronize()
    assert host.tolist() == list(range(8))


def test_set_is_queued_on_the_current_stream_and_get_waits_for_it():
    x = fakedevice.empty(3, np.int16)
    FAKE.synchronize()  # nothing left from earlier tests
    x.set(np.array([7, 8, 9], np.int16))
    assert FAKE.current.pending == 1
    assert x.get().tolist() == [7, 8, 9] and FAKE.current.pending == 0


def test_mpi_door_needs_a_cuda_aware_mpi_and_a_synchronized_stream(monkeypatch):
    x = fakedevice.from_host(np.zeros(2))
    with pytest.raises(RuntimeError, match="not CUDA-aware"):
        x.__gpulab_mpi_buffer__()
    monkeypatch.setenv("GPULAB_FAKE_MPI_CUDA_AWARE", "1")
    x.set(np.ones(2))
    with pytest.raises(RuntimeError, match="synchronize the stream first"):
        x.__gpulab_mpi_buffer__()
    FAKE.synchronize()
    assert x.__gpulab_mpi_buffer__().tolist() == [1.0, 1.0]


def test_root_sends_chunk_i_while_chunk_i_plus_1_is_still_copying_out():
    dev = fakedevice.from_host(np.arange(10, dtype=np.uint8))
    stager = Stager(FAKE, dev, is_root=True, chunk_bytes=4)
    stager.start()
    assert stager.stats["d2h_chunks"] == 3  # 4 + 4 + 2 bytes
    stager.before_send(stager.host[1:3])
    assert stager.host[:4].tolist() == [0, 1, 2, 3]
    assert (stager.host[4:] == fakedevice.POISON).all()  # later chunks not waited for
    stager.before_send(stager.host[3:5])  # straddles two chunks: waits for the second too
    assert stager.host[:8].tolist() == list(range(8)) and stager.host[8] == fakedevice.POISON
    stager.finish()
    assert stager.host.tolist() == list(range(10))


def test_receiver_copies_each_message_in_and_the_device_is_complete_after_finish():
    dev = fakedevice.empty(6)
    stager = Stager(FAKE, dev, is_root=False)
    stager.host[:] = np.arange(6)  # as if MPI had received into the mirror
    stager.after_recv(stager.host[4:6])
    stager.after_recv(stager.host[0:4])
    assert stager.stats == {"d2h_chunks": 0, "h2d_copies": 2, "h2d_bytes": 6}
    FAKE.synchronize()
    assert (dev.get() == fakedevice.POISON).all()  # the copy stream has not been waited for
    stager.finish()
    assert dev.get().tolist() == list(range(6))
    with pytest.raises(ValueError, match="not a slice of the host mirror"):
        stager.after_recv(np.zeros(2, np.uint8))


def test_path_choice(monkeypatch):
    monkeypatch.delenv("GPULAB_CUDA_AWARE", raising=False)
    monkeypatch.delenv("GPULAB_FAKE_MPI_CUDA_AWARE", raising=False)
    assert choose_path(FAKE)[0] == "staged"
    assert path_of(np.zeros(3)) == "host"
    monkeypatch.setenv("GPULAB_FAKE_MPI_CUDA_AWARE", "1")
    assert choose_path(FAKE)[0] == "cuda-aware"
    monkeypatch.setenv("GPULAB_CUDA_AWARE", "0")
    assert choose_path(FAKE) == ("staged", "GPULAB_CUDA_AWARE=0")
    assert choose_path(FAKE, "cuda-aware")[0] == "cuda-aware"
    monkeypatch.setenv("GPULAB_CUDA_AWARE", "yes")
    with pytest.raises(ValueError, match="GPULAB_CUDA_AWARE must be 0 or 1"):
        choose_path(FAKE)


def test_the_mpi_library_is_asked_about_cuda_support():
    aware, why = mpi_cuda_support()
    assert isinstance(aware, bool) and why
    if "MPICH" in MPI.Get_library_version() and "mpi_memory_alloc_kinds='mpi,system'" in why:
        assert not aware  # the pip MPICH wheel is built without CUDA


def test_device_buffers_on_one_rank_and_bad_device_options():
    x = fakedevice.from_host(np.arange(5.0))
    assert bcast(x, comm=MPI.COMM_SELF, algorithm="chain", staging_chunk_bytes=2) is x
    assert x.get().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    with pytest.raises(ValueError, match="staging_chunk_bytes must be a positive integer"):
        ALGORITHMS["chain"](x, 0, MPI.COMM_SELF, staging_chunk_bytes=0)
    with pytest.raises(ValueError, match="path must be"):
        ALGORITHMS["binomial"](np.zeros(2), 0, MPI.COMM_SELF, path="gpudirect")
    with pytest.raises(TypeError, match="does not take option"):  # checked for device buffers too
        ALGORITHMS["binomial"](x, 0, MPI.COMM_SELF, chunk_bytes=4)


def test_math_follows_cupys_rules():
    x = fakedevice.from_host(np.arange(6.0).reshape(2, 3))
    xp = array_module(x)
    y = xp.exp(x) * 2 + 1  # functions, ufuncs and operators stay on the device
    assert is_device_array(y) and np.allclose(y.get(), np.exp(np.arange(6.0).reshape(2, 3)) * 2 + 1)
    total = y.sum()
    assert is_device_array(total) and total.shape == ()  # reductions give 0-d device arrays, as on CuPy
    assert float(total) == float(y.get().sum())  # float() is an explicit, synchronizing read
    assert is_device_array(np.concatenate([x, x]))  # numpy functions dispatch (__array_function__)
    with pytest.raises(TypeError, match="host \\(numpy\\) array in device math"):
        x + np.ones(3)
    with pytest.raises(TypeError, match="host \\(numpy\\) array in device math"):
        xp.where(x > 1, np.zeros((2, 3)), x)
    rows = xp.asarray(np.array([0, 0, 1]))  # asarray copies host data in, like cupy.asarray
    target = xp.zeros((2, 3))
    xp.add.at(target, rows, xp.ones((3, 3)))  # repeated rows accumulate
    assert target.get()[:, 0].tolist() == [2.0, 1.0]


def test_kernels_leave_the_stream_busy_views_and_allocations_do_not():
    x = fakedevice.from_host(np.arange(12.0))
    FAKE.synchronize()
    v = x.reshape(3, 4)[1:]
    assert FAKE.current.pending == 0 and v.base is x  # a view: same memory, no kernel
    x * 2
    assert FAKE.current.pending == 1  # a kernel is in flight until someone waits
    FAKE.synchronize()
    e = array_module(x).empty(3)
    assert FAKE.current.pending == 0 and (e.get().view(np.uint8) == fakedevice.POISON).all()


def test_uninitialised_and_unsynchronized_reads_show():
    x = fakedevice.from_host(np.zeros(4))
    x.set(np.ones(4))  # queued on the current stream
    assert (x + 0).get().tolist() == [1.0] * 4  # a kernel runs after earlier work on its stream
    copy_stream, host = FAKE.stream(), FAKE.host_buffer(32)
    FAKE.d2h(host, x, copy_stream)
    x += 1  # a kernel on the current stream does not wait for the copy stream
    copy_stream.synchronize()
    assert host.view(np.float64).tolist() == [2.0] * 4  # the copy ran late: it saw the kernel's write
