"""Error figures of predictions against measurements: percentage errors, R² and the coverage
and width of error bands (arrays in, plain floats out; no simulator)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["error_metrics", "interval_metrics"]


def error_metrics(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """MAPE, median and max absolute percentage error (percent) and R² of ``predicted`` vs ``measured``.

    R² = 1 - SS_res / SS_tot on the raw times. Shapes (n,), n >= 1; with n = 0
    every figure is NaN.
    """
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    if predicted.size == 0:
        return {"n": 0, "mape_percent": math.nan, "median_ape_percent": math.nan,
                "max_ape_percent": math.nan, "r2": math.nan}
    ape = np.abs(predicted - measured) / measured * 100
    ss_tot = float(((measured - measured.mean()) ** 2).sum())
    r2 = 1 - float(((measured - predicted) ** 2).sum()) / ss_tot if ss_tot > 0 else math.nan
    return {"n": int(predicted.size), "mape_percent": float(ape.mean()),
            "median_ape_percent": float(np.median(ape)), "max_ape_percent": float(ape.max()), "r2": r2}


def interval_metrics(measured: np.ndarray, predicted: np.ndarray, low: np.ndarray,
                     high: np.ndarray) -> dict[str, Any]:
    """Coverage and width of error bands; arrays of shape (n,), NaN bounds where a row has none.

    Returns ``interval_coverage`` (share of the rows with a band whose measured
    time lies in it, 0..1; None when no row has one), ``interval_rows`` (rows
    with a band) and ``interval_median_width_percent`` (median of
    ``(high - low) / predicted``, percent; None without bands).
    """
    has = ~(np.isnan(low) | np.isnan(high))
    n = int(has.sum())
    if not n:
        return {"interval_coverage": None, "interval_rows": 0, "interval_median_width_percent": None}
    inside = (measured[has] >= low[has]) & (measured[has] <= high[has])
    width = (high[has] - low[has]) / predicted[has] * 100
    return {"interval_coverage": float(inside.mean()), "interval_rows": n,
            "interval_median_width_percent": float(np.median(width))}
