"""The straight line t = alpha + beta x fitted on relative error, which both fits of a machine use."""

from __future__ import annotations

import numpy as np


def relative_line(x, t) -> tuple[float, float]:
    """(alpha, beta) minimising sum(((alpha + beta x) - t) / t)^2, unclamped: callers decide what a
    negative intercept or slope means for what they measured.

    Relative error, so that a 1 us message counts as much as a 1 ms one: an
    absolute least squares would follow the largest sizes only.
    """
    x, t = np.asarray(x, float), np.asarray(t, float)
    a = np.column_stack([np.ones_like(x), x]) / t[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    return float(alpha), float(beta)
