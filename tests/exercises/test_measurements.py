"""The notebooks' measurements, with the reference solutions: each runs on 4 ranks and returns the learner's
time beside the library's (or the model's). Times only: their values depend on the machine's load."""

import pytest

from tests.mpi_harness import batched_jobs

MEASUREMENTS = {
    "timing": ("01_broadcast", "timing", ["ref:binomial_bcast"], {"algorithm": "binomial", "iters": 3},
               ["yours_us", "library_us", "mpi_bcast_us"]),
    "chunk_sweep": ("02_chain", "chunk_sweep", ["ref:chain_bcast"],
                    {"nbytes": 1 << 20, "chunks": [1 << 16, 1 << 18], "iters": 2}, ["measured_ms", "model_ms"]),
    "timing_tp3d": ("04_tensor_parallel_3d", "timing_tp3d", ["ref:tp_forward", "ref:tp_backward"],
                    {"iters": 2, "tokens": 64, "n_out": 256, "k_in": 256}, ["yours_ms", "library_ms"]),
    "prediction_vs_measured": ("06_alpha_beta", "prediction_vs_measured",
                               ["ref:pingpong", "ref:fit_alpha_beta", "ref:predict_bcast"], {"iters": 3},
                               ["predicted_binomial_us", "measured_binomial_us"]),
}
job = batched_jobs({name: (4, "tests.exercises.cases:run_measurement",
                           {"assignment": a, "measure": m, "functions": f, "kwargs": k})
                    for name, (a, m, f, k, _) in MEASUREMENTS.items()}, timeout=300)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("name", list(MEASUREMENTS))
def test_measurement_returns_both_times(name):
    result = job(name)[0]
    rows = result if isinstance(result, list) else [result]
    assert rows and all(row[key] > 0 for row in rows for key in MEASUREMENTS[name][4]), result
