"""AdamW and clipping against independent formulas; checkpoint round trip, atomicity, no pickle."""

import json
import math
import os

import numpy as np
import pytest

from gpulab.engine import init_params
from gpulab.engine.parallel.memory import optimizer_nbytes
from gpulab.engine.training import checkpoint
from gpulab.engine.training.optim import AdamW, LossScaler, clip_grads, global_norm, is_decayed
from tests.engine.util import tiny_config


def test_adamw_matches_pytorchs_algorithm_written_per_element():
    rng = np.random.default_rng(0)
    params = {"h.0.mlp.c_fc.weight": rng.normal(size=(3, 2)), "h.0.ln_1.bias": rng.normal(size=4)}
    want = {n: p.copy() for n, p in params.items()}
    opt = AdamW(params, lr=0.1, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    m = {n: np.zeros_like(p) for n, p in want.items()}
    v = {n: np.zeros_like(p) for n, p in want.items()}
    for t in range(1, 4):
        grads = {n: rng.normal(size=p.shape) for n, p in params.items()}
        opt.step(grads)
        for n in want:  # torch.optim.AdamW's update, one value at a time
            for j in np.ndindex(want[n].shape):
                g = grads[n][j]
                if n.endswith("weight"):
                    want[n][j] *= 1 - 0.1 * 0.1
                m[n][j] = 0.9 * m[n][j] + 0.1 * g
                v[n][j] = 0.95 * v[n][j] + 0.05 * g * g
                denom = math.sqrt(v[n][j]) / math.sqrt(1 - 0.95 ** t) + 1e-8
                want[n][j] -= 0.1 / (1 - 0.9 ** t) * m[n][j] / denom
    for n in want:
        np.testing.assert_allclose(params[n], want[n], rtol=1e-13)
    assert opt.state_dict()["t"] == 3


def test_weight_decay_only_on_matrices_and_embeddings():
    assert is_decayed("transformer.wte.weight") and is_decayed("transformer.wpe.weight")
    assert is_decayed("transformer.h.0.attn.c_attn.weight")
    assert not is_decayed("transformer.h.0.attn.c_attn.bias")
    assert not is_decayed("transformer.h.0.ln_1.weight") and not is_decayed("transformer.ln_f.weight")


def test_clip_by_global_norm():
    grads = {"a": np.array([3.0, 0.0]), "b": np.array([[4.0]])}
    assert global_norm(grads) == 5.0
    coef = clip_grads(grads, 1.0, global_norm(grads))
    assert abs(coef - 0.2) < 1e-6 and abs(global_norm(grads) - 1.0) < 1e-6
    assert clip_grads(grads, 10.0, global_norm(grads)) == 1.0  # under the limit: untouched
    assert abs(global_norm(grads) - 1.0) < 1e-6


def test_float16_parameters_get_float32_masters_that_keep_small_updates():
    p16 = {"w.weight": np.ones(4, np.float16)}
    p32 = {"w.weight": np.ones(4, np.float64)}
    opt16 = AdamW(p16, lr=1e-4, weight_decay=0.0)
    opt64 = AdamW(p32, lr=1e-4, weight_decay=0.0)
    assert opt16.master["w.weight"].dtype == np.float32 and opt16.m["w.weight"].dtype == np.float32
    assert not opt64.master  # float32/float64 parameters need no master copy: updated in place
    for _ in range(10):  # each step moves the weight by lr = 1e-4: below float16's spacing at 1.0 (9.8e-4)
        g = np.full(4, 0.5)
        opt16.step({"w.weight": g.astype(np.float16)})
        opt64.step({"w.weight": g})
    np.testing.assert_allclose(opt16.master["w.weight"], p32["w.weight"], rtol=1e-6)  # 1 - 1e-3
    assert p16["w.weight"].dtype == np.float16
    np.testing.assert_array_equal(p16["w.weight"], opt16.master["w.weight"].astype(np.float16))
    pure = np.ones(4, np.float16)
    pure -= np.float16(1e-4)  # what a float16-only update would do: nothing
    assert (pure == 1).all() and (p16["w.weight"] < 1).all()


def test_grad_scale_unscales_and_clips_like_a_scaled_gradient():
    rng = np.random.default_rng(1)
    g = {"w.weight": rng.normal(size=5)}
    a, b = {"w.weight": np.ones(5)}, {"w.weight": np.ones(5)}
    AdamW(a, lr=0.1).step({"w.weight": g["w.weight"] * 1024.0}, grad_scale=0.3 / 1024.0)
    AdamW(b, lr=0.1).step({"w.weight": g["w.weight"] * 0.3})
    np.testing.assert_allclose(a["w.weight"], b["w.weight"], rtol=1e-14)


def test_loss_scaler_skips_overflowed_steps_halves_and_grows():
    s = LossScaler(init_scale=1024.0, growth_interval=3)
    assert s.update(5.0) and s.scale == 1024.0
    assert not s.update(float("inf")) and s.scale == 512.0 and s.skipped == 1
    assert not s.update(float("nan")) and s.scale == 256.0
    assert all(s.update(1.0) for _ in range(3)) and s.scale == 512.0  # three good steps in a row
    off = LossScaler(enabled=False)
    assert off.scale == 1.0 and off.update(float("inf"))  # float32: nothing skipped


def test_optimizer_memory_counts_float32_masters_for_float16():
    assert optimizer_nbytes({"a": np.zeros(10, np.float32)}) == 2 * 10 * 4
    assert optimizer_nbytes({"a": np.zeros(10, np.float64)}) == 2 * 10 * 8
    assert optimizer_nbytes({"a": np.zeros(10, np.float16)}) == 3 * 10 * 4  # m, v and the master


def _state(cfg):
    params = init_params(cfg, seed=4)
    opt = {"t": 7, "m": {n: p * 0.5 for n, p in params.items()},
           "v": {n: p * p for n, p in params.items()}}
    return params, opt


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_round_trip(tmp_path, dtype):
    cfg = tiny_config(dtype=dtype)
    params, opt = _state(cfg)
    path = checkpoint.save(tmp_path / "sub" / "gpt.npz", params, config=cfg, step=12, opt_state=opt,
                           extra={"chars": "ab\nc", "mesh": [1, 2, 2, 1]})
    assert path.exists() and os.listdir(path.parent) == ["gpt.npz"]  # no temp file left
    ck = checkpoint.load(path)
    assert ck.config == cfg and ck.step == 12 and ck.extra == {"chars": "ab\nc", "mesh": [1, 2, 2, 1]}
    for n, p in params.items():
        assert ck.params[n].dtype == np.dtype(dtype)
        np.testing.assert_array_equal(ck.params[n], p)
        np.testing.assert_array_equal(ck.opt_state["m"][n], opt["m"][n])
        np.testing.assert_array_equal(ck.opt_state["v"][n], opt["v"][n])
    assert ck.opt_state["t"] == 7
    assert checkpoint.load(checkpoint.save(tmp_path / "p.npz", params, config=cfg)).opt_state is None


def test_a_failed_write_leaves_the_old_checkpoint(tmp_path, monkeypatch):
    cfg = tiny_config()
    params, _ = _state(cfg)
    path = checkpoint.save(tmp_path / "gpt.npz", params, config=cfg, step=1)
    before = path.read_bytes()

    def crash(f, **arrays):
        f.write(b"PK half a zip file")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint.np, "savez", crash)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save(path, params, config=cfg, step=2)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["gpt.npz"]
    monkeypatch.undo()
    assert checkpoint.load(path).step == 1


