"""Axis ticks for the SVG charts (the cost report's page and ``simulate --plot``): pure functions.

Value axes get round ticks (a step of 1, 2, 2.5 or 5 times a power of ten: 0/25/50/75/100, not
0/30/59/88); time axes get ticks on round local times (whole minutes, hours or days in the chart's
zone) and labels without seconds or microseconds.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, tzinfo

_MANTISSAS = (1.0, 2.0, 2.5, 5.0, 10.0)
# Time steps a tick may take, in seconds: minutes, hours, days, a week.
_TIME_STEPS = (60, 120, 300, 600, 900, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600,
               86400, 2 * 86400, 7 * 86400, 14 * 86400, 28 * 86400)


def nice_step(span: float, count: int = 4) -> float:
    """The smallest round step (1, 2, 2.5, 5 x 10^k) that covers ``span`` in at most ``count`` steps:
    nice_step(118, 4) = 50 (0/50/100/150), nice_step(6, 4) = 2."""
    if span <= 0:
        return 1.0
    raw = span / count
    power = 10.0 ** math.floor(math.log10(raw))
    for m in _MANTISSAS:
        if m * power >= raw - 1e-12 * power:
            return m * power
    return 10 * power


def nice_ticks(vmax: float, count: int = 4) -> list[float]:
    """Round ticks from 0 to the first tick at or above ``vmax`` (at least one step)."""
    step = nice_step(vmax, count)
    n = max(1, math.ceil(vmax / step - 1e-9))
    return [round(i * step, 10) for i in range(n + 1)]


def tick_label(v: float) -> str:
    """12 -> '12', 2.5 -> '2.5', 1500 -> '1,500'."""
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,g}"


def time_ticks(lo: float, hi: float, tz: tzinfo, count: int = 7) -> list[tuple[float, str]]:
    """At most ``count`` ticks on round local times in [lo, hi] (epoch s), with their labels."""
    span = hi - lo
    if span <= 0:
        return [(lo, _label(lo, tz, 60, 0))]
    step = next((s for s in _TIME_STEPS if span / s <= count), _TIME_STEPS[-1])
    ticks: list[float] = []
    if step >= 86400:  # local midnights, every step // 86400 days from the first one
        days = step // 86400
        d = datetime.fromtimestamp(lo, tz).replace(hour=0, minute=0, second=0, microsecond=0)
        if d.timestamp() < lo:
            d += timedelta(days=1)
        if days == 7 or days == 14 or days == 28:  # weeks start on Monday
            while d.weekday() != 0:
                d += timedelta(days=1)
        while d.timestamp() <= hi + 1e-6:
            ticks.append(d.timestamp())
            d = (d + timedelta(days=days)).replace(tzinfo=None).replace(tzinfo=tz)  # wall clock, across DST
    else:  # multiples of the step in local wall-clock time
        offset = datetime.fromtimestamp(lo, tz).utcoffset() or timedelta(0)
        off = offset.total_seconds()
        t = math.ceil((lo + off) / step - 1e-9) * step - off
        while t <= hi + 1e-6:
            ticks.append(t)
            t += step
    return [(t, _label(t, tz, step, span)) for t in ticks]


def _label(t: float, tz: tzinfo, step: float, span: float) -> str:
    when = datetime.fromtimestamp(round(t), tz)
    if step >= 86400:
        return when.strftime("%a %d %b") if step < 7 * 86400 else when.strftime("%d %b")
    if span > 86400:
        return when.strftime("%d %b %H:%M")
    return when.strftime("%H:%M")
