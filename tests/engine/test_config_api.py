"""GPTConfig validation, the public names and layouts, and the CuPy path (skipped without CuPy)."""

import dataclasses

import numpy as np
import pytest

from gpulab.engine import GPTConfig, init_params, loss_and_grads, param_shapes
from tests.engine.util import random_batch, random_params, tiny_config


def test_config_is_frozen_and_normalises_dtype():
    cfg = GPTConfig(11, 8, 2, 2, 12, dtype=np.float32)
    assert cfg.dtype == "float32" and cfg.head_size == 6
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.n_layer = 3
    assert GPTConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("kwargs, message", [
    (dict(n_embd=10, n_head=3), r"n_embd \(10\) must be divisible by n_head \(3\)"),
    (dict(n_layer=0), r"n_layer must be >= 1"),
    (dict(vocab_size=-2), r"vocab_size must be >= 1"),
    (dict(dtype="int32"), r"dtype must be one of"),
    (dict(dtype="not a dtype"), r"dtype must be one of"),
])
def test_config_rejects(kwargs, message):
    base = dict(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=12)
    with pytest.raises(ValueError, match=message):
        GPTConfig(**{**base, **kwargs})


@pytest.mark.parametrize("bad", [2.0, "4", True, None])
def test_config_rejects_non_ints(bad):
    with pytest.raises(TypeError, match="block_size must be an int"):
        GPTConfig(11, bad, 2, 2, 12)


def test_init_params_names_shapes_and_statistics():
    cfg = GPTConfig(vocab_size=50, block_size=16, n_layer=3, n_head=4, n_embd=32)
    params = init_params(cfg, seed=1)
    V, T, C = 50, 16, 32
    expected = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (T, C),
                "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
    for i in range(3):
        p = f"transformer.h.{i}."
        expected.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
                         p + "attn.c_attn.weight": (3 * C, C), p + "attn.c_attn.bias": (3 * C,),
                         p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                         p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                         p + "mlp.c_fc.weight": (4 * C, C), p + "mlp.c_fc.bias": (4 * C,),
                         p + "mlp.c_proj.weight": (C, 4 * C), p + "mlp.c_proj.bias": (C,)})
    assert {n: p.shape for n, p in params.items()} == expected == param_shapes(cfg)
    assert "lm_head.weight" not in params  # tied to wte
    assert all(p.dtype == np.float64 for p in params.values())
    assert np.all(params["transformer.h.0.ln_1.weight"] == 1)
    assert np.all(params["transformer.h.2.mlp.c_fc.bias"] == 0)
    assert abs(params["transformer.h.0.mlp.c_fc.weight"].std() - 0.02) < 0.002
    assert abs(params["transformer.h.0.mlp.c_proj.weight"].std() - 0.02 / np.sqrt(6)) < 0.001
    again = init_params(cfg, seed=1)
    assert all(np.array_equal(params[n], again[n]) for n in params)


def test_loss_and_grads_validates_the_batch():
    cfg = tiny_config()
    params = init_params(cfg)
    idx, targets = random_batch(cfg, 2)
    with pytest.raises(ValueError, match="exceeds block_size"):
        loss_and_grads(params, np.zeros((2, 9), int), np.zeros((2, 9), int), cfg)
    with pytest.raises(ValueError, match="targets shape"):
        loss_and_grads(params, idx, targets[:, :4], cfg)


def test_serial_model_on_cupy_matches_numpy():
    cp = pytest.importorskip("cupy")
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - cupy installed but no usable GPU
        pytest.skip("CuPy has no CUDA device")
    cfg = tiny_config()
    params = random_params(cfg)
    idx, targets = random_batch(cfg, 3)
    loss, grads = loss_and_grads(params, idx, targets, cfg)
    loss_d, grads_d = loss_and_grads({n: cp.asarray(p) for n, p in params.items()},
                                     cp.asarray(idx), cp.asarray(targets), cfg)
    assert abs(loss - loss_d) < 1e-12
    for n in grads:
        assert isinstance(grads_d[n], cp.ndarray)
        np.testing.assert_allclose(cp.asnumpy(grads_d[n]), grads[n], rtol=1e-9, atol=1e-12)


def test_importing_the_engine_starts_neither_mpi_nor_cuda():
    import subprocess
    import sys

    code = ("import sys, gpulab.engine, gpulab.engine.training.loop; "
            "print('mpi4py.MPI' in sys.modules, 'cupy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
