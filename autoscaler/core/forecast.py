"""Demand forecast over the scale-up lead time, and the lead time itself.

Two sources, both pure functions of the memory:
- the recent trend: a least-squares line through the demand samples of the last
  ``forecast.trend_window_s``, projected ``horizon`` seconds ahead, less two standard errors of the
  fit there (a ramp the samples bear out, not a swing);
- the same time of day on earlier days (``forecast.seasonal_days``): with ``seasonal_statistic:
  peak`` (the default) the ``seasonal_quantile`` across those days of their busiest 5-minute slot
  within the horizon; with ``rise``, today's level plus that quantile of how much demand rose from
  this slot to the busiest one within the horizon.
The forecast peak is the highest of the current demand, the trend and the seasonal rise; the
seasonal part only once it has predicted better than persistence lately (core/risk.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from autoscaler.core.risk import seasonal_weight, slots_ahead, update_skill
from autoscaler.core.types import Memory, slot_init
from autoscaler.policy.model import Policy

SLOT_S = 300  # seasonal history resolution: 5 minutes
DAY_S = 86400
MAX_STARTUP_SAMPLES = 20
# The seasonal forecast counts once it has predicted at least as well as persistence lately
# (core/risk.py's weight >= 0.5).
SEASONAL_TRUST = 0.5
# The trend projects a ramp only as far as its fit is sure of: its lower ~97.5% bound (2 standard
# errors of the fitted line at the horizon).
TREND_CONFIDENCE_Z = 2.0


def p95(values: tuple[float, ...]) -> float:
    """Nearest-rank 95th percentile: for 20 values, the 19th smallest (ceil(0.95 * 20) = 19)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def lead_time_s(policy: Policy, memory: Memory) -> tuple[float, str]:
    """The measured p95 group start-up once there are enough samples, else the policy's expectation.

    At most 20 samples: sorting them at every tick costs about a microsecond, so nothing is memoised.
    """
    samples = memory.startup_durations_s
    if len(samples) >= policy.forecast.min_startup_samples:
        # The samples change only at a start-up (record_startup): the answer for the same tuple is
        # kept (it holds the tuple, so the identity cannot be reused by another).
        memo = _LEAD_MEMO
        if memo[0] is not samples:
            memo[:] = [samples, (p95(samples), f"p95 of {len(samples)} measured start-ups")]
        return memo[1]
    return policy.fleet.startup_expected_s, "fleet.startup_expected_s"


_LEAD_MEMO: list = [None, None]  # (the start-up samples, their lead time and its source)


def record_startup(memory: Memory, seconds: float) -> Memory:
    """Fold one measured start-up (start command to ready) into the memory; keeps the last 20."""
    return memory.with_(startup_durations_s=(memory.startup_durations_s + (float(seconds),))[-MAX_STARTUP_SAMPLES:])


def record_demand(memory: Memory, policy: Policy, now: float, demand: float, lead_s: float = SLOT_S) -> Memory:
    """Add one demand sample to the trend window and to the seasonal slot history."""
    return memory.with_(**demand_changes(memory, policy, now, demand, lead_s))


