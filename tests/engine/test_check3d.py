"""Notebook 04's live check of one 3D layer agrees with the serial layer on every 4-rank grid (float64)."""

from tests.mpi_harness import run_mpi

TOL = 1e-12  # float64, sums of <= 16 products of O(1) values


def test_every_piece_matches_the_serial_layer():
    per_rank = run_mpi(4, "tests.engine.check3d_cases:every_shape", timeout=120)
    reports = [r for rank in per_rank for r in rank]
    assert len(reports) == 4 * 2 * 10  # ranks x (plain, transposed) x the 10 grid shapes of 4
    for r in reports:
        for key in ("y_error", "dx_error", "dw_error", "db_partial_error"):
            assert r[key] < TOL, (r["shape"], r["transposed"], r["rank"], key, r[key])
    # a (2, 1, 2, 1) plain layer: gather W over depth, all-reduce dX over row, reduce-scatter dW over depth
    ops = {(c["op"], c["group"]) for r in reports if r["shape"] == [2, 1, 2, 1] and not r["transposed"]
           for c in r["collectives"]}
    assert ops == {("all_gather", "depth"), ("all_reduce", "row"), ("reduce_scatter", "depth")}


def test_owner_picture_labels_every_rank_once():
    from gpulab.widgets.layout_view import owner_figure

    fig = owner_figure(8, 8, (2, 2, 2, 1))
    left, right = fig.axes
    assert sorted(t.get_text() for t in left.texts) == [f"r={r} c={c}" for r in range(2) for c in range(2)]
    assert sorted(t.get_text().split("\n")[0] for t in right.texts) == sorted(f"rank {i}" for i in range(8))
