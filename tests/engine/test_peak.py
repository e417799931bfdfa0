"""The MFU denominator: a measured matmul rate on each device and dtype."""

import math

import pytest

from gpulab.engine.perf.timing import peak_matmul


@pytest.mark.parametrize("device, dtype", [("host", "float32"), ("host", "float16"), ("fake", "float32")])
def test_peak_matmul_measures_a_finite_positive_rate(device, dtype):
    rate = peak_matmul(64, dtype=dtype, repeats=2, device=device)
    assert math.isfinite(rate) and rate > 1e6  # FLOP/s: even numpy's float16 loop does > 1 MFLOP/s


def test_peak_matmul_refuses_an_unknown_device():
    with pytest.raises(ValueError, match="device must be 'host', 'cupy' or 'fake'"):
        peak_matmul(8, device="tpu")