def test_loading_never_unpickles(tmp_path):
    cfg = tiny_config()
    params, _ = _state(cfg)
    good = checkpoint.save(tmp_path / "good.npz", params, config=cfg)
    with np.load(good) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["params/transformer.wte.weight"] = np.array([object()], dtype=object)  # needs pickle
    evil = tmp_path / "evil.npz"
    np.savez(evil, **arrays)
    with pytest.raises(ValueError, match="allow_pickle"):
        checkpoint.load(evil)


def test_foreign_and_mismatched_files_are_refused(tmp_path):
    np.savez(tmp_path / "plain.npz", x=np.zeros(3))
    with pytest.raises(ValueError, match="no header.json"):
        checkpoint.load(tmp_path / "plain.npz")
    header = {"format": "something-else", "version": 1}
    np.savez(tmp_path / "other.npz", **{"header.json": np.frombuffer(json.dumps(header).encode(), np.uint8)})
    with pytest.raises(ValueError, match="unsupported checkpoint format"):
        checkpoint.load(tmp_path / "other.npz")
    cfg = tiny_config()
    params, _ = _state(cfg)
    params["transformer.wpe.weight"] = params["transformer.wpe.weight"][:3]
    with pytest.raises(ValueError, match=r"transformer.wpe.weight: shape \(3, 18\)"):
        checkpoint.save(tmp_path / "bad.npz", params, config=cfg)
