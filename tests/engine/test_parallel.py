"""ParallelGPT against the serial model on every grid shape of 1, 2, 4, 8 ranks (and 6, 12).

One mpiexec launch per world size runs every test's rank function for it; inside,
the rank functions loop over the grid shapes, building a Mesh for each.
Tolerances are in tests/engine/cases.py.
"""

import pytest

from gpulab.engine import grid_shapes
from tests.mpi_harness import batched_jobs

# 12 ranks oversubscribe 2 cores: a handful of shapes that each use row, col, depth and data
SHAPES_12 = [(12, 1, 1, 1), (1, 12, 1, 1), (1, 1, 12, 1), (3, 2, 2, 1), (2, 3, 1, 2),
             (1, 3, 2, 2), (2, 2, 3, 1), (3, 1, 1, 4)]
SHAPES_FLOAT16 = [(2, 1, 2, 1), (1, 2, 1, 2), (2, 2, 1, 1), (1, 4, 1, 1)]
WORLDS = [1, 2, 4, 8, 6]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    checkpoint = str(tmp_path_factory.mktemp("checkpoint") / "ck.npz")
    return batched_jobs({
        **{f"float64 on {n}": (n, "tests.engine.cases:equivalence", dict(shapes=grid_shapes(n))) for n in WORLDS},
        "float64 on 12": (12, "tests.engine.cases:equivalence", dict(shapes=SHAPES_12)),
        "float32": (4, "tests.engine.cases:equivalence", dict(shapes=grid_shapes(4), dtype="float32")),
        "float16": (4, "tests.engine.cases:float16_accuracy", dict(shapes=SHAPES_FLOAT16)),
        "checkpoint": (4, "tests.engine.cases:checkpoint_across_grids",
                       dict(path=checkpoint, first=[1, 2, 2, 1], second=[2, 1, 1, 2])),
        "validation": (4, "tests.engine.cases:validation_errors", {}),
        "collectives": (3, "tests.engine.cases:collectives", {}),
    })


def _check(results, shapes):
    per_shape = results[0]
    assert [tuple(r["shape"]) for r in per_shape] == [tuple(s) for s in shapes]
    for rank_result in results[1:]:  # every rank saw the same global numbers
        assert [r["loss_err"] for r in rank_result] == [r["loss_err"] for r in per_shape]
    return per_shape


@pytest.mark.parametrize("n", WORLDS)
def test_every_grid_shape_float64(n, job):
    rows = _check(job(f"float64 on {n}"), grid_shapes(n))
    assert max(r["grad_err"] for r in rows) < 1e-10


def test_twelve_ranks_float64(job):
    rows = _check(job("float64 on 12"), SHAPES_12)
    assert max(r["param_err"] for r in rows) < 1e-10


def test_every_grid_shape_of_four_float32(job):
    rows = _check(job("float32"), grid_shapes(4))
    assert max(r["grad_err"] for r in rows) < 1e-5


def test_float16_on_every_axis_is_as_accurate_as_the_serial_float16_model(job):
    rows = job("float16")[0]
    assert [tuple(r["shape"]) for r in rows] == SHAPES_FLOAT16


def test_checkpoint_resumes_on_another_grid(job):
    assert max(job("checkpoint")) < 1e-10


def test_validation_errors_are_raised_on_every_rank_without_hanging(job):
    results = job("validation")
    assert all(r == results[0] for r in results)
    msgs = results[0]
    assert "= 3 must equal the number of ranks (4)" in msgs["mesh"]
    assert "n_embd (18) must be divisible by col (4)" in msgs["config"]
    assert "batch size (6) must be divisible by depth*data (4*1 = 4)" in msgs["batch"]


def test_collectives_on_three_ranks(job):
    job("collectives")
