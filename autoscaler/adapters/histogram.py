"""Arithmetic on a histogram's cumulative bucket counts, shared by the Prometheus and the direct
signal readers."""

from __future__ import annotations

import math
from collections.abc import Mapping


def share_above(buckets: Mapping[float, float], target: float) -> float | None:
    """The share of observations above ``target`` from cumulative counts per upper bound (``le``),
    interpolated linearly within the bucket that holds the target, as ``histogram_quantile`` does:
    {2: 90, 4: 100, inf: 100}, target 3 -> 95 within, 0.05 above. None without observations or
    without the +Inf bucket."""
    bounds = sorted(buckets)
    if not bounds or bounds[-1] != math.inf:
        return None
    total = buckets[math.inf]
    if not total > 0:
        return None
    within, lo_bound, lo_count = 0.0, 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if bound >= target:
            within = lo_count if bound == math.inf else \
                lo_count + (count - lo_count) * (target - lo_bound) / (bound - lo_bound)
            break
        lo_bound, lo_count = bound, count
    return min(1.0, max(0.0, 1.0 - within / total))
