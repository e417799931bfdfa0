"""Does the performance model pick the grid that measurement confirms? Rank correlation and the top-1 check."""

from __future__ import annotations

import numpy as np

PICK_WITHIN = 1.10  # the model's pick counts as right when it measures within 10% of the measured best
# (benchmarks/engine_grids.py's criterion too): near-ties between grids are not mistakes


def spearman(a, b) -> float:
    """Spearman's rank correlation of two equally long sequences (no ties expected: times in seconds)."""
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def validate(rows: list[dict], calibrated_on=()) -> dict:
    """Rank correlation and top-1 check over rows of one overlap setting (each: shape, iter_s, prediction).
    ``calibrated_on``: the grid shapes the fit measured itself (``perf.calibration``), left out of the error."""
    meas = [r["iter_s"] for r in rows]
    pred = [r["prediction"]["iter_s"] for r in rows]
    scored = [(p, m) for p, m, r in zip(pred, meas, rows)
              if tuple(r["shape"]) not in {tuple(c) for c in calibrated_on}]
    pick, best = int(np.argmin(pred)), int(np.argmin(meas))
    return {"shapes": len(rows), "spearman": spearman(meas, pred),
            "model_pick": rows[pick]["shape"], "model_pick_measured_s": meas[pick],
            "measured_best": rows[best]["shape"], "measured_best_s": meas[best],
            "pick_over_best": meas[pick] / meas[best], "top1_within_10pct": meas[pick] <= PICK_WITHIN * meas[best],
            "median_abs_rel_error": float(np.median([abs(p - m) / m for p, m in scored]))}
