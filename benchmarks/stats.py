"""The statistics of the benchmark tables: percentiles, summaries, ratios."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), linear interpolation."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary(values: Sequence[float]) -> dict[str, Any]:
    """n, median (p50), p99, min, max, mean."""
    vals = [float(v) for v in values]
    if not vals:
        return {"n": 0}
    return {
        "n": len(vals),
        "p50": statistics.median(vals),
        "p99": percentile(vals, 99),
        "min": min(vals),
        "max": max(vals),
        "mean": statistics.fmean(vals),
    }


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)
