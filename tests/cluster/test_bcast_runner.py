"""EngineRunner on real local engines: the buffer kinds they offer, and a measurement on fake GPU buffers."""

from gpulab.cluster import start_engines
from gpulab.cluster.bcast_runner import EngineRunner
from tests.cluster.procs import stop_leftovers


def test_engine_runner_offers_devices_and_measures_fake_gpu_buffers(ipython_dir, monkeypatch):
    monkeypatch.setenv("GPULAB_CUDA_AWARE", "")
    monkeypatch.setenv("GPULAB_FAKE_MPI_CUDA_AWARE", "0")
    with start_engines(2) as engines:
        runner = EngineRunner(engines, iters=3, warmup=1)
        assert runner.devices[0] == "host" and "fake" in runner.devices  # "cupy" only where engines see a GPU
        row = runner.measure("chain", 1 << 12, 0, {"chunk_bytes": 1 << 10}, device="fake")
        assert row["valid"] and row["device"] == "fake" and row["path"] == "staged"
    assert stop_leftovers(ipython_dir, grace=3) == []
