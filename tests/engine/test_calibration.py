"""The ranks' wait calibrated on three measured grids (``perf.calibration``): where the model charges it,
where the fit measures it, and that the grids it was measured on are left out of the model's error."""

import pytest

from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.perf.calibration import calibrated_on, calibration_shape, skipped, waits, waits_charged
from gpulab.engine.perf.fitted_machine import FittedMachine
from gpulab.engine.perf.machines import machine as named_machine
from gpulab.engine.perf.pick_validation import validate
from gpulab.engine.perf.predict import predict, wait_s
from gpulab.engine.perf.terms import comm_rows
from gpulab.engine.perf.timing import bench_config
from tests.engine.util import tiny_config

WAIT = 3e-3


def fitted(call_wait: float, ranks: int = 4, row_wait: float = 0.0, data_wait: float = 0.0) -> FittedMachine:
    collectives = {f"{op}/{g}": [1e-4 * g, 1e-9] for op in ("all_reduce", "all_gather", "reduce_scatter")
                   for g in (2, 4)}
    return FittedMachine(name="t", ranks=ranks, cores=2, collectives=collectives, matmul_rate=1e10,
                         elementwise_rate=1e9, kernel_overhead=1e-6, share=1.0, machine_peak=1e10,
                         overlap={"poll": 0.5, "thread": 0.5, "none": 0.0}, memory_bytes=1e9, call_wait=call_wait,
                         row_wait=row_wait, data_wait=data_wait, sources={"measured": "here"})


ROW_WAIT, DATA_WAIT = 1e-3, 5e-3


@pytest.mark.parametrize("shape", [(2, 2, 1, 1), (1, 4, 1, 1), (1, 2, 2, 1), (1, 1, 2, 2), (4, 1, 1, 1)])
@pytest.mark.parametrize("overlap", [Overlap(), Overlap(oar=True, ors=True, oag=True, buckets=True, bucket_bytes=4096)])
@pytest.mark.parametrize("row_wait", [0.0, ROW_WAIT])
@pytest.mark.parametrize("data_wait", [0.0, DATA_WAIT])
def test_each_all_reduce_pays_its_share_of_its_groups_wait_and_nothing_else_does(shape, overlap, row_wait,
                                                                                 data_wait):
    cfg = tiny_config(shape)
    without = predict(cfg, shape, 8, fitted(0.0, row_wait=0.0, data_wait=0.0), overlap)
    with_wait = predict(cfg, shape, 8, fitted(WAIT, row_wait=row_wait, data_wait=data_wait), overlap)
    per_call = {"col": WAIT, "row": row_wait}
    rows = comm_rows(cfg, shape, 8, cfg.block_size, overlap)
    expected = {}
    for r in rows:  # a ring's steps: (g - 1) / (W - 1) of the wait of a call over all W = 4 ranks
        if r["op"] == "all_reduce" and r["group"] in ("row", "col"):
            expected[r["group"]] = (expected.get(r["group"], 0.0)
                                    + r["count"] * per_call[r["group"]] * (r["group_size"] - 1) / 3)
    if shape[3] > 1 and data_wait:  # the replicas' gradient all-reduce: the whole wait, once, however many buckets
        buckets = sum(r["count"] for r in rows if r["group"] == "data")
        assert buckets > 1 if overlap.buckets else buckets == 1
        expected["data"] = data_wait
    assert with_wait["iter_s"] - without["iter_s"] == pytest.approx(sum(expected.values()), abs=1e-12)
    assert with_wait["compute_s"] == without["compute_s"]  # waiting is not hidden behind compute either
    assert with_wait["hidden_comm_s"] == pytest.approx(without["hidden_comm_s"])
    for group, g in with_wait["groups"].items():
        extra = expected.get(group, 0.0)
        assert g["time_s"] - without["groups"][group]["time_s"] == pytest.approx(extra, abs=1e-12), group
        assert g["exposed_s"] - without["groups"][group]["exposed_s"] == pytest.approx(extra, abs=1e-12), group


def test_no_wait_is_charged_without_a_calibration_or_on_a_named_machine():
    row = {"op": "all_reduce", "group": "col", "group_size": 4, "phase": "backward", "count": 1}
    assert wait_s(fitted(WAIT), row) == pytest.approx(WAIT)
    assert wait_s(fitted(WAIT), {**row, "group_size": 2}) == pytest.approx(WAIT / 3)
    assert wait_s(fitted(WAIT), {**row, "op": "all_gather"}) == 0.0
    assert wait_s(fitted(WAIT), {**row, "group": "depth"}) == 0.0
    assert wait_s(fitted(WAIT), {**row, "group": "data"}) == 0.0
    assert wait_s(fitted(0.0), row) == 0.0
    assert wait_s(named_machine("perlmutter"), row) == 0.0  # the published machines carry no calibration
    assert FittedMachine.mean([fitted(WAIT), fitted(0.0)]).call_wait == pytest.approx(WAIT / 2)
    row = {**row, "group": "row"}
    assert wait_s(fitted(WAIT, row_wait=ROW_WAIT), row) == pytest.approx(ROW_WAIT)  # each group its own wait
    assert wait_s(fitted(WAIT, row_wait=0.0), row) == 0.0
    assert FittedMachine.mean([fitted(WAIT, row_wait=ROW_WAIT), fitted(0.0, row_wait=0.0)]).row_wait == \
        pytest.approx(ROW_WAIT / 2)
    grads = {**row, "group": "data", "phase": "grad-sync", "count": 4}  # four buckets pay the wait once
    assert wait_s(fitted(WAIT, data_wait=DATA_WAIT), grads) == pytest.approx(DATA_WAIT / 4)
    assert wait_s(fitted(WAIT, data_wait=DATA_WAIT), {**grads, "op": "reduce_scatter"}) == pytest.approx(DATA_WAIT / 4)
    assert wait_s(fitted(WAIT, data_wait=DATA_WAIT), {**grads, "phase": "optimizer"}) == 0.0  # ZeRO-1's gather
    assert wait_s(fitted(WAIT), grads) == 0.0  # no data wait calibrated: the replicas pay nothing
    assert wait_s(named_machine("perlmutter"), grads) == 0.0
    assert FittedMachine.mean([fitted(WAIT, data_wait=DATA_WAIT), fitted(WAIT, data_wait=0.0)]).data_wait == \
        pytest.approx(DATA_WAIT / 2)


