"""Overlap changes when the engine communicates, never what it computes.

Every overlap switch, alone and together (and with progress polling off), on
grid shapes that exercise each path: OAR, the dX all-reduce (row > 1); ORS,
AxoNN's dW-first order (row = 1); OAG and cache (depth > 1), buckets (data > 1,
depth x data > 1); and all 32 combinations of the five switches in one job.
Numbers must match overlap-off to 1e-12 in float64 (on MPICH they match bit
for bit: the same MPI algorithms see the same buffers), and the collectives issued must be exactly those that
``volume.collective_calls(..., overlap=)`` predicts. Timing is not tested
here: docs/engine_overlap.md records it.
"""

import pytest

from gpulab.engine import grid_shapes
from gpulab.engine.parallel.overlap import Overlap
from tests.engine.overlap_cases import VARIANTS
from tests.mpi_harness import batched_jobs

SHAPES_8 = [(2, 1, 2, 2), (1, 2, 2, 2), (2, 2, 2, 1)]
EVERY_SWITCH_SHAPE = (2, 1, 2, 1)


@pytest.fixture(scope="module")
def job():  # one MPI job per rank count
    return batched_jobs({
        "variants on 4": (4, "tests.engine.overlap_cases:identical_numbers", dict(shapes=grid_shapes(4))),
        "variants on 8": (8, "tests.engine.overlap_cases:identical_numbers", dict(shapes=SHAPES_8)),
        "every combination": (4, "tests.engine.overlap_cases:identical_numbers",
                              dict(shapes=[EVERY_SWITCH_SHAPE], variants="every", steps=1)),
        "timeline": (4, "tests.engine.overlap_cases:timeline_gather", dict(shape=list(EVERY_SWITCH_SHAPE))),
    })


def _check(rows, shapes):
    assert len(rows) == len(shapes) * len(VARIANTS)
    assert all(r["loss"] <= 1e-12 and r["grads"] <= 1e-12 and r["params"] <= 1e-12 for r in rows)
    return rows


@pytest.mark.parametrize("n, shapes", [(4, grid_shapes(4)), (8, SHAPES_8)])
def test_every_overlap_option_gives_the_same_numbers(n, shapes, job):
    rows = _check(job(f"variants on {n}")[0], shapes)
    by = {(tuple(r["shape"]), r["variant"]): r for r in rows}
    for shape in shapes:
        R, C, D, P = shape
        if D > 1:  # caching gathered weights costs memory, and saves the backward all-gathers
            assert by[shape, "cache"]["memory"]["weight_cache"] > 0
            assert by[shape, "cache"]["n_calls"] < by[shape, "oag"]["n_calls"]
        else:
            assert by[shape, "cache"]["memory"]["weight_cache"] == 0
        assert (by[shape, "oar"]["async_calls"] > 0) == (R > 1 or C > 1)  # dX summed over row (col: transposed)
        assert (by[shape, "ors"]["async_calls"] > 0) == (D > 1)  # dW reduce-scattered over depth
        assert (by[shape, "oag"]["async_calls"] > 0) == (D > 1)  # weights gathered over depth
    assert sum(r["bitwise"] for r in rows) == len(rows)  # MPICH: bit for bit


def test_every_combination_of_the_switches_gives_the_same_numbers(job):
    """OAR, ORS, OAG, cache and buckets in all 32 combinations, on a grid where each one acts."""
    rows = job("every combination")[0]
    assert len(rows) == 32 and len({r["variant"] for r in rows}) == 32
    assert all(r["loss"] <= 1e-12 and r["grads"] <= 1e-12 and r["params"] <= 1e-12 for r in rows)
    assert all(r["bitwise"] for r in rows)  # MPICH: bit for bit


def test_timeline_is_gathered_on_one_clock(job):
    out = job("timeline")[0]
    assert out["n_ranks"] == 4
    assert out["kinds"] == ["comm", "compute", "phase", "poll"]
    assert out["phases"] == ["forward", "backward", "grad-sync"]
    assert out["kernels"] >= 4 * 2 * 3  # 4 linears x 2 layers x (fwd, dX, dW) at least
    for s in out["summaries"]:
        assert s["wall_s"] > 0 and s["exposed_comm_s"] > 0 and s["hidden_comm_s"] >= 0
        assert abs(s["compute_s"] + s["exposed_comm_s"] - s["wall_s"]) < 1e-9
        assert set(s["groups"]) == {"row", "depth", "batch"}
    assert out["latest_start"] < 60  # times are relative to a common barrier, not per-process clocks


def test_overlap_options_parse_and_validate():
    assert Overlap.parse("none") == Overlap()
    assert Overlap.parse("all") == Overlap.everything()
    assert Overlap.parse("oag, cache").label() == "oag+cache"
    # the names before OAR and ORS were split, still accepted
    assert Overlap.parse("async_grads,prefetch") == Overlap(oar=True, ors=True, oag=True)
    assert Overlap.from_dict({"async_grads": True, "prefetch": False, "buckets": True}) \
        == Overlap(oar=True, ors=True, buckets=True)
    assert Overlap.parse("buckets", bucket_bytes=64).bucket_bytes == 64
    assert not Overlap(progress="poll").polls and Overlap(cache=True).polls
    assert Overlap.from_dict(Overlap.everything().to_dict()) == Overlap.everything()
    with pytest.raises(ValueError, match="unknown overlap switch"):
        Overlap.parse("oag,bogus")
    with pytest.raises(ValueError, match="progress must be one of"):
        Overlap(progress="magic")
    with pytest.raises(ValueError, match="bucket_bytes must be a positive int"):
        Overlap(buckets=True, bucket_bytes=0)
    with pytest.raises(TypeError, match="must be True or False"):
        Overlap(cache=1)