def demand_changes(memory: Memory, policy: Policy, now: float, demand: float, lead_s: float = SLOT_S) -> dict:
    """``record_demand`` as the fields it changes (decide folds them into one copy of the memory)."""
    cutoff = now - policy.forecast.trend_window_s
    samples = memory.demand_samples
    drop = 0
    while drop < len(samples) and samples[drop][0] <= cutoff:
        drop += 1
    old = samples
    samples = samples[drop:] + ((now, demand),)
    _carry_sums(old, samples, drop)
    slot = int(now // SLOT_S)
    current = memory.slot_now
    by_slot = memory.demand_by_slot
    if current is None or current[0] == slot:  # (most ticks: the three fields, as one dict)
        return {"demand_samples": samples, "demand_by_slot": by_slot,
                # (max(current[1], demand), as max keeps them)
                "slot_now": (slot, demand if current is None or demand > current[1] else current[1])}
    else:  # a new slot: score the seasonal forecast on the finished one, fold it into the history
        # and forget days past the horizon
        changes: dict = {"seasonal_skill": update_skill(memory, policy, current[0], current[1], lead_s).seasonal_skill}
        keep_from = slot - (policy.forecast.seasonal_days + 1) * (DAY_S // SLOT_S)
        by_slot = _slots_from(by_slot, keep_from)
        last = next(reversed(by_slot), None)
        by_slot[current[0]] = max(by_slot.get(current[0], 0.0), current[1])
        if _IN_ORDER[0] is by_slot:  # still in order when the slot comes after the last (as it does)
            _IN_ORDER[:] = [by_slot, len(by_slot)] if last is None or current[0] >= last else [None, -1]
        changes.update(demand_samples=samples, demand_by_slot=by_slot, slot_now=(slot, demand))
        return changes


# The seasonal history ``_slots_from`` returned last and ``demand_changes`` added its slot to, with
# its size then, when its slots are known to be in ascending order (each added after the ones
# before); [None, -1] otherwise. (It holds the dict, so the identity cannot be reused by another.)
_IN_ORDER: list = [None, -1]


def _slots_from(by_slot: Mapping[int, float], keep_from: int) -> dict[int, float]:
    """A fresh dict of the slots >= ``keep_from``, in the same order.

    Slots are added in time order, so the ones to forget come first: copy (in C) and delete from
    the front instead of filtering ~2,300 slots in Python at every slot; if the order was anything
    else (a history built elsewhere), filter. ``dict.copy`` clones the table while the holes these
    deletions leave are under a third of it (``dict(...)`` inserts key by key once there is one):
    28 us a copy on average over a 14-day replay, against 35. Whether a slot before ``keep_from``
    is left further in is checked by a pass over the slots (``min``: 115 us over 2,300 slots, 3% of
    the replay) only for a history not known to be in order (``_IN_ORDER``: the one this built).
    """
    in_order = _IN_ORDER[0] is by_slot and _IN_ORDER[1] == len(by_slot)
    out = by_slot.copy() if isinstance(by_slot, dict) else dict(by_slot)
    while out:
        first = next(iter(out))
        if first >= keep_from:
            break
        del out[first]
    if not in_order:
        if out and min(out) < keep_from:
            return {k: v for k, v in by_slot.items() if k >= keep_from}
        if not _ascending(out):
            return out
    _IN_ORDER[:] = [out, len(out)]
    return out


def _ascending(slots: Mapping[int, float]) -> bool:
    """Whether the slots are in ascending order (a history this module did not build: once)."""
    keys = list(slots)
    return all(a < b for a, b in zip(keys, keys[1:]))


@slot_init  # (built at every tick)
@dataclass(frozen=True, slots=True)
class ForecastResult:
    level: float  # current demand, smoothed by the trend fit
    trend: float | None  # projected demand at now + horizon from the recent trend
    seasonal: float | None  # what earlier days say of the horizon (see seasonal_statistic)
    peak: float  # the highest of the above and the current demand
    horizon_s: float
    basis: str  # which source set the peak: "current", "trend" or "seasonal"


def _trend(samples: tuple[tuple[float, float], ...], now: float, horizon: float, window: float):
    """(level at now, projection at now + horizon) from a least-squares line, or None if too little data."""
    # A whole window of samples (its span plus one sample interval), not part of one: a fresh
    # controller, or a replay's first minutes while the fleet fills, would read a ramp into the
    # first few minutes' noise and extrapolate it twice as far as it has seen.
    n = len(samples)
    if n < 4 or (samples[-1][0] - samples[0][0]) * n / (n - 1) < 0.95 * window:
        return None
    base = samples[0][0]
    sums = _exact_sums(samples)
    if sums is not None:
        st, sd, stt, std, sdd = sums
    else:
        st = sd = stt = std = sdd = 0.0
        for t, d in samples:  # one pass; times relative to the first sample to keep precision
            t -= base
            st += t
            sd += d
            stt += t * t
            std += t * d
            sdd += d * d
    var = stt - st * st / n
    if var <= 1e-9:
        return None
    sxy = std - st * sd / n
    slope = sxy / var
    mt, md = base + st / n, sd / n
    level = md + slope * (now - mt)
    projection = level + slope * horizon
    if slope > 0:
        # Only the rise the samples bear out: the projection less TREND_CONFIDENCE_Z standard errors
        # of the fitted line there (residual variance over n - 2), never below the level. Swings of
        # 1 to 8 within minutes fit a steep line with wide errors: no ramp; a steady rise fits a
        # line with narrow ones and keeps most of its projection.
        # (each max of two written out as max keeps them, the later only when strictly above: a
        # builtin's call costs more than the arithmetic here, at every tick)
        residual = (sdd - sd * sd / n) - slope * sxy
        residual = (residual if residual > 0.0 else 0.0) / (n - 2)
        x = now + horizon - mt
        low = projection - TREND_CONFIDENCE_Z * math.sqrt(residual * (1.0 / n + x * x / var))
        projection = low if low > level else level
    return (level if level > 0.0 else 0.0), (projection if projection > 0.0 else 0.0)


# The trend's sums carried from tick to tick (``_exact_sums``): (the samples they are of, the time
# they count from, their sums of t, t^2, d, t x d and d^2 as integers).
_SUMS_MEMO: list = [None, 0, None]
_EXACT_LIMIT = 2**20  # each t - t0 and |d| at most this, and at most 2^12 samples: every term and sum under 2^52


def _whole(x: float) -> bool:
    """A float with no fraction (an int, or a float's subclass, is left to the loop)."""
    return type(x) is float and x.is_integer()


def _carry_sums(old: tuple, samples: tuple, drop: int) -> None:
    """The memo of ``_exact_sums`` carried from ``old`` to ``samples`` (``old[drop:]`` and one sample
    more, as ``demand_changes`` builds them): the dropped samples' terms out, the new one's in.
    Nothing when the memo is not of ``old`` or the new sample is not a whole number after the last."""
    memo = _SUMS_MEMO
    if memo[0] is not old:
        return
    memo[0] = None
    t, d = samples[-1]
    # (``_whole`` of both, written out: this runs at every tick)
    if not (type(t) is float and type(d) is float and t.is_integer() and d.is_integer()
            and (len(samples) == 1 or t > samples[-2][0])):
        return
    origin = memo[1]
    s_t, s_tt, s_d, s_td, s_dd = memo[2]
    for t0, d0 in old[:drop]:
        i, j = int(t0) - origin, int(d0)
        s_t -= i
        s_tt -= i * i
        s_d -= j
        s_td -= i * j
        s_dd -= j * j
    i, j = int(t) - origin, int(d)
    memo[2] = (s_t + i, s_tt + i * i, s_d + j, s_td + i * j, s_dd + j * j)  # (the origin stays)
    memo[0] = samples


def _exact_sums(samples: tuple[tuple[float, float], ...]) -> tuple[float, float, float, float, float] | None:
    """``_trend``'s five sums (of t, d, t^2, t x d, d^2, t relative to the first sample), when every
    time and demand is a whole number (a replay's, or a fleet's on whole seconds), the times rise,
    and the window is small enough that the loop's float arithmetic is exact: then its sums are the
    integers' sums, to the bit, whatever the order, and they are carried from the tick before (a
    sample out, one in: ``_carry_sums``) instead of summed over the window again. None otherwise:
    the loop decides."""
    n = len(samples)
    if n > 4096:
        return None
    memo = _SUMS_MEMO
    if memo[0] is not samples:
        origin = int(samples[0][0]) if _whole(samples[0][0]) else 0
        last = None
        s_t = s_tt = s_d = s_td = s_dd = 0
        for t, d in samples:
            if not (_whole(t) and _whole(d)) or (last is not None and t <= last):
                memo[0] = None
                return None
            last = t
            i, j = int(t) - origin, int(d)
            s_t += i
            s_tt += i * i
            s_d += j
            s_td += i * j
            s_dd += j * j
        memo[:] = [samples, origin, (s_t, s_tt, s_d, s_td, s_dd)]
    s_t, s_tt, s_d, s_td, s_dd = memo[2]
    b = int(samples[0][0]) - memo[1]
    # (the times rise: each t - t0 is at most the last's; each d^2 is at most the sum of them)
    if int(samples[-1][0]) - memo[1] - b > _EXACT_LIMIT or s_dd > _EXACT_LIMIT * _EXACT_LIMIT:
        return None
    # relative to the first sample: sum (t - b) = S_t - n b; sum (t - b)^2 = S_tt - 2 b S_t + n b^2;
    # sum (t - b) d = S_td - b S_d
    return (float(s_t - n * b), float(s_d), float(s_tt - 2 * b * s_t + n * b * b), float(s_td - b * s_d),
            float(s_dd))


def _quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile: q=0.5 of [1, 2, 3, 10] = 2.5."""
    values = sorted(values)
    pos = q * (len(values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def seasonal_statistic(memory: Memory, policy: Policy, now: float, horizon: float) -> float | None:
    """The quantile across earlier days of their busiest slot within the horizon ('peak') or of
    its rise over the slot at this time of day ('rise'); None without history."""
    by_slot = memory.demand_by_slot
    fc = policy.forecast
    if not by_slot or fc.seasonal_days == 0:
        return None
    values = []
    slots_ahead = max(1, math.ceil(horizon / SLOT_S))
    for day in range(1, fc.seasonal_days + 1):
        then = int((now - day * DAY_S) // SLOT_S)
        ahead = [by_slot[s] for s in range(then + 1, then + slots_ahead + 1) if s in by_slot]
        if not ahead:
            continue
        if fc.seasonal_statistic == "peak":
            values.append(max(ahead))
        elif then in by_slot:
            values.append(max(ahead) - by_slot[then])
    if not values:
        return None
    return _quantile(values, fc.seasonal_quantile)


def seasonal_memo(memory: Memory, policy: Policy, now: float, horizon: float) -> Memory:
    """Memory whose ``seasonal_memo`` holds the statistic for this slot and horizon."""
    slot, ahead = int(now // SLOT_S), slots_ahead(horizon)
    memo = memory.seasonal_memo
    if memo is not None and memo[0] == slot and memo[1] == ahead:  # (no key tuple built at every tick)
        return memory
    return memory.with_(seasonal_memo=(slot, ahead, seasonal_statistic(memory, policy, now, horizon)))


def forecast(memory: Memory, policy: Policy, now: float, current: float, horizon: float) -> ForecastResult:
    """Forecast peak demand over [now, now + horizon]. ``memory`` already holds the current sample."""
    if not policy.forecast.enabled:
        return ForecastResult(current, None, None, current, horizon, "current")
    fit = _trend(memory.demand_samples, now, horizon, policy.forecast.trend_window_s)
    level, trend = (fit if fit else (current, None))
    memo = memory.seasonal_memo
    if memo is not None and memo[0] == int(now // SLOT_S) and memo[1] == slots_ahead(horizon):
        stat = memo[2]
    else:
        stat = seasonal_statistic(memory, policy, now, horizon)
    if stat is None or seasonal_weight(memory) < SEASONAL_TRUST:
        # No history, or the seasonal forecast has not predicted better than persistence lately:
        # it is not trusted (core/risk.py, "earns its weight").
        seasonal = None
    else:
        seasonal = max(0.0, stat if policy.forecast.seasonal_statistic == "peak" else current + stat)
    peak, basis = current, "current"
    if trend is not None and trend > peak:
        peak, basis = trend, "trend"
    if seasonal is not None and seasonal > peak:
        peak, basis = seasonal, "seasonal"
    return ForecastResult(level, trend, seasonal, peak, horizon, basis)
