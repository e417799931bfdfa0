"""The ranks' wait calibrated on one measured grid (``perf.calibration``): where the model charges it,
where the fit measures it, and that the grid it was measured on is left out of the model's error."""

from dataclasses import replace

import pytest

from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.perf.agreement import validate
from gpulab.engine.perf.calibration import calibrated_on, calibration_shape, col_all_reduces, skipped
from gpulab.engine.perf.fit import FittedMachine
from gpulab.engine.perf.machines import machine as named_machine
from gpulab.engine.perf.predict import predict, wait_s
from gpulab.engine.perf.terms import comm_rows
from gpulab.engine.perf.timing import bench_config
from tests.engine.util import tiny_config

WAIT = 3e-3


def fitted(call_wait: float, ranks: int = 4) -> FittedMachine:
    collectives = {f"{op}/{g}": [1e-4 * g, 1e-9] for op in ("all_reduce", "all_gather", "reduce_scatter")
                   for g in (2, 4)}
    return FittedMachine(name="t", ranks=ranks, cores=2, collectives=collectives, matmul_rate=1e10,
                         elementwise_rate=1e9, kernel_overhead=1e-6, share=1.0, machine_peak=1e10,
                         overlap={"poll": 0.5, "thread": 0.5, "none": 0.0}, memory_bytes=1e9, call_wait=call_wait,
                         sources={"measured": "here"})


@pytest.mark.parametrize("shape", [(2, 2, 1, 1), (1, 4, 1, 1), (1, 2, 2, 1), (1, 1, 2, 2), (4, 1, 1, 1)])
@pytest.mark.parametrize("overlap", [Overlap(), Overlap(oar=True, ors=True, oag=True, buckets=True)])
def test_each_row_and_col_all_reduce_pays_its_share_of_the_wait_and_nothing_else_does(shape, overlap):
    cfg = tiny_config(shape)
    without, with_wait = (predict(cfg, shape, 8, fitted(w), overlap) for w in (0.0, WAIT))
    rows = comm_rows(cfg, shape, 8, cfg.block_size, overlap)
    expected = {}
    for r in rows:  # a ring's steps: (g - 1) / (W - 1) of the wait of a call over all W = 4 ranks
        if r["op"] == "all_reduce" and r["group"] in ("row", "col"):
            expected[r["group"]] = expected.get(r["group"], 0.0) + r["count"] * WAIT * (r["group_size"] - 1) / 3
    assert with_wait["iter_s"] - without["iter_s"] == pytest.approx(sum(expected.values()), abs=1e-12)
    assert with_wait["compute_s"] == without["compute_s"]  # waiting is not hidden behind compute either
    assert with_wait["hidden_comm_s"] == pytest.approx(without["hidden_comm_s"])
    for group, g in with_wait["groups"].items():
        extra = expected.get(group, 0.0)
        assert g["time_s"] - without["groups"][group]["time_s"] == pytest.approx(extra, abs=1e-12), group
        assert g["exposed_s"] - without["groups"][group]["exposed_s"] == pytest.approx(extra, abs=1e-12), group


def test_no_wait_is_charged_without_a_calibration_or_on_a_named_machine():
    row = {"op": "all_reduce", "group": "col", "group_size": 4}
    assert wait_s(fitted(WAIT), row) == pytest.approx(WAIT)
    assert wait_s(fitted(WAIT), {**row, "group_size": 2}) == pytest.approx(WAIT / 3)
    assert wait_s(fitted(WAIT), {**row, "op": "all_gather"}) == 0.0
    assert wait_s(fitted(WAIT), {**row, "group": "depth"}) == 0.0
    assert wait_s(fitted(WAIT), {**row, "group": "data"}) == 0.0
    assert wait_s(fitted(0.0), row) == 0.0
    assert wait_s(named_machine("perlmutter"), row) == 0.0  # the published machines carry no calibration
    assert FittedMachine.mean([fitted(WAIT), fitted(0.0)]).call_wait == pytest.approx(WAIT / 2)


def test_the_fit_calibrates_only_on_one_node_with_a_grid_the_reference_model_splits():
    cfg = bench_config()
    assert skipped(4, 4, cfg) == "" and skipped(8, 8, cfg) == ""
    assert skipped(1, 1, cfg).startswith("one rank")
    assert "several nodes (2 of 4" in skipped(4, 2, cfg)  # emulated nodes: calls across a link differ
    assert "does not split over 3 ranks" in skipped(3, 3, cfg)  # n_embd 128 over 3 columns
    assert calibration_shape(8) == (1, 8, 1, 1)
    assert col_all_reduces(cfg, (1, 4, 1, 1), 16) == 24  # the reference model's col all-reduces an iteration


def test_scoring_leaves_out_the_grid_the_fit_measured_only_where_it_calibrated():
    from types import SimpleNamespace

    assert calibrated_on(SimpleNamespace(ranks=8, call_wait=0.004)) == (1, 8, 1, 1)
    assert calibrated_on(SimpleNamespace(ranks=8, call_wait=0.0)) is None  # several nodes: nothing measured


def test_the_grid_the_fit_measured_is_left_out_of_the_error_but_not_of_the_pick():
    rows = [{"shape": [1, 4, 1, 1], "iter_s": 1.0, "prediction": {"iter_s": 2.0}},
            {"shape": [1, 1, 1, 4], "iter_s": 1.0, "prediction": {"iter_s": 1.1}},
            {"shape": [2, 2, 1, 1], "iter_s": 2.0, "prediction": {"iter_s": 2.2}}]
    assert validate(rows)["median_abs_rel_error"] == pytest.approx(0.1)
    assert validate(rows, (1, 4, 1, 1))["median_abs_rel_error"] == pytest.approx(0.1)
    rows[1]["prediction"]["iter_s"] = 1.5  # now the left-out grid would move the median
    assert validate(rows)["median_abs_rel_error"] == pytest.approx(0.5)
    assert validate(rows, (1, 4, 1, 1))["median_abs_rel_error"] == pytest.approx(0.3)
    assert validate(rows, (1, 4, 1, 1))["shapes"] == 3 and validate(rows, (1, 4, 1, 1))["model_pick"] == [1, 1, 1, 4]


def test_a_fit_saved_before_the_calibration_charges_no_wait():
    from dataclasses import asdict

    saved = asdict(fitted(WAIT))
    del saved["call_wait"]
    assert FittedMachine.from_dict(saved).call_wait == 0.0
    assert replace(fitted(WAIT), call_wait=0.0) == fitted(0.0)
