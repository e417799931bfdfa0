"""Each serial layer and the whole GPT against float64 central finite differences."""

import numpy as np
import pytest

from gpulab.engine import loss_and_grads
from gpulab.engine.gpt import layers as L
from gpulab.engine.gpt.model import logits
from tests.engine.util import random_batch, random_params, rel_err, tiny_config

FD_TOL = 1e-6  # central differences with h=1e-6 in float64 are good to ~1e-9 here


def numeric_grad(f, x, h=1e-6, max_entries=None, rng=None):
    """d f / d x by central differences (all entries, or a random subset); NaN where skipped."""
    g = np.full(x.shape, np.nan)
    flat, gf = x.reshape(-1), g.reshape(-1)
    entries = np.arange(flat.size)
    if max_entries is not None and flat.size > max_entries:
        entries = (rng or np.random.default_rng(0)).choice(flat.size, max_entries, replace=False)
    for j in entries:
        old = flat[j]
        flat[j] = old + h
        fp = f()
        flat[j] = old - h
        fm = f()
        flat[j] = old
        gf[j] = (fp - fm) / (2 * h)
    return g


def check_layer(forward, backward, inputs: dict, grad_of: dict):
    """Project the output on a fixed random tensor G; compare backward(G) with d<out, G>/d input."""
    rng = np.random.default_rng(1)
    out, _ = forward(**inputs)
    G = rng.normal(size=np.shape(out))

    def f():
        return float((forward(**inputs)[0] * G).sum())

    dx, dparams = backward(G, forward(**inputs)[1])
    analytic = {"x": dx, **dparams}
    for key, name in grad_of.items():
        num = numeric_grad(f, inputs[name])
        assert rel_err(analytic[key], num) < FD_TOL, (key, rel_err(analytic[key], num))


rng = np.random.default_rng(0)


def test_linear():
    inputs = {"x": rng.normal(size=(2, 3, 5)), "w": rng.normal(size=(4, 5)), "b": rng.normal(size=4)}
    check_layer(L.linear_forward, L.linear_backward, inputs, {"x": "x", "weight": "w", "bias": "b"})


def test_layernorm():
    inputs = {"x": rng.normal(size=(2, 3, 6)) * 3 + 1, "w": rng.normal(size=6), "b": rng.normal(size=6)}
    check_layer(L.layernorm_forward, L.layernorm_backward, inputs, {"x": "x", "weight": "w", "bias": "b"})


def test_gelu_tanh_approximation():
    x = rng.normal(size=(3, 7)) * 2
    check_layer(L.gelu_forward, L.gelu_backward, {"x": x}, {"x": "x"})
    # GPT-2's formula, written independently
    want = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(L.gelu_forward(x)[0], want, rtol=1e-14)


@pytest.mark.parametrize("n_head", [1, 2, 3])
def test_attention(n_head):
    qkv = rng.normal(size=(2, 5, 3 * 6))
    check_layer(lambda qkv: L.attention_forward(qkv, n_head), L.attention_backward,
                {"qkv": qkv}, {"x": "qkv"})


def test_attention_is_causal():
    qkv = rng.normal(size=(1, 6, 12))
    y, _ = L.attention_forward(qkv, 2)
    changed = qkv.copy()
    changed[:, 4:] += 5.0  # the future must not leak into positions 0..3
    y2, _ = L.attention_forward(changed, 2)
    np.testing.assert_array_equal(y[:, :4], y2[:, :4])
    assert not np.allclose(y[:, 4:], y2[:, 4:])


def test_embedding_with_repeated_tokens():
    idx = np.array([[1, 3, 1], [0, 1, 3]])
    check_layer(lambda w: L.embedding_forward(idx, w), L.embedding_backward,
                {"w": rng.normal(size=(5, 4))}, {"weight": "w"})


def test_cross_entropy():
    logits = rng.normal(size=(2, 3, 7)) * 3
    targets = rng.integers(0, 7, (2, 3))
    loss, cache = L.cross_entropy_forward(logits, targets)
    z = logits.reshape(-1, 7)
    want = np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(6), targets.reshape(-1)])
    assert abs(loss - want) < 1e-13
    dlogits, _ = L.cross_entropy_backward(1.0, cache)
    num = numeric_grad(lambda: float(L.cross_entropy_forward(logits, targets)[0]), logits)
    assert rel_err(dlogits, num) < FD_TOL


def test_whole_model_every_parameter():
    cfg = tiny_config()  # V=13, T=8, C=18, nh=2, 2 layers
    params = random_params(cfg, seed=3)
    idx, targets = random_batch(cfg, 3, seq_len=7)  # T < block_size: wpe rows 7.. get no gradient
    loss, grads = loss_and_grads(params, idx, targets, cfg)
    assert set(grads) == set(params)
    sub = np.random.default_rng(5)

    def forward_only():  # loss_and_grads' loss, without its backward pass, some 2,000 times
        return float(L.cross_entropy_forward(logits(params, idx, cfg), targets)[0])
    assert forward_only() == loss
    for name, p in params.items():
        num = numeric_grad(forward_only, p, max_entries=40, rng=sub)
        checked = ~np.isnan(num)
        err = rel_err(grads[name][checked], num[checked])
        assert err < FD_TOL, (name, err)
    assert np.all(grads["transformer.wpe.weight"][7:] == 0)


def test_initial_loss_is_near_uniform():
    from gpulab.engine import init_params

    cfg = tiny_config(n_layer=1)
    idx, targets = random_batch(cfg, 4)
    loss, _ = loss_and_grads(init_params(cfg), idx, targets, cfg)
    assert abs(loss - np.log(cfg.vocab_size)) < 0.05


def test_float32_model_runs_in_float32():
    cfg = tiny_config(dtype="float32")
    params = random_params(cfg)
    idx, targets = random_batch(cfg, 2)
    loss32, grads = loss_and_grads(params, idx, targets, cfg)
    assert all(g.dtype == np.float32 for g in grads.values())
    loss64, _ = loss_and_grads({n: p.astype(np.float64) for n, p in params.items()}, idx, targets,
                               tiny_config(dtype="float64"))
    assert abs(loss32 - loss64) < 1e-5
