"""Statistics for load-test results: percentiles (numpy's linear method) and per-run summaries. No I/O."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation, as numpy.percentile's default; nan when empty."""
    if not values:
        return math.nan
    xs = sorted(values)
    if len(xs) == 1:
        return float(xs[0])
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    frac = pos - lo
    return float(xs[lo] + (xs[hi] - xs[lo]) * frac)


def summarize(values: Sequence[float]) -> dict[str, float]:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return {
        "count": len(vals),
        "mean": (sum(vals) / len(vals)) if vals else math.nan,
        "p50": percentile(vals, 50),
        "p90": percentile(vals, 90),
        "p99": percentile(vals, 99),
        "max": max(vals) if vals else math.nan,
    }