def test_the_distributed_optimizer_pays_the_data_wait_once_on_its_reduce_scatter():
    cfg, shape = tiny_config((1, 1, 2, 2)), (1, 1, 2, 2)
    args = dict(distributed_optimizer=True)
    without = predict(cfg, shape, 8, fitted(0.0, data_wait=0.0), **args)
    with_wait = predict(cfg, shape, 8, fitted(0.0, data_wait=DATA_WAIT), **args)
    assert with_wait["iter_s"] - without["iter_s"] == pytest.approx(DATA_WAIT, abs=1e-12)


def test_the_fit_calibrates_wherever_the_reference_model_splits_over_the_ranks():
    cfg = bench_config()
    assert skipped(4, cfg) == "" and skipped(8, cfg) == ""
    assert skipped(1, cfg).startswith("one rank")
    assert "does not split over 3 ranks" in skipped(3, cfg)  # n_embd 128 over 3 columns
    assert calibration_shape(8) == (1, 8, 1, 1) and calibration_shape(8, "row") == (8, 1, 1, 1)
    assert calibration_shape(8, "data") == (1, 1, 1, 8)
    assert waits_charged(cfg, (1, 4, 1, 1), 16) == 24  # the reference model's col all-reduces an iteration
    assert waits_charged(cfg, (4, 1, 1, 1), 16, "row") == 12  # and row
    assert waits_charged(cfg, (1, 1, 1, 4), 16, "data") == 1  # the replicas meet once an iteration
    assert waits_charged(cfg, (1, 4, 1, 1), 16, "data") == 0


def test_each_wait_is_what_its_grid_took_beyond_the_model_per_call_never_below_zero():
    cfg, machine = bench_config(), fitted(0.0, ranks=4, row_wait=0.0, data_wait=0.0)
    priced = {g: predict(cfg, calibration_shape(4, g), 16, machine)["iter_s"] for g in ("col", "row", "data")}
    slower = [{"col": priced["col"] + 0.048, "row": priced["row"] + 0.024, "data": priced["data"] + 0.007},
              {"col": priced["col"] + 0.096, "row": priced["row"] - 0.010, "data": priced["data"] + 0.009}]
    found, how = waits(machine, slower)  # the faster of two is kept
    assert found["call_wait"] == pytest.approx(0.048 / 24) and found["row_wait"] == 0.0
    assert found["data_wait"] == pytest.approx(0.007)  # once an iteration
    assert "col: grid (1, 4, 1, 1)" in how and "row: grid (4, 1, 1, 1)" in how and "data: grid (1, 1, 1, 4)" in how
    found, how = waits(machine, [slower[0], None])
    assert found == {"call_wait": 0.0, "row_wait": 0.0, "data_wait": 0.0} and "not measured" in how


def test_scoring_leaves_out_the_grids_the_fit_measured_only_where_it_calibrated():
    from types import SimpleNamespace

    three = [(1, 8, 1, 1), (8, 1, 1, 1), (1, 1, 1, 8)]
    assert calibrated_on(SimpleNamespace(ranks=8, call_wait=0.004, row_wait=0.0, data_wait=0.0)) == three
    assert calibrated_on(SimpleNamespace(ranks=8, call_wait=0.0, row_wait=0.0, data_wait=0.002)) == three
    assert calibrated_on(SimpleNamespace(ranks=8, call_wait=0.0, row_wait=0.0, data_wait=0.0)) == []  # none found
    assert calibrated_on(named_machine("perlmutter")) == []  # a profile measured no grid


def test_the_grid_the_fit_measured_is_left_out_of_the_error_but_not_of_the_pick():
    rows = [{"shape": [1, 4, 1, 1], "iter_s": 1.0, "prediction": {"iter_s": 2.0}},
            {"shape": [1, 1, 1, 4], "iter_s": 1.0, "prediction": {"iter_s": 1.1}},
            {"shape": [2, 2, 1, 1], "iter_s": 2.0, "prediction": {"iter_s": 2.2}}]
    assert validate(rows)["median_abs_rel_error"] == pytest.approx(0.1)
    assert validate(rows, [(1, 4, 1, 1)])["median_abs_rel_error"] == pytest.approx(0.1)
    rows[1]["prediction"]["iter_s"] = 1.5  # now the left-out grid would move the median
    assert validate(rows)["median_abs_rel_error"] == pytest.approx(0.5)
    assert validate(rows, [(1, 4, 1, 1)])["median_abs_rel_error"] == pytest.approx(0.3)
    assert validate(rows, [(1, 4, 1, 1), (2, 2, 1, 1)])["median_abs_rel_error"] == pytest.approx(0.5)
    left_out = validate(rows, [(1, 4, 1, 1)])
    assert left_out["shapes"] == 3 and left_out["model_pick"] == [1, 1, 1, 4]
