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


def union_length(intervals: Sequence[tuple[float, float]]) -> float:
    """Total length covered by [start, end) intervals (overlaps counted once)."""
    total = 0.0
    cur_start = cur_end = None
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def decode_tokens_per_s(results: Sequence[dict]) -> float:
    """Aggregate decode rate: tokens after each stream's first / time while any stream was decoding.

    A stream decodes from its first token to its end (sent_s + ttft_s .. sent_s + e2e_s). With streams
    in lockstep (continuous batching) that is N x the per-stream rate; with a server that runs one
    request at a time it is the single-stream rate, however many clients wait."""
    done = [r for r in results if r.get("error") is None and not r.get("cancelled") and r.get("ttft_s") is not None]
    tokens = sum(max(0, r["completion_tokens"] - 1) for r in done)
    window = union_length([(r["sent_s"] + r["ttft_s"], r["sent_s"] + r["e2e_s"]) for r in done])
    return tokens / window if window > 0 else math.nan
