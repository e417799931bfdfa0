"""Shipped network parameter lists and the start-up broadcast benchmark."""

import math

import pytest

from gpulab.workloads import NETWORKS, PUBLISHED, layer_bytes, load, parameter_count
from gpulab.workloads.networks import build
from gpulab.workloads.startup import latency_share
from tests.mpi_harness import run_mpi


@pytest.mark.parametrize("name", NETWORKS)
def test_shipped_lists_match_the_published_parameter_counts(name):
    assert parameter_count(name) == PUBLISHED[name]
    assert load(name) == build()[name]  # the data file is what the builder makes
    assert sum(layer_bytes(name)) == 4 * PUBLISHED[name]  # fp32


def test_layer_shapes_from_the_papers():
    vgg = dict(load("vgg16"))
    assert vgg["features.0.weight"] == (64, 3, 3, 3) and vgg["classifier.0.weight"] == (4096, 25088)
    gpt = dict(load("gpt2"))
    assert gpt["wte.weight"] == (50257, 768) and gpt["h.11.mlp.c_fc.weight"] == (768, 3072)
    assert len(load("resnet50")) == 161 and dict(load("resnet50"))["fc.weight"] == (1000, 2048)
    assert math.prod(dict(load("gpt2-medium"))["h.23.attn.c_attn.weight"]) == 1024 * 3072
    with pytest.raises(KeyError, match="unknown network"):
        load("bert")


def test_model_broadcast_layerwise_and_fused_on_3_ranks():
    sizes = [4, 400, 4000, 40000, 8, 300_000]
    rows = run_mpi(3, "tests.bcast.model_cases:workload_small", sizes=sizes, timeout=120)[0]
    assert {(r["algorithm"], r["mode"]) for r in rows} == {(a, m) for a in ("mpi", "chain", "auto")
                                                           for m in ("layerwise", "fused")}
    assert all(r["valid"] and r["nbytes"] == sum(sizes) for r in rows)
    assert {r["tensors"] for r in rows} == {1, len(sizes)}
    shares = latency_share(rows)
    assert len(shares) == 3 and all(0 <= s["extra_share"] <= 1 for s in shares)
