"""Rank functions for scripts/gpu_check.py beyond the broadcast cases: environment, matmul peak, engine.

Each runs under tests.mpi_harness.run_mpi (so a crash or hang is contained and
reported) and returns plain JSON. All of them need CuPy and a GPU.
"""

from __future__ import annotations

import importlib
import platform
import time
from functools import partial

import numpy as np
from mpi4py import MPI


def _version(module: str) -> str | None:
    try:
        return getattr(importlib.import_module(module), "__version__", "?")
    except Exception:  # noqa: BLE001 - absent or broken: say so, do not fail the probe
        return None


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def environment(world: MPI.Comm) -> dict:
    """What this machine has: GPU, CUDA, CuPy, NCCL, MPI and whether that MPI reads GPU memory."""
    import cupy as cp

    from gpulab.bcast.measurement import nccl
    from gpulab.mpi_cuda import mpi_cuda_support

    props = cp.cuda.runtime.getDeviceProperties(0)
    aware, why = mpi_cuda_support()
    try:
        nccl_version = nccl.nccl_module().get_version()
    except Exception as error:  # noqa: BLE001
        nccl_version = f"unavailable: {error}"
    return {"host": platform.node(), "python": platform.python_version(), "numpy": np.__version__,
            "cupy": cp.__version__, "torch": _version("torch"), "mpi4py": _version("mpi4py"),
            "mpi": MPI.Get_library_version().strip().splitlines()[0],
            "gpus": cp.cuda.runtime.getDeviceCount(), "gpu": _text(props["name"]),
            "gpu_memory_GiB": round(props["totalGlobalMem"] / 2**30, 1),
            "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(), "cuda_driver": cp.cuda.runtime.driverGetVersion(),
            "nccl": nccl_version, "mpi_cuda_aware": aware, "mpi_cuda_aware_reason": why}


def matmul_peak(world: MPI.Comm, sizes: dict | None = None, iters: int = 10) -> dict:
    """Measured dense matmul rate (TFLOP/s) per dtype: the denominator of MFU.

    CuPy: float32 (TF32 too when CUPY_TF32=1 is set for this process) and
    float16 (CuPy has no bfloat16 dtype); PyTorch, if installed, adds bfloat16.
    """
    import cupy as cp

    sizes = sizes or {"float32": 8192, "float16": 16384}
    out = {}
    for dtype, n in sizes.items():
        a = cp.random.random((n, n), dtype=cp.float32).astype(dtype)
        b = cp.random.random((n, n), dtype=cp.float32).astype(dtype)
        c = cp.empty((n, n), dtype=dtype)
        out[f"cupy_{dtype}"] = _timed_matmul(partial(cp.matmul, a, b, out=c), cp.cuda.Event(), cp.cuda.Event(),
                                             cp.cuda.get_elapsed_time, n, iters)
        del a, b, c
    try:
        import torch
    except ImportError:
        return out
    n = sizes.get("float16", 16384)
    a, b, c = (torch.rand((n, n), device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out["torch_bfloat16"] = _timed_matmul(lambda: torch.matmul(a, b, out=c), torch.cuda.Event(enable_timing=True),
                                          torch.cuda.Event(enable_timing=True),
                                          lambda start, stop: start.elapsed_time(stop), n, iters)
    return out


def _timed_matmul(matmul, start, stop, elapsed_ms, n: int, iters: int) -> dict:
    """Time ``iters`` n x n matmuls between two CUDA events (CuPy's or PyTorch's)."""
    for _ in range(3):  # warm-up: cuBLAS picks its kernel, clocks rise
        matmul()
    start.record()
    for _ in range(iters):
        matmul()
    stop.record()
    stop.synchronize()
    seconds = elapsed_ms(start, stop) / 1e3 / iters
    return {"n": n, "ms": seconds * 1e3, "tflops": 2 * n**3 / seconds / 1e12}


def engine_mfu(world: MPI.Comm, peak_tflops: dict, dtype: str = "float32", shape=(1, 1, 1, 1), n_layer: int = 4,
               n_embd: int = 768, n_head: int = 12, block_size: int = 256, batch: int = 16, steps: int = 5) -> dict:
    """Tokens/s of full training steps on CuPy, and MFU against the *measured* matmul peak.

    A step is ``train_step``: forward, backward, gradient sync, norm, AdamW
    (float16: loss-scaled, float32 masters). FLOPs per token as in nanoGPT's
    estimate_mfu (PaLM appendix B): 6 N + 12 L T C, counted for forward and
    backward only, so the optimizer's time lowers MFU as it should.
    """
    import cupy as cp

    from gpulab.engine import GPTConfig, Mesh, ParallelGPT, init_params
    from gpulab.engine.perf.flops import model_flops
    from gpulab.engine.training.optim import AdamW, LossScaler, train_step

    cfg = GPTConfig(vocab_size=128, block_size=block_size, n_layer=n_layer, n_head=n_head, n_embd=n_embd,
                    dtype=dtype)
    gpt = ParallelGPT(cfg, Mesh(*shape, comm=world))
    gpt.load_params(init_params(cfg), device="cupy")
    opt, scaler = AdamW(gpt.params, lr=1e-4), LossScaler(enabled=dtype == "float16")
    rng = np.random.default_rng(0)
    batch = tuple(rng.integers(0, cfg.vocab_size, (batch, block_size)) for _ in range(2))
    train_step(gpt, opt, batch, scaler=scaler)  # warm-up: kernels compile, pools fill
    cp.cuda.get_current_stream().synchronize()
    world.Barrier()
    start = time.perf_counter()
    skipped = sum(train_step(gpt, opt, batch, scaler=scaler)["skipped"] for _ in range(steps))
    cp.cuda.get_current_stream().synchronize()
    seconds = world.allreduce(time.perf_counter() - start, op=MPI.MAX) / steps
    achieved = model_flops(cfg, batch[0].shape[0], block_size) / seconds / 1e12 / world.size  # per rank
    gpt.free()
    return {"shape": list(shape), "config": cfg.to_dict(), "batch": batch[0].shape[0], "step_s": seconds,
            "tokens_per_s": batch[0].size / seconds, "tflops_per_rank": achieved, "skipped_steps": skipped,
            "mfu": {name: achieved / peak["tflops"] for name, peak in peak_tflops.items()}}
