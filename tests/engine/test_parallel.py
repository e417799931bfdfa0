"""ParallelGPT against the serial model on every grid shape of 1, 2, 4, 8 ranks (and 6, 12).

One mpiexec launch per world size; inside it the rank function loops over the
grid shapes, building a Mesh for each. Tolerances are in tests/engine/cases.py.
"""

import pytest

from gpulab.engine import grid_shapes
from tests.mpi_harness import run_mpi

# 12 ranks oversubscribe 2 cores: a handful of shapes that each use row, col, depth and data
SHAPES_12 = [(12, 1, 1, 1), (1, 12, 1, 1), (1, 1, 12, 1), (3, 2, 2, 1), (2, 3, 1, 2),
             (1, 3, 2, 2), (2, 2, 3, 1), (3, 1, 1, 4)]


def _check(results, shapes):
    per_shape = results[0]
    assert [tuple(r["shape"]) for r in per_shape] == [tuple(s) for s in shapes]
    for rank_result in results[1:]:  # every rank saw the same global numbers
        assert [r["loss_err"] for r in rank_result] == [r["loss_err"] for r in per_shape]
    return per_shape


@pytest.mark.parametrize("n", [1, 2, 4, 8, 6])
def test_every_grid_shape_float64(n):
    shapes = grid_shapes(n)
    rows = _check(run_mpi(n, "tests.engine.cases:equivalence", timeout=300, shapes=shapes), shapes)
    assert max(r["grad_err"] for r in rows) < 1e-10


def test_twelve_ranks_float64():
    rows = _check(run_mpi(12, "tests.engine.cases:equivalence", timeout=300, shapes=SHAPES_12),
                  SHAPES_12)
    assert max(r["param_err"] for r in rows) < 1e-10


def test_every_grid_shape_of_four_float32():
    shapes = grid_shapes(4)
    rows = _check(run_mpi(4, "tests.engine.cases:equivalence", timeout=300, shapes=shapes,
                          dtype="float32"), shapes)
    assert max(r["grad_err"] for r in rows) < 1e-5


def test_float16_on_every_axis_is_as_accurate_as_the_serial_float16_model():
    shapes = [(2, 1, 2, 1), (1, 2, 1, 2), (2, 2, 1, 1), (1, 4, 1, 1)]
    rows = run_mpi(4, "tests.engine.cases:float16_accuracy", timeout=300, shapes=shapes)[0]
    assert [tuple(r["shape"]) for r in rows] == shapes


def test_checkpoint_resumes_on_another_grid(tmp_path):
    errs = run_mpi(4, "tests.engine.cases:checkpoint_across_grids", timeout=120,
                   path=str(tmp_path / "ck.npz"), first=[1, 2, 2, 1], second=[2, 1, 1, 2])
    assert max(errs) < 1e-10


def test_validation_errors_are_raised_on_every_rank_without_hanging():
    results = run_mpi(4, "tests.engine.cases:validation_errors", timeout=60)
    assert all(r == results[0] for r in results)
    msgs = results[0]
    assert "= 3 must equal the number of ranks (4)" in msgs["mesh"]
    assert "n_embd (18) must be divisible by col (4)" in msgs["config"]
    assert "batch size (6) must be divisible by depth*data (4*1 = 4)" in msgs["batch"]


def test_collectives_on_three_ranks():
    run_mpi(3, "tests.engine.cases:collectives", timeout=60)
