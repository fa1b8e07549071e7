"""The measured risk of a scale-down, and the SLO error budget that sets how much risk to take.

The question a scale-down asks: what is the chance that demand within one lead time (the measured
start-up plus a tick: how long a group takes to come back) exceeds what the remaining groups
carry? It is estimated from the fleet's own history, with two sources:

- **recent rises** (regime shifts): for every closed minute of the last ``RECENT_MINUTES``, how far
  demand (the minute's mean) rose from that minute to the busiest minute within one lead time after it,
  normalised by sqrt(level + 1) so that moments at other levels compare (a Poisson-like spread: a
  rise of 3 from level 8 is z = 3 / sqrt(9) = 1.0, i.e. a rise of 2 from level 3).
  P_recent = the share of those moments whose rise, applied to today's level, would exceed the
  remaining capacity; or, when higher, the same share over the week (**the week's tail**: each
  rise that leaves the three hours joins its hour, which keeps its ``TAIL_PER_HOUR`` highest rises
  and the count of its minutes, for ``TAIL_HOURS`` more hours), so that a quiet three hours do not
  forget the bursts of the days before.
- **the same time of day on earlier days**: for each of ``forecast.seasonal_days``, and each
  5-minute slot within ``SEASONAL_WINDOW_SLOTS`` of this time of day on that day (13 moments a
  day), the growth from that moment's level to its busiest slot within the lead time after it,
  applied to today's level. P_seasonal = the share of those moments that would exceed (with one
  pseudo-moment at P_recent). Thirteen moments a day, not one: a single burst on one of seven days
  is 1 of 91 moments (1.1%), not 1 of 7 days (14%), which alone would hold a group for the whole
  week at that hour; and a time of day that is busy on most days still counts as busy.

The seasonal share earns its weight by how well it predicted recently: at every slot that closes,
the seasonal prediction for it and the persistence prediction made one lead time before it are
compared to what came; their mean absolute errors (exponentially weighted, ``SKILL_HALF_LIFE_SLOTS``) give
weight = e_persistence / (e_persistence + e_seasonal). No measured skill means weight 0: the
seasonal forecast is not trusted by default.

P = max(P_recent, (1 - weight) x P_recent + weight x P_seasonal): the seasonal share raises the
risk by its weight, and never lowers what the rises measured.

**The error budget** (``slo.capacity_miss_budget_pct``). Each tick the core estimates the requests
that missed because of capacity from its signals: the arrivals over the tick (request rate x tick),
times a share that grows with the queue wait they meet against the TTFT target (all of them once
the wait reaches it), when the queue wait at the SLO percentile was above
``scale_up.slo_burn_min_queue_wait_s`` (without that signal: whenever requests were queued) and
fewer groups than the ceiling were ready (with every group the ceiling allows serving, misses are
not the scaling's doing; while the ceiling's last group is still starting, they are the cost of
the drain that took it away). An arrival that finds Q requests queued waits about Q / arrival
rate, so the share is min(1, Q / rate / TTFT target): queued 3 at 2 requests/s, a 1.5 s wait
against 3 s, half the tick's arrivals. Replays, which know every request's queue wait, check this
count against the true capacity misses (bench/burn_calibration.py: 0.82-0.99 of them on the 14-day
shared traces; the estimate it replaced, the queued share of the requests in the system while
fewer groups than the ceiling were active, counted 0.03-0.11 of them). Burn = that share of arrivals (exponentially weighted, half-life ``BURN_HALF_LIFE_MINUTES`` minutes) / the budget, counted with
a prior of ``BURN_PRIOR_MISSES`` misses spent exactly at the budget (at 1%: 10 misses in 1,000
arrivals), so that boldness is earned: a fresh fleet starts at burn 1, and 1,000 arrivals without
a miss halve it, not zero it. A scale-down may take risk up to budget x min(2, max(1/2, 1 / burn)):
a budget burning twice as fast as allowed halves the risk it may take; one left unspent over
1,000 arrivals or more (at 1%) allows twice the budget. (A cap of 4 let an unspent budget take 3%
at 0.75%, and m-small at eight groups lost 0.52 pp of SLO to it; with 2, no cell of the matrix at
3, 5 or 8 groups is more than 0.5 pp below always-on.)

**The core's minute** is ``forecast.minute_s`` long: 60 s on a real fleet. Every time above that is
counted in minutes (the per-minute means, the lead time in minutes, the 180 minutes of recent rises,
the burn's half-life) follows it, so a fleet whose time is compressed (the demo replays a day in
minutes, with 8 s start-ups) measures its rises at its own scale: with minute_s 2, a lead time of
9 s is 5 minutes, and 30 measured rises (``PRIOR_RISES``) take a minute of wall time, not half an
hour. The seasonal history (5-minute slots, days) stays in wall time: it is about the time of day.

Everything here is a pure function of (memory, policy, numbers); the memory holds only tuples and
floats, so it serialises to JSON (Memory.to_dict) and back (adapters.snapshot_file).
"""

from __future__ import annotations

import math
from bisect import bisect_right, insort
from dataclasses import dataclass
from itertools import chain
from typing import cast

import numpy as np

from autoscaler.core.types import Memory, slot_init
from autoscaler.policy.model import Policy

MINUTE_S = 60  # the default of ``forecast.minute_s``: the core's minute, in which the risk's history is kept
SLOT_S = 300
DAY_S = 86400
RECENT_MINUTES = 180  # three hours of recent rises (at the default minute)
# The cold-start prior of a rise within one lead time, in units of sqrt(level + 1): normal with this
# mean and spread (a load at level 8 is expected to reach 8 + 0.5 x 3 = 9.5 and exceeds
# 8 + 2 x 3 = 14 with 2.3% chance: (2 - 0.5) / 0.75 = 2 sd), until PRIOR_RISES minutes are measured.
PRIOR_Z_MEAN = 0.5
PRIOR_Z_SD = 0.75
PRIOR_RISES = 30
TAIL_HOURS = 165  # the week's tail: seven days less the three recent hours
TAIL_PER_HOUR = 24  # two bursts an hour: a burst shows in the rise of every minute within a lead time before it (12 at 615 s)
# A rise is measured to halfway between a later minute's mean and its busiest tick: minute means
# alone hid the bursts shorter than a minute that queue requests past the TTFT target while a group
# starts (m-small: 6 of 45 matrix cells more than 0.5 pp below always-on's SLO; with this, none).
PEAK_WEIGHT = 0.5
SKILL_HALF_LIFE_SLOTS = 288.0  # one day of 5-minute slots
BURN_HALF_LIFE_MINUTES = 360.0  # six hours at the default minute
BURN_HALF_LIFE_S = BURN_HALF_LIFE_MINUTES * MINUTE_S
# The same misses and arrivals over a longer memory: three days at the default minute (the slowest
# of the SRE workbook's burn-rate windows). Six hours forget each burst before the next; a budget
# spent a burst at a time over days shows here (``burn_rate``: the higher of the two counts).
BURN_LONG_HALF_LIFE_MINUTES = 4320.0
MAX_BOLDNESS = 2.0  # an unspent budget allows 2 x its risk, a burning one half (4 x lost the SLO at eight groups)
TRAFFIC_SMOOTHING_S = 600.0  # the traffic a silence remembers: rate and demand smoothed over ten minutes
SILENCE_BUDGET_SHARE = 0.5  # a silence drain may stake at most this share of the budget's free misses
BURN_PRIOR_MISSES = 10.0  # the burn's prior: this many misses, in as many arrivals as spend them at the budget
SEASONAL_WINDOW_SLOTS = 6  # +-30 minutes around this time of day on each earlier day
# Drains that move sessions (``session_move_changes``): how long after a drain its conversations
# are looked for (their next turns), the half-life of the baseline share of first tokens over the
# TTFT target, and the noise allowed before the excess is charged (standard deviations).
SESSION_WATCH_MINUTES = 15.0
OVER_SHARE_HALF_LIFE_MINUTES = 60.0
SESSION_NOISE_Z = 2.0


@dataclass(frozen=True, slots=True)
class Risk:
    probability: float  # P(demand within the lead time > capacity)
    p_recent: float
    p_seasonal: float | None
    seasonal_weight: float
    samples: int  # measured recent rises the estimate stands on (besides the prior)
    seasonal_days: int
    # "minute": one rise per closed minute; "tick": the cold start's rises from a minute starting
    # at every tick (``tick_rise_changes``), before PRIOR_RISES minutes are measured.
    resolution: str = "minute"
    # The week's tail (``tail_changes``): the share over the three hours' rises and the tail's
    # highest rises, of every minute they stand for; None before any rise has left the three hours.
    # ``p_recent`` is the higher of it and the three hours' own share (``p_hours``).
    p_week: float | None = None
    week_minutes: int = 0
    p_hours: float | None = None

    def to_dict(self) -> dict:
        return {"probability": round(self.probability, 5), "p_recent": round(self.p_recent, 5),
                "p_seasonal": None if self.p_seasonal is None else round(self.p_seasonal, 5),
                "seasonal_weight": round(self.seasonal_weight, 4), "rise_samples": self.samples,
                "rise_resolution": self.resolution, "seasonal_days_used": self.seasonal_days,
                "p_week": None if self.p_week is None else round(self.p_week, 5), "week_minutes": self.week_minutes}


def lead_minutes(lead_s: float, minute_s: float = MINUTE_S) -> int:
    """Whole minutes that cover one lead time: 615 s -> 11; with ``forecast.minute_s`` 2 (a compressed
    fleet), 9 s -> 5."""
    minutes = math.ceil(lead_s / minute_s - 1e-9)
    return minutes if minutes > 1 else 1  # (max(1, minutes), written out: several times a tick)


def _z(rise: float, level: float) -> float:
    return rise / math.sqrt(level + 1.0)


def record_minute(memory: Memory, now: float, demand: float, lead_s: float, minute_s: float = MINUTE_S) -> Memory:
    """Memory with one demand sample folded into the per-minute means (``minute_changes``)."""
    changes = minute_changes(memory, now, demand, lead_s, minute_s)
    return memory.with_(**changes) if changes else memory


def minute_changes(memory: Memory, now: float, demand: float, lead_s: float, minute_s: float = MINUTE_S) -> dict:
    """Fold one demand sample into the per-minute means; when a minute closes, the minute one lead
    time before it now has its measured rise, which joins the recent rises.

    The base is the minute's mean; how high demand reached after it is halfway from each later
    minute's mean to its busiest tick (``_reached``): the mean alone hid the sub-minute bursts that
    queue requests past the TTFT target (a burst to 16 for 15 s of a minute at 3 is a mean of 6),
    and the busiest tick alone reads every tick's noise as a rise.

    The minute is ``forecast.minute_s`` long (60 s on a real fleet). A minute index below the one in
    progress (the clock went back, or the policy's minute got longer) starts the minute history
    afresh: indices in two units cannot be compared, and the rises measured in the old one are dropped.
    """
    minute = int(now // minute_s)
    cur = memory.minute_now
    if cur is not None and minute < cur[0]:
        return {"minute_now": (minute, demand, 1, demand), "minute_max": (), "rise_log": (), "rises_sorted": (),
                "rise_reach": (), "rise_tail": (), "tail_sorted": (), "tail_minutes": 0}
    if cur is None or cur[0] == minute:
        if cur is None:
            return {"minute_now": (minute, demand, 1, demand)}
        peak = cur[3] if len(cur) > 3 else cur[1] / cur[2]  # (``_peak`` and ``max``, as max keeps them: every tick)
        return {"minute_now": (minute, cur[1] + demand, cur[2] + 1, demand if demand > peak else peak)}
    ell = lead_minutes(lead_s, minute_s)
    closed = memory.minute_max + ((cur[0], cur[1] / cur[2], _peak(cur)),)
    # Keep enough closed minutes to measure the next rises: the last ``ell + 1``.
    keep_from = cur[0] - ell
    drop = 0
    while drop < len(closed) and closed[drop][0] < keep_from:
        drop += 1
    closed = closed[drop:]
    log, ordered, reach = memory.rise_log, memory.rises_sorted, memory.rise_reach
    k = cur[0] - ell  # the minute whose lead time just completed
    base = next((c[1] for c in closed if c[0] == k), None)
    if base is not None:
        ahead = [_reached(c) for c in closed if k < c[0] <= cur[0]]
        if ahead:
            top = max(ahead)
            z = _z(top - base, base)
            log = log + ((k, z, base, top),)
            values = list(ordered)
            insort(values, z)
            detail = list(reach) if len(reach) == len(ordered) else None
            edits: list[tuple[int, tuple[float, float, float] | None]] = []  # (index, row inserted or None)
            if detail is not None:
                row = (z, base, top)
                at = bisect_right(detail, row)
                detail.insert(at, row)
                edits.append((at, row))
            cut = 0
            while cut < len(log) and log[cut][0] <= k - RECENT_MINUTES:
                cut += 1
            for old in log[:cut]:
                del values[bisect_right(values, old[1]) - 1]
                if detail is not None and len(old) == 4:
                    at = bisect_right(detail, old[1:]) - 1
                    del detail[at]
                    edits.append((at, None))
                elif detail is not None:
                    detail = None
            aged = log[:cut]
            log = log[cut:]
            ordered = tuple(values)
            old_reach = reach
            reach = () if detail is None else tuple(detail)
            if reach and _hours_arrays[0] is old_reach:
                _edit_hours_arrays(reach, edits)
            if aged:
                out = {"minute_now": (minute, demand, 1, demand), "minute_max": closed, "rise_log": log,
                       "rises_sorted": ordered, "rise_reach": reach}
                out.update(tail_changes(memory, aged, k))
                return out
    return {"minute_now": (minute, demand, 1, demand), "minute_max": closed, "rise_log": log, "rises_sorted": ordered,
            "rise_reach": reach}


def tail_changes(memory: Memory, aged: tuple, minute: int) -> dict:
    """Rises that left the three hours (``aged``, in time order) join the week's tail.

    Each hour of the tail keeps how many minutes it measured and its ``TAIL_PER_HOUR`` highest rises,
    for ``TAIL_HOURS`` hours before the three: a week of rare bursts, at a few numbers an hour. A rise
    without a base (older memory) counts its minute but is not kept: its reach is unknown. The
    rises of the closed hours (all but the last) are kept sorted as well, rebuilt when an hour
    closes or leaves the week: once an hour, not at every minute."""
    tail = list(memory.rise_tail)
    total = memory.tail_minutes
    closed_changed = False
    for old in aged:
        hour = old[0] // 60
        if tail and tail[-1][0] > hour:  # the clock went back: keep the tail in order
            continue
        if not tail or tail[-1][0] < hour:
            closed_changed = closed_changed or bool(tail)
            tail.append((hour, 0, ()))
        _, count, tops = tail[-1]
        total += 1
        if len(old) == 4 and (len(tops) < TAIL_PER_HOUR or old[1:] > tops[0]):
            kept = list(tops)
            insort(kept, (old[1], old[2], old[3]))
            tops = tuple(kept[-TAIL_PER_HOUR:])
        tail[-1] = (hour, count + 1, tops)
    first_hour = (minute - RECENT_MINUTES) // 60 - TAIL_HOURS
    cut = 0
    while cut < len(tail) and tail[cut][0] < first_hour:
        total -= tail[cut][1]
        cut += 1
    tail = tail[cut:]
    out: dict = {"rise_tail": tuple(tail), "tail_minutes": total}
    if closed_changed or cut:
        out["tail_sorted"] = _closed_tail_update(memory.rise_tail, memory.tail_sorted, tail)
    return out


def closed_tail_rises(tail: tuple) -> tuple:
    """The rises of the tail's closed hours (all but its last), sorted: ``Memory.tail_sorted``."""
    return tuple(sorted(r for _, _, tops in tail[:-1] for r in tops))


def _closed_tail_update(old_tail: tuple, old_sorted: tuple, tail: list) -> tuple:
    """``closed_tail_rises(tail)``, from the old tail's: the hours that left the closed ones taken
    out and the newly closed ones put in (an hour a time: 24 rises in and out of ~3,900, where
    sorting them all again took a sixth of the risk's time in a 14-day replay). The same tuple as
    the full sort; that is rebuilt when the old one does not match the old tail."""
    before = {h: tops for h, _, tops in old_tail[:-1]}
    if len(old_sorted) != sum(len(tops) for tops in before.values()):
        return closed_tail_rises(tuple(tail))
    after = {h: tops for h, _, tops in tail[:-1]}
    values = list(old_sorted)
    for hour, tops in before.items():
        if hour not in after:
            for r in tops:
                del values[bisect_right(values, r) - 1]
    for hour, tops in after.items():
        if before.get(hour) is not tops:
            if hour in before:  # (an hour closed in both but changed: not a step tail_changes takes)
                return closed_tail_rises(tuple(tail))
            for r in tops:
                insort(values, r)
    return tuple(values)


# (the closed hours' sorted rises, their rises and reaches as arrays): they change once an hour, and
# the risk counts over them at every tick.
_tail_arrays: list = [None, None, None]


# The tail seen from one time of day (``tail_view``): (the rise_tail's closed hours, the hour of day,
# the hours of day kept, their rises' z and reach as arrays, their minutes).
_tod_cache: list = [None, None, None, None, None, None]


def _near(hour: int, now_hour: int, within_h: float) -> bool:
    """Whether hour-of-day ``hour`` is within ``within_h`` hours of ``now_hour``, around midnight too."""
    d = abs(hour - now_hour) % 24
    return min(d, 24 - d) <= within_h


def tail_view(memory: Memory, now: float, within_h: float | None) -> tuple[np.ndarray, np.ndarray, tuple, int]:
    """The week's tail as the risk reads it: (its closed hours' rises' z, sorted, and their reach in
    requests (reached - base), as arrays; the last hour's rises; the minutes they stand for).

    With ``within_h`` (``scaling.scale_down.tail_within_h``) only the hours whose time of day is
    within that many hours of now's count (on earlier days; the three recent hours always count in
    full): a daily cycle's evening bursts say little about its nights, where a node-hour is cheapest
    in misses. E.g. at 04:20 with 2 h, the hours that began at 02:00-06:00 of the tail's days. The
    hours of the tail change once an hour: the arrays are rebuilt then, not at every tick."""
    tail = memory.rise_tail
    if within_h is None:
        ranked = memory.tail_sorted
        if ranked and _tail_arrays[0] is not ranked:
            _tail_over(ranked, 0.0, 0.0, 0.0)  # (builds the arrays)
        z, u = (_tail_arrays[1], _tail_arrays[2]) if ranked else (_EMPTY, _EMPTY)
        return z, u, tail[-1][2] if tail else (), memory.tail_minutes
    now_hour = int(now // 3600) % 24
    closed = tail[:-1]
    if _tod_cache[0] is not memory.tail_sorted or _tod_cache[1] != now_hour or _tod_cache[2] != within_h \
            or _tod_cache[3] != (closed[0][0] if closed else None):
        near = {h for h in range(24) if _near(h, now_hour, within_h)}  # (once, not twice an hour of the week)
        rows = sorted([r for h, _, tops in closed if h % 24 in near for r in tops])
        minutes = sum([c for h, c, _ in closed if h % 24 in near])
        # (the same array as np.array(rows), in half the time: ~1,200 rows, an hour or two apart)
        arr = np.fromiter(chain.from_iterable(rows), float, 3 * len(rows)).reshape(-1, 3)
        _tod_cache[:] = [memory.tail_sorted, now_hour, within_h, closed[0][0] if closed else None,
                         (np.ascontiguousarray(arr[:, 0]), arr[:, 2] - arr[:, 1]), minutes]
    z, u = _tod_cache[4]
    minutes = _tod_cache[5]
    last: tuple = ()
    if tail and _near(tail[-1][0] % 24, now_hour, within_h):
        last, minutes = tail[-1][2], minutes + tail[-1][1]
    return z, u, last, minutes


_EMPTY = np.zeros(0)


def _tail_over(ranked: tuple, z_at: float, level: float, capacity: float) -> int:
    """How many of the closed hours' rises exceed: z > z_at and, the mean reversion, level +
    (reached - base) > capacity (as for the three hours' rises, in one array operation)."""
    if not ranked:
        return 0
    if _tail_arrays[0] is not ranked:
        rows = np.array(ranked, dtype=float)  # (rise, base, reached) per row
        _tail_arrays[:] = [ranked, np.ascontiguousarray(rows[:, 0]), rows[:, 2] - rows[:, 1]]
    _, z, u = _tail_arrays
    at = int(z.searchsorted(z_at, side="right"))  # (the method: np.searchsorted dispatches to it, at twice the cost)
    return int(np.count_nonzero(level + u[at:] > capacity))


def tick_rise_changes(memory: Memory, now: float, demand: float, lead_s: float, minute_s: float = MINUTE_S) -> dict:
    """The cold start's evidence: rises at tick resolution, until ``PRIOR_RISES`` minutes are measured.

    A minute's rise needs the lead time after it, so one rise a minute leaves a fresh fleet on its
    prior for 41 minutes (30 rises, 11-minute lead). Measured the same way from a minute that
    starts at every tick (the ticks of (now - (L + 1) minutes, now - L minutes] as the base, then
    halfway to the busiest tick of each of the L minutes after it), a rise comes every tick: with
    15 s ticks and a 615 s lead, four a minute, 30 in 19.25 minutes. Each is a rise the minutes could
    have measured had they started a tick earlier, so the two kinds compare; an on/off burst shows in
    them within minutes. They are consecutive and overlap, so they are only the cold start's
    evidence: once the minutes hold ``PRIOR_RISES`` rises (41 minutes in, at that lead), the
    minutes alone decide and these are dropped.

    E.g. a minute of 15 s ticks. Ticks at 3, 3, 3, 3 (the base, mean 3), then one later minute at
    3, 3, 11, 3 (mean 5, busiest 11): it reached 5 + 0.5 x (11 - 5) = 8, a rise of (8 - 3) / sqrt(4)
    = 2.5 -- the same rise as the aligned minute would have measured.
    """
    if len(memory.rises_sorted) >= PRIOR_RISES:
        return {"tick_window": (), "tick_rises": ()} if memory.tick_window or memory.tick_rises else {}
    window, rises = memory.tick_window, memory.tick_rises
    if window and now <= window[-1][0]:  # the clock went back: start afresh, as the minutes do
        window, rises = (), ()
    ell = lead_minutes(lead_s, minute_s)
    start = now - (ell + 1) * minute_s  # the base minute is (start, start + minute]
    window = window + ((now, demand),)
    cut = 0
    while cut < len(window) and window[cut][0] <= start:
        cut += 1
    if cut == 0:  # the ticks do not reach back to the base minute's start yet
        return {"tick_window": window, "tick_rises": rises}
    window = window[cut:]
    bounds = [start + j * minute_s for j in range(ell + 2)]
    sums = [0.0] * (ell + 1)
    counts = [0] * (ell + 1)
    peaks = [0.0] * (ell + 1)
    j = 0
    for t, d in window:
        while t > bounds[j + 1] + 1e-9:
            j += 1
        sums[j] += d
        counts[j] += 1
        peaks[j] = max(peaks[j], d) if counts[j] > 1 else d
    if counts[0] == 0:
        return {"tick_window": window, "tick_rises": rises}
    base = sums[0] / counts[0]
    ahead = [_reached((0, sums[i] / counts[i], peaks[i])) for i in range(1, ell + 1) if counts[i]]
    if not ahead:
        return {"tick_window": window, "tick_rises": rises}
    values = list(rises)
    insort(values, (_z(max(ahead) - base, base), base, max(ahead)))
    return {"tick_window": window, "tick_rises": tuple(values)}


def _peak(cur: tuple) -> float:
    """The busiest tick of the minute in progress (index, sum, count, peak); memory saved before
    the peaks were kept has none, and the minute's mean stands in."""
    return cur[3] if len(cur) > 3 else cur[1] / cur[2]


def _reached(closed: tuple) -> float:
    """How high demand reached in a closed minute, for a rise: halfway (``PEAK_WEIGHT``) from its mean
    to its busiest tick. Mean 3 with one tick at 9: 3 + 0.5 x (9 - 3) = 6."""
    mean = closed[1]
    return mean + PEAK_WEIGHT * ((closed[2] if len(closed) > 2 else mean) - mean)


def level_now(memory: Memory) -> float | None:
    """Today's level, the way rises are measured from: the mean demand of the last closed minute,
    or of this one so far when that is higher."""
    cur = memory.minute_now
    if cur is None:
        return None
    last = memory.minute_max[-1][1] if memory.minute_max and memory.minute_max[-1][0] == cur[0] - 1 else 0.0
    mean = cur[1] / cur[2]
    return last if last > mean else mean  # (max(mean, last), as max keeps them: several times a tick)


def slots_ahead(horizon_s: float) -> int:
    """The 5-minute slots a horizon covers, at least one: max(1, ceil(horizon / SLOT_S)), 615 s -> 3.
    Memoised per horizon: the core asks it for the same two or three horizons (the forecast's, the
    risk's lead time) several times a tick, and the same horizon gives the same number."""
    ahead = _SLOTS_AHEAD.get(horizon_s)
    if ahead is None:
        ahead = max(1, math.ceil(horizon_s / SLOT_S))
        if len(_SLOTS_AHEAD) >= 64:  # (a live fleet's lead time moves with its start-ups: kept small)
            _SLOTS_AHEAD.clear()
        _SLOTS_AHEAD[horizon_s] = ahead
    return ahead


_SLOTS_AHEAD: dict[float, int] = {}


def _peaks_key(now: float, lead_s: float) -> tuple[int, int]:
    """What ``seasonal_peaks`` depends on besides the history: (this slot, slots ahead)."""
    return int(now // SLOT_S), slots_ahead(lead_s)


def seasonal_peaks_memo(memory: Memory, policy: Policy, now: float, lead_s: float) -> Memory:
    """Memory whose ``seasonal_peaks_memo`` holds ``seasonal_peaks`` for this slot and lead time."""
    memo = memory.seasonal_peaks_memo
    # (the key's two numbers compared one by one: no tuple built at every tick)
    if memo is not None and memo[0] == int(now // SLOT_S) and memo[1] == slots_ahead(lead_s):
        return memory
    return memory.with_(seasonal_peaks_memo=(*_peaks_key(now, lead_s), *_seasonal_peaks(memory, policy, now, lead_s)))


def seasonal_peaks(memory: Memory, policy: Policy, now: float, lead_s: float) -> tuple[tuple[float, ...], int]:
    """(the growths of the moments around this time of day on earlier days, sorted; how many days
    they come from). A moment's growth is (its busiest slot within the lead time + 1) / (its level
    + 1): level 4, busiest 9 -> 2.0."""
    memo = memory.seasonal_peaks_memo
    if memo is not None and memo[0] == int(now // SLOT_S) and memo[1] == slots_ahead(lead_s):
        return memo[2], memo[3]
    return _seasonal_peaks(memory, policy, now, lead_s)


def _seasonal_peaks(memory: Memory, policy: Policy, now: float, lead_s: float) -> tuple[tuple[float, ...], int]:
    by_slot = memory.demand_by_slot
    days = policy.forecast.seasonal_days
    if not by_slot or days == 0:
        return (), 0
    ahead = _peaks_key(now, lead_s)[1]
    w = SEASONAL_WINDOW_SLOTS
    growths: list[float] = []
    days_used = 0
    get = by_slot.get
    for day in range(1, days + 1):
        centre = int((now - day * DAY_S) // SLOT_S)
        # The day's slots from one before the first moment to the last moment's lead time, read once:
        # moment k (slot centre - w + k) has its level at k, k + 1 and its slots ahead at k + 2 ...
        row = list(map(get, range(centre - w - 1, centre + w + ahead + 1)))  # (the gets in C: 7 rows a slot)
        if None not in row:  # every slot known (most days): the same maxima without the None checks
            growths += _known_growths(day, cast(list[float], row), 2 * w + 1, ahead)
            days_used += 1
            continue
        if row.count(None) == len(row):  # a day before the history (a replay's first week): no moment
            continue
        found = False
        for k in range(2 * w + 1):
            level = _highest(row, k, k + 2)
            if level is None:
                continue
            peak = _highest(row, k + 2, k + 2 + ahead)
            if peak is not None:
                growths.append((peak + 1.0) / (level + 1.0))
                found = True
        days_used += found
    growths.sort()
    return tuple(growths), days_used


# (day, moments, slots ahead) -> (the day's slots, their moments' growths), as ``_known_growths`` last
# read and computed them: the next slot's moments are the same but the first, and one more.
_DAY_GROWTHS: dict[tuple[int, int, int], tuple[list[float], list[float]]] = {}


def _known_growths(day: int, known: list[float], moments: int, ahead: int) -> list[float]:
    """The growths of a day's ``moments`` moments, every slot of ``known`` known (``_seasonal_peaks``'
    row: moment k's level at k and k + 1, its slots ahead from k + 2). A growth depends only on its
    moment's slots, so where the day's slots are the last ones read moved by a slot (the next
    5-minute slot: the moments but the last are the last ones but the first), the growths are kept
    and one is computed, not ``moments``: the same values (equal slots give the same arithmetic)."""
    key = (day, moments, ahead)
    last = _DAY_GROWTHS.get(key)
    if last is not None and last[0] == known:
        return last[1]
    if last is not None and last[0][1:] == known[:-1]:
        out = last[1][1:]
        out.append(_growth(known, moments - 1, ahead))
    else:
        out = [_growth(known, k, ahead) for k in range(moments)]
    _DAY_GROWTHS[key] = (known, out)
    return out


def _growth(known: list[float], k: int, ahead: int) -> float:
    """Moment k's growth: (its busiest slot within ``ahead`` + 1) / (its level + 1)."""
    low, nxt = known[k], known[k + 1]
    if nxt > low:  # (the first of equals, as _highest and max keep it)
        low = nxt
    return (max(known[k + 2:k + 2 + ahead]) + 1.0) / (low + 1.0)


def _highest(row: list[float | None], start: int, stop: int) -> float | None:
    """The highest known value of row[start:stop], or None (the same as max() of the known ones)."""
    best = None
    for i in range(start, stop):
        v = row[i]
        if v is not None and (best is None or v > best):
            best = v
    return best


def seasonal_weight(memory: Memory) -> float:
    skill = memory.seasonal_skill
    if skill is None:
        return 0.0
    err_seasonal, err_persist = skill
    if err_seasonal + err_persist <= 0:
        return 0.5
    return err_persist / (err_seasonal + err_persist)


def update_skill(memory: Memory, policy: Policy, finished_slot: int, value: float, lead_s: float = SLOT_S) -> Memory:
    """At a slot's end, score the two predictions one lead time before it (the horizon decisions
    use): persistence (the slot then) and the seasonal one (the median over earlier days of that
    slot, scaled by the level then against that day's); mean absolute errors, exponentially weighted.
    E.g. lead 615 s = 3 slots: slot 100 ended at 9; slot 97 was 4 (persistence error 5); a day
    earlier slots 97 and 100 were 5 and 10: 10 x (4 + 1) / (5 + 1) = 8.3 (seasonal error 0.7)."""
    by_slot = memory.demand_by_slot
    ahead = max(1, math.ceil(lead_s / SLOT_S - 1e-9))
    then = finished_slot - ahead
    prev = by_slot.get(then)
    if prev is None or policy.forecast.seasonal_days == 0:
        return memory
    preds = []
    for day in range(1, policy.forecast.seasonal_days + 1):
        back = day * (DAY_S // SLOT_S)
        if finished_slot - back in by_slot and then - back in by_slot:
            preds.append(by_slot[finished_slot - back] * (prev + 1.0) / (by_slot[then - back] + 1.0))
    if not preds:
        return memory
    preds.sort()
    seasonal = preds[len(preds) // 2]
    a = 1.0 - 0.5 ** (1.0 / SKILL_HALF_LIFE_SLOTS)
    es, ep = memory.seasonal_skill or (abs(seasonal - value), abs(prev - value))
    es = (1 - a) * es + a * abs(seasonal - value)
    ep = (1 - a) * ep + a * abs(prev - value)
    return memory.with_(seasonal_skill=(es, ep))


def exceed_probability(memory: Memory, policy: Policy, now: float, capacity: float, lead_s: float,
                       stop_above: float | None = None) -> Risk | None:
    """P(demand within one lead time > ``capacity``), or None before the first demand sample.

    With ``stop_above`` (a replay's fast path: only whether P is within it matters), a three hours'
    share of measured rises already above it is returned as it is, without the week's tail and
    the seasonal share, which only ever raise P: the answer to "P <= stop_above?" is the same. In
    a 14-day m-small replay that is 73% of the risks asked."""
    ordered = memory.rises_sorted
    level = level_now(memory)
    if level is None:
        return None
    # exceeds when level + z x sqrt(level + 1) > capacity, i.e. z > (capacity - level) / sqrt(level + 1)
    z_at = (capacity - level) / math.sqrt(level + 1.0)
    # Cold start: a fresh controller decides on the prior alone; the fleet's own measured rises take
    # over minute by minute and alone once there are PRIOR_RISES of them (10 measured: 1/3 measured,
    # 2/3 prior).
    n = len(ordered)
    reach = memory.rise_reach if len(memory.rise_reach) == n else None
    resolution = "minute"
    if n < PRIOR_RISES and len(memory.tick_rises) > n and policy.scaling.scale_down.tick_rises:
        # Before the minutes hold PRIOR_RISES rises, the rises measured at every tick stand in for
        # them (tick_rise_changes): an on/off burst shows within minutes, not after 41.
        reach, resolution = memory.tick_rises, "tick"
        ordered, n = tuple(r[0] for r in reach), len(reach)
    first = bisect_right(ordered, z_at)
    over = n - first
    if reach is not None:
        # Mean reversion: a rise from a base below today's level is partly the return to the fleet's
        # usual level, and is not scaled up to today's. From a base of 2, demand reaching 8 is
        # z = 6 / sqrt(3) = 3.46, which from today's 5 would say 5 + 3.46 x sqrt(6) = 13.5; the same
        # rise of 6 requests from today's level says 5 + 6 = 11. A moment exceeds only when both do:
        # from a base above today's level, the scaled rise is the smaller and decides, as before.
        if stop_above is not None and n >= PRIOR_RISES and resolution == "minute":
            # Only "above stop_above?" matters: stop counting once over / n says so (the share
            # returned is then a lower bound that is already above it, and decides the same).
            # (the same test as the early return below, so a count cut short always returns there)
            over = 0
            for i in range(first, n):
                _, b, top = reach[i]
                if level + (top - b) > capacity:
                    over += 1
                    if over / n > stop_above:
                        break
        else:
            over = sum(1 for _, b, top in reach[first:] if level + (top - b) > capacity)
    measured = over / n if n else 0.0
    if stop_above is not None and measured > stop_above and n >= PRIOR_RISES and resolution == "minute":
        # The minutes the evidence stands on are the week's all the same (``evidence_minutes``): a
        # drain judged in requests may pass with this P above ``stop_above``, and its evidence
        # floor, 1 / (minutes + 2), must be the one the full count gives (the three hours alone
        # said 1 / 182 = 0.55%, above an allowed 0.4%, where the week's minutes allow the drain).
        week = n + tail_view(memory, now, policy.scaling.scale_down.tail_within_h)[3] if memory.tail_minutes else 0
        return Risk(measured, measured, None, 0.0, n, 0, resolution, None, week, measured)
    p_hours, p_week, week_minutes = measured, None, 0
    if memory.tail_minutes and n >= PRIOR_RISES and resolution == "minute":
        # The week's tail: a quiet three hours do not prove that the week's bursts are gone. The three
        # hours' exceeding rises and the tail's, over every minute they stand for; the higher share
        # decides. (180 quiet minutes, and a burst 3 hours ago that exceeded in 6 of its minutes,
        # 300 minutes in the tail: 0 of 180, but 6 of 480 = 1.25%.) The tail keeps each hour's
        # TAIL_PER_HOUR highest rises: an hour in which more exceeded counts that many.
        z, u, last, tail_minutes = tail_view(memory, now, policy.scaling.scale_down.tail_within_h)
        at = int(z.searchsorted(z_at, side="right"))
        over_tail = int(np.count_nonzero(u[at:] > capacity - level)) + sum(
            1 for _, base, reached in last[bisect_right(last, (z_at, math.inf, math.inf)):]
            if level + (reached - base) > capacity)
        week_minutes = n + tail_minutes
        p_week = (over + over_tail) / week_minutes
        measured = max(measured, p_week)
    if n >= PRIOR_RISES:
        p_recent = measured
    else:
        prior = 0.5 * math.erfc((z_at - PRIOR_Z_MEAN) / (PRIOR_Z_SD * math.sqrt(2.0)))
        p_recent = (n * measured + (PRIOR_RISES - n) * prior) / PRIOR_RISES
    growths, days = seasonal_peaks(memory, policy, now, lead_s) if policy.forecast.enabled else ((), 0)
    weight = seasonal_weight(memory) if growths else 0.0
    p_seasonal = None
    if growths:
        # Each moment's growth from its level to its busiest slot (both 5-minute maxima), applied
        # to today's level: growth 2.0, today 3 -> (3 + 1) x 2.0 - 1 = 7, which exceeds capacity 6.
        # Exceeds when growth > (capacity + 1) / (level + 1). Counted with one pseudo-moment at the
        # recent estimate, so that no history is ever 0% or 100%.
        over = len(growths) - bisect_right(growths, (capacity + 1.0) / (level + 1.0))
        p_seasonal = (over + p_recent) / (len(growths) + 1)
    # The seasonal share raises the risk by its weight and never lowers it: a calm history at this
    # time of day must not halve what the rises measured (recent 2%, seasonal 0.02% at weight 0.49
    # would say 1%, and m-small's next burst came after it).
    p = max(p_recent, (1 - weight) * p_recent + weight * (p_seasonal or 0.0))
    return Risk(p, p_recent, p_seasonal, weight, n, days, resolution, p_week, week_minutes, p_hours)


@slot_init  # (built at most ticks of a replay)
@dataclass(frozen=True, slots=True)
class MissRisk:
    """The drain's risk in requests: the capacity misses it is expected to add, per arrival, over one
    lead time (``expected_miss_share``)."""

    share: float  # expected added capacity misses / arrivals over the lead time
    share_recent: float  # from the measured rises (the three hours', or the week's when higher)
    share_seasonal: float | None
    moments: int  # the moments (minutes) the recent share stands on
    queue_to_miss: float  # requests queued at which every arrival misses (rate x TTFT target)

    def to_dict(self) -> dict:
        return {"share": round(self.share, 6), "share_recent": round(self.share_recent, 6),
                "share_seasonal": None if self.share_seasonal is None else round(self.share_seasonal, 6),
                "moments": self.moments, "queue_to_miss": round(self.queue_to_miss, 4)}


def _added_misses(reached: float, after: float, before: float, full: float) -> float:
    """The share of arrivals that miss at demand ``reached`` on capacity ``after`` and would not on
    ``before``: an excess E queued makes min(1, E / full) of arrivals miss (full = rate x target:
    the queue at which the wait reaches the TTFT target). Demand 14 on 12 slots, full 4: 2 / 4 =
    0.5 miss; on 18 slots none: 0.5 added. Demand 30: 1 on 12 and 1 on 18 (both full): 0 added."""
    a = (reached - after) / full
    if a <= 0.0:
        return 0.0
    b = (reached - before) / full
    return (a if a < 1.0 else 1.0) - (0.0 if b <= 0.0 else b if b < 1.0 else 1.0)


def _added_each(reached: list[float], after: float, before: float, full: float) -> list[float]:
    """``_added_misses`` of each height, in order: the same operations written out, without a call
    per height (up to a hundred a call: the week's last hour and the seasonal moments)."""
    out = []
    for r in reached:
        a = (r - after) / full
        if a <= 0.0:
            out.append(0.0)
            continue
        b = (r - before) / full
        out.append((a if a < 1.0 else 1.0) - (0.0 if b <= 0.0 else b if b < 1.0 else 1.0))
    return out


# (the three hours' rises, their z and reach in requests as arrays, whether every value in them is
# finite): a memo of ``Memory.rise_reach``, which changes once a minute (a rise in, one out):
# ``minute_changes`` edits the arrays of the reach it replaces (``_edit_hours_arrays``) and
# ``expected_miss_share`` builds them afresh for a reach it has not seen (another memory's).
_hours_arrays: list = [None, None, None, False]


def _hours_arrays_of(reach: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The three hours' rises' z and reach in requests (reached - base) as arrays, memoised."""
    if _hours_arrays[0] is not reach:
        rows = np.fromiter(chain.from_iterable(reach), float, 3 * len(reach)).reshape(-1, 3)
        z, u = np.ascontiguousarray(rows[:, 0]), rows[:, 2] - rows[:, 1]
        _hours_arrays[:] = [reach, z, u, bool(np.isfinite(z).all() and np.isfinite(u).all())]
    return _hours_arrays[1], _hours_arrays[2]


def _edit_hours_arrays(reach: tuple, edits: list) -> None:
    """The memo's arrays carried to ``reach``, the memoised reach with ``edits`` made in order: (index,
    row) inserts row at index, (index, None) deletes the row there. The same arrays as built afresh
    (an element's reach is its row's reached - base either way), for a copy of a few hundred floats
    instead of a conversion of the whole reach (a sixth of the risk's time in a 14-day replay)."""
    _, z, u, finite = _hours_arrays
    if len(edits) == 2 and edits[0][1] is not None and edits[1][1] is None:
        # A minute's usual edit: one rise in (at i), the oldest out (at j of the array with it). The
        # result has the old length: a copy with the part between i and j moved by one, instead of
        # four concatenations (the same elements in the same order; 3.5 against 13 us).
        (i, row), (j, _) = edits
        finite = finite and math.isfinite(row[0]) and math.isfinite(row[2] - row[1])
        z, u = _moved(z, i, j, row[0]), _moved(u, i, j, row[2] - row[1])
        _hours_arrays[:] = [reach, z, u, finite]
        return
    for at, row in edits:
        if row is None:  # (a value that was not finite and leaves keeps ``finite`` False: only cautious)
            z = np.concatenate((z[:at], z[at + 1:]))
            u = np.concatenate((u[:at], u[at + 1:]))
        else:
            z = np.concatenate((z[:at], (row[0],), z[at:]))
            u = np.concatenate((u[:at], (row[2] - row[1],), u[at:]))
            finite = finite and math.isfinite(row[0]) and math.isfinite(row[2] - row[1])
    _hours_arrays[:] = [reach, z, u, finite]


def _moved(a: np.ndarray, i: int, j: int, value: float) -> np.ndarray:
    """``a`` with ``value`` inserted at ``i`` and then the element at ``j`` of that deleted."""
    out = a.copy()
    if j > i:  # a[:i], value, a[i:j - 1], a[j:]
        out[i + 1:j] = a[i:j - 1]
        out[i] = value
    elif j < i:  # a[:j], a[j + 1:i], value, a[i:]
        out[j:i - 1] = a[j + 1:i]
        out[i - 1] = value
    return out  # (j == i: the value inserted is the one deleted)


def _added_sum(z: np.ndarray, u: np.ndarray, level: float, scale: float, after: float, before: float,
               full: float) -> float:
    """``_added_misses`` summed over rises (z, reach in requests), each carried to today's level as
    ``expected_miss_share`` does, in one array operation."""
    if z.size < 16:  # (a few rises: a loop costs less than the array operations' set-up)
        total = 0.0
        for zz, uu in zip(z.tolist(), u.tolist()):
            total += _added_misses(min(level + zz * scale, level + uu), after, before, full)
        return total
    # clip((top - after) / full, 0, 1) - clip((top - before) / full, 0, 1), summed: the same numbers
    # as np.clip gives, by the bare ufuncs in place (np.clip's wrapper cost a third of the call).
    # (level + min(z x scale, u) is min(level + z x scale, level + u) to the bit: adding level is monotone)
    top = z * scale
    _minimum(top, u, out=top)
    top += level
    # Both clips at once, (top - after) / full in the first row and (top - before) / full in the
    # second: the same numbers, in half the ufunc calls.
    both = top - _array(((after,), (before,)))
    both /= full
    _minimum(both, 1.0, out=both)
    _maximum(both, 0.0, out=both)
    return float(_add_reduce(both[0] - both[1]))  # (a.sum() without its Python wrapper: the same pairwise sum)


_minimum, _maximum, _add_reduce, _array = np.minimum, np.maximum, np.add.reduce, np.array

# The rises a replay's early answer adds up before the full sum decides (``_early_added``): in a
# 14-day m-small replay 32 of them answer 89% of the risks asked (16 from the highest down, 71%).
_EARLY_RISES = 32


def _early_added(reach: tuple, ordered: tuple, z_at: float, level: float, scale: float, after: float,
                 before: float, full: float, n: int, weight: float, stop_above: float) -> float | None:
    """A replay's early answer (``expected_miss_share`` with ``stop_above``): the three hours' share
    that some of their exceeding rises (z above ``z_at``: those the full sum counts) alone add, once
    it is above ``stop_above``; None when _EARLY_RISES of them do not say so (the full sum decides).
    (``ordered``: their z alone, ``Memory.rises_sorted``, where the rises to try are looked for;
    each one's own z decides whether it exceeds.)

    The rises tried first are those likely to add a whole arrival each: from the first whose scaled
    rise reaches past ``after + full`` (an excess that makes every arrival miss) upwards (the highest
    may swamp ``before`` as well, and add nothing), then the lower ones downwards.

    Exact, not an estimate: the drain's capacity ``after`` is at most ``before``, so every rise adds
    a share >= 0, the same float as in ``_added_sum``, and these rises add at most what all of them
    do. Rounding: any order of summing m shares is within (m - 1) x 2^-53 of their exact sum, this
    loop's k shares within k x 2^-53 of theirs; shrunk by 1e-9 (m + k < 2^21: 2^21 x 2^-53 =
    2.3e-10), this sum is at most the full one's float, so the share it gives (the same division
    and product) is above ``stop_above`` only when the full sum's is. (Not with values that are not
    finite: NaN would make the full sum NaN, which is never above.)"""
    if not (_hours_arrays[3] and _hours_arrays[0] is reach and after <= before and n < 1 << 20 and weight > 0.0
            and math.isfinite(level + scale + after + before + full)):
        return None
    near = stop_above * n / weight  # (about the sum that says no: each rise adds at most 1)
    first = bisect_right(ordered, z_at)
    if near >= _EARLY_RISES or near >= n - first:
        return None
    whole = bisect_right(ordered, (after + full - level) / scale)
    if not whole > first:  # (max(first, whole))
        whole = first
    rows = reach[whole:whole + _EARLY_RISES]
    if len(rows) < _EARLY_RISES:  # (then the ones below, downwards)
        rows += reach[max(first, whole - _EARLY_RISES + len(rows)):whole][::-1]
    total = 0.0
    for z, base, top in rows:
        if not z > z_at:  # (not one the full sum counts: only if ``ordered`` is not reach's z)
            continue
        # ``_added_misses`` written out (this runs up to 32 times a tick): the same operations
        zs, u = z * scale, top - base
        reached = level + (zs if zs < u else u)
        a = (reached - after) / full
        if a <= 0.0:
            continue
        b = (reached - before) / full
        total += (a if a < 1.0 else 1.0) - (0.0 if b <= 0.0 else b if b < 1.0 else 1.0)
        if total >= near:  # (then the share as the full sum would give it decides)
            share = total * (1.0 - 1e-9) / n * weight
            if share > stop_above:
                return share
    return None


def expected_miss_share(memory: Memory, policy: Policy, now: float, after: float, before: float,
                        queue_to_miss: float, lead_s: float, excess_minutes: float,
                        stop_above: float | None = None, level: float | None = None) -> MissRisk | None:
    """The capacity misses a drain from ``before`` to ``after`` slots adds, per arrival, over one lead
    time (the risk in requests, set against the budget in requests; docs/core.md).

    Each measured moment (the three hours' rises, the week's tail, the same time of day on earlier
    days: the moments ``exceed_probability`` counts) says how high demand reached within a lead
    time after it, carried to today's level as there (the smaller of the scaled rise and the same
    rise in requests). At that height the drain adds ``_added_misses`` of the arrivals, for as long
    as the excess stands: ``excess_minutes`` of the lead time's minutes (the rises are each a
    minute's height, halfway to its busiest tick). So a moment adds share x excess_minutes /
    lead minutes, and the expected share is their mean. A burst that swamps both fleets adds
    nothing (always-on misses it as well), and demand a request over the slots adds
    1 / full of the arrivals, not all of them: a short queue, not a missed request.

    E.g. 360 moments, 12 of which reach 14 on 12 slots after the drain (18 before), full 4, one
    minute of an 11-minute lead: 12 x 0.5 x 1 / 11 / 360 = 0.15% of arrivals.

    ``level``: the moments carried to this level instead of today's (a silence's return)."""
    if level is None:
        level = level_now(memory)
    ordered = memory.rises_sorted
    n = len(ordered)
    reach = memory.rise_reach if len(memory.rise_reach) == n else None
    if level is None or n == 0 or reach is None:
        return None
    full = 1e-9 if 1e-9 > queue_to_miss else queue_to_miss  # (max(queue_to_miss, 1e-9), written out)
    scale = math.sqrt(level + 1.0)
    z_at = (after - level) / scale
    weight_per_moment = excess_minutes / lead_minutes(lead_s, policy.forecast.minute_s)
    if not weight_per_moment < 1.0:  # (min(1, ...))
        weight_per_moment = 1.0

    # The three hours' rises as arrays, rebuilt when they change (once a minute, not at every tick): the
    # sum over the exceeding ones in one array operation (a Python loop over them doubled a 14-day
    # replay's time).
    hz, hu = _hours_arrays_of(reach)
    if stop_above is not None:
        # (a replay's fast path: a few rises alone may already say no, exactly; the share returned is
        # then a lower bound already above stop_above, as exceed_probability's early answer's)
        early = _early_added(reach, ordered, z_at, level, scale, after, before, full, n, weight_per_moment,
                             stop_above)
        if early is not None:
            return MissRisk(early, early, None, n, full)
    at = int(hz.searchsorted(z_at, side="right"))
    hours = _added_sum(hz[at:], hu[at:], level, scale, after, before, full)
    share_hours = hours / n
    if stop_above is not None and share_hours * weight_per_moment > stop_above:
        # (a replay's fast path, as exceed_probability's: the week's tail and the seasonal share only
        # raise the share, so the answer to "within stop_above?" is already no)
        return MissRisk(share_hours * weight_per_moment, share_hours * weight_per_moment, None, n, full)
    share_recent, moments = share_hours, n
    if memory.tail_minutes and n >= PRIOR_RISES:
        z, u, last, tail_minutes = tail_view(memory, now, policy.scaling.scale_down.tail_within_h)
        at = int(z.searchsorted(z_at, side="right"))
        tail = _added_sum(z[at:], u[at:], level, scale, after, before, full)
        tail += sum(_added_each([min(level + rise * scale, level + (top - base))
                                 for rise, base, top in last[bisect_right(last, (z_at, math.inf, math.inf)):]],
                                after, before, full))
        moments = n + tail_minutes
        share_recent = max(share_hours, (hours + tail) / moments)
    share_seasonal = None
    growths, _days = seasonal_peaks(memory, policy, now, lead_s) if policy.forecast.enabled else ((), 0)
    weight = seasonal_weight(memory) if growths else 0.0
    share = share_recent
    if growths:
        # (growth g from today's level: (level + 1) x g - 1), with one pseudo-moment at the recent share
        first = bisect_right(growths, (after + 1.0) / (level + 1.0))
        total = sum(_added_each([(level + 1.0) * g - 1.0 for g in growths[first:]], after, before, full))
        share_seasonal = (total + share_recent) / (len(growths) + 1)
        share = max(share_recent, (1 - weight) * share_recent + weight * share_seasonal)
    return MissRisk(share * weight_per_moment, share_recent * weight_per_moment,
                    None if share_seasonal is None else share_seasonal * weight_per_moment, moments, full)


def traffic_changes(memory: Memory, now: float, rate: float | None, demand: float, step_s: float) -> dict:
    """This tick folded into ``memory.traffic`` and ``memory.silence`` (the fields it changes).

    ``traffic``: (the last tick with arrivals, the request rate and demand, each smoothed
    exponentially over TRAFFIC_SMOOTHING_S of ticks with arrivals: a tick counts for at most
    ``step_s``, the tick interval, so one request after an hour's silence moves them by 2.5%, not
    all the way). A tick without arrivals leaves it as it is: a silence keeps the traffic before it.

    ``silence``: (its first tick, its last tick) while every tick sees a rate of exactly 0 and
    nothing running or queued, the ticks at most two intervals apart; None as soon as one does not
    (a request, a missing rate, unknown demand, or a controller that was not deciding). E.g.
    silent ticks at 0, 15 and 30 s: (0, 30); a tick at 60 s (30 s later, two intervals): (0, 60);
    a tick at 100 s: (100, 100), a new silence."""
    out: dict = {}
    prev_silence = memory.silence
    if rate is not None and rate == 0.0 and demand == 0.0:
        since = (prev_silence[0] if prev_silence is not None and 0.0 <= now - prev_silence[1] <= 2.0 * step_s
                 else now)
        out["silence"] = (since, now)
    elif prev_silence is not None:
        out["silence"] = None
    if rate is None or not rate > 0.0:
        return out
    prev = memory.traffic
    if prev is None:
        out["traffic"] = (now, rate, demand)
        return out
    dt = now - prev[0]
    dt = 0.0 if 0.0 > dt else dt  # min(max(now - prev[0], 0.0), step_s), written out as they keep them
    a = 1.0 - math.exp(-(step_s if step_s < dt else dt) / TRAFFIC_SMOOTHING_S)
    out["traffic"] = (now, prev[1] + a * (rate - prev[1]), prev[2] + a * (demand - prev[2]))
    return out


@dataclass(frozen=True, slots=True)
class ReturnRisk:
    """What a drain in a silence stakes: the misses a return of the traffic would add."""

    silent_s: float  # since the silence's first tick
    rate: float  # the request rate before the silence (smoothed)
    level: float  # the demand before the silence (smoothed)
    misses: float  # expected added capacity misses if the traffic returned now, over one lead time
    free: float  # the misses the budget has free over three days (budget x arrivals - misses)
    allowed: float  # the share of ``free`` a silence drain may stake

    def to_dict(self) -> dict:
        return {"silent_s": round(self.silent_s, 1), "rate": round(self.rate, 4), "level": round(self.level, 4),
                "misses": round(self.misses, 3), "free": round(self.free, 3), "allowed": round(self.allowed, 3)}


def return_risk(memory: Memory, policy: Policy, now: float, after: float, always_on: float,
                lead_s: float) -> ReturnRisk | None:
    """The drain's risk in a silence (no arrival, nothing running or queued, for
    ``scale_down.silence_s``): nothing it stakes is lost while the silence lasts; if the traffic
    returns at once, at its level and rate before the silence, the fleet is ``after`` slots until a
    start catches up, one lead time. The misses that adds against always-on (``always_on`` slots),
    by ``expected_miss_share`` at that level, with the excess held the whole lead time, times the
    arrivals of one lead time, is set against the budget's free misses over three days (the long
    burn's budget x arrivals - misses): at most SILENCE_BUDGET_SHARE of them. None before traffic
    or a burn was measured. E.g. rate 0.2/s, a 615 s lead: 123 arrivals; 6% of them added: 7.4
    misses, against 0.4% x 40,000 arrivals - 60 misses = 100 free: 7.4 <= 50 allows the drain."""
    traffic, burn, silence = memory.traffic, memory.budget_burn_long, memory.silence
    if traffic is None or burn is None:
        return None
    _, rate, level = traffic
    minutes = lead_minutes(lead_s, policy.forecast.minute_s)
    share = expected_miss_share(memory, policy, now, after, always_on, rate * policy.slo.ttft_target_s, lead_s,
                                float(minutes), level=level)
    if share is None:
        return None
    budget = policy.slo.capacity_miss_budget_pct / 100.0
    free = budget * burn[1] - burn[0]
    misses = share.share * rate * lead_s
    return ReturnRisk(0.0 if silence is None else now - silence[0], rate, level, misses, free,
                      SILENCE_BUDGET_SHARE * free)


def evidence_floor(risk: Risk) -> float:
    """The lowest risk the measured rises can show: 1 / (n + 2) for the n minutes they stand for
    (the three hours', or the week's once it has a tail), the rule of succession's estimate of a
    share none of n exceeded. Zero of 32 rises is no proof of a risk below 1.5%: it says about 3%
    (1 / 34); zero of the week's 10,000 minutes says 0.01%. A scale-down needs this within the
    allowed risk as well: the measurements must show the risk is within budget, not only fail to
    see it. (A fleet 43 minutes old drained on 0 of 32 rises at an allowed 1.5%, and demand rose
    from 9 to 25 within 3 minutes: Mooncake seed 1 at five groups, 0.535 pp below always-on.)"""
    return 1.0 / (evidence_minutes(risk) + 2)


def evidence_minutes(risk: Risk) -> int:
    """The minutes the measured risk stands on: the week's once it has a tail, else the three hours'.
    (``week_minutes`` is 0 without the week's tail; a replay's early answer, ``stop_above``, counts
    the week's minutes without its share.)"""
    return risk.week_minutes or risk.samples


def burn_changes(memory: Memory, policy: Policy, now: float, arrivals_per_s: float | None, queued: float,
                 queue_wait_s: float | None, below_ceiling: bool = True, over_target: float | None = None) -> dict:
    """Fold this tick's estimated capacity misses and arrivals into the budget's burn, and the
    session-move misses of a drain whose watch closed (``session_move_changes``).

    Misses while every group the ceiling allows is ready are not the scaling's doing (no decision
    could have added a group): the budget counts the misses scaling caused, those while the
    ceiling's last group is still starting included. A rate that is unknown or not finite (NaN,
    inf) changes nothing: it would poison the burn for hours."""
    if arrivals_per_s is None or not math.isfinite(arrivals_per_s):
        return {}
    scaling = policy.scaling
    # Negative readings (a user's PromQL, a counter reset) count as none: no negative misses or
    # arrivals, which would make the burn look unspent. (Here and in ``_decayed``, a max or min of
    # two written out as it keeps them, the later only when strictly above or below: this runs at
    # every tick, and a call of max() or min() costs 0.13 us against 0.02 for the test; with the
    # miss's share computed only when it counts, 1.8 against 3.4 us a tick.)
    arrivals = (arrivals_per_s if arrivals_per_s > 0.0 else 0.0) * scaling.tick_interval_s  # max(0, rate) x tick
    if not queued > 0.0:  # max(0, queued)
        queued = 0.0
    slow = queue_wait_s > scaling.scale_up.slo_burn_min_queue_wait_s if queue_wait_s is not None else queued > 0
    # An arrival that finds ``queued`` requests waiting waits about queued / arrival rate (the queue
    # empties at most as fast as it fills while it stands): the tick's arrivals miss in proportion to
    # that wait against the TTFT target, all of them once it reaches the target. (Queued 3 at 1
    # request/s: a 3 s wait, the whole tick's arrivals; queued 1: a third of them.)
    misses = 0.0
    if slow and below_ceiling:
        share = (queued / arrivals_per_s if arrivals_per_s > 0 else 0.0) / policy.slo.ttft_target_s
        misses = arrivals * (share if share < 1.0 else 1.0)  # min(1, wait / target)
    out = session_move_changes(memory, policy, now, arrivals, over_target, slow)
    misses += out.pop("_charged", 0.0)
    minute = policy.forecast.minute_s
    burn = _decayed(memory.budget_burn, misses, arrivals, now, BURN_HALF_LIFE_MINUTES * minute)
    if burn is not None:
        out["budget_burn"] = burn
    burn = _decayed(memory.budget_burn_long, misses, arrivals, now, BURN_LONG_HALF_LIFE_MINUTES * minute)
    if burn is not None:
        out["budget_burn_long"] = burn
    return out


def _decayed(prev: tuple[float, float, float] | None, misses: float, arrivals: float, now: float,
             half_life_s: float) -> tuple[float, float, float] | None:
    """One burn's (misses, arrivals, at) decayed to ``now`` with this tick's added; None when
    nothing changes (nothing new, and no time passed or the clock stepped back)."""
    if prev is None:
        return (misses, arrivals, now)
    m, a, t = prev
    dt = now - t
    decay = 0.5 ** ((dt if dt > 0.0 else 0.0) / half_life_s)  # (max(0, now - t))
    if not misses and not arrivals and decay == 1.0:
        return None
    return (m * decay + misses, a * decay + arrivals, now)


def session_move_changes(memory: Memory, policy: Policy, now: float, arrivals: float, over_target: float | None,
                         slow: bool) -> dict:
    """The misses a drain causes by moving conversations off their cache, estimated from the TTFT
    histogram, to be charged to the budget (``"_charged"``: misses, when a watch closes).

    A drained group's conversations re-prefill in full on their next turn elsewhere: their first
    tokens come late without any queue wait, which the capacity estimate does not see. So the share
    of first tokens over the TTFT target (``SignalSnapshot.ttft_over_target``) is kept as an
    exponentially weighted baseline (half-life ``OVER_SHARE_HALF_LIFE_MINUTES``, weighted by
    arrivals); a drain opens a watch with the baseline of that moment (``open_drain_watch``), and
    for ``SESSION_WATCH_MINUTES`` each tick adds its arrivals x share over target, except the ticks
    whose queue wait is the cause (those are capacity misses, counted apart). When the watch closes
    (or the next drain comes), the excess over the baseline beyond ``SESSION_NOISE_Z`` standard
    deviations of a binomial count (at least one miss's) is the drain's estimate:
    600 first tokens after a drain, 48 over target against a baseline of 5%: expected 30, sd
    sqrt(600 x 0.05 x 0.95) = 5.3, so 48 - 30 - 2 x 5.3 = 7.3 misses are charged. A drain on a fleet
    whose requests miss on long prompts alike before and after is charged nothing."""
    out: dict = {}
    share = None
    if over_target is not None and math.isfinite(over_target):
        share = over_target if over_target > 0.0 else 0.0  # min(1, max(0, over_target)), written out
        if not share < 1.0:
            share = 1.0
    if share is not None and arrivals > 0:
        prev = memory.over_share
        if prev is None:
            out["over_share"] = (share * arrivals, arrivals, now)
        else:
            m, a, t = prev
            dt = now - t
            decay = 0.5 ** ((dt if dt > 0.0 else 0.0) / (OVER_SHARE_HALF_LIFE_MINUTES * policy.forecast.minute_s))
            out["over_share"] = (m * decay + share * arrivals, a * decay + arrivals, now)
    watch = memory.drain_watch
    if watch is None:
        return out
    since, base, over, seen = watch
    if now - since >= SESSION_WATCH_MINUTES * policy.forecast.minute_s:
        out.update(_closed_watch(watch), drain_watch=None)
        return out
    if share is not None and arrivals > 0 and not slow:
        out["drain_watch"] = (since, base, over + share * arrivals, seen + arrivals)
    return out


def _closed_watch(watch: tuple[float, float, float, float]) -> dict:
    """A watch's close: its estimate kept (``session_moves``) and charged (``"_charged"``)."""
    moved = watch_misses(watch)
    return {"session_moves": (moved, watch[0]), "_charged": moved}


def watch_misses(watch: tuple[float, float, float, float]) -> float:
    """The session-move misses of a drain's watch (``session_move_changes``): the first tokens over
    the target beyond the baseline's, less ``SESSION_NOISE_Z`` standard deviations, never below 0."""
    _, base, over, seen = watch
    sd = math.sqrt(max(1.0, seen * base * (1.0 - base)))
    return max(0.0, over - seen * base - SESSION_NOISE_Z * sd)


def charged_burn(memory: Memory, misses: float, now: float) -> dict[str, tuple[float, float, float]]:
    """Both burns with ``misses`` more (a drain's closed watch, charged at the drain that closed it),
    as the memory's fields."""
    out = {}
    for key in ("budget_burn", "budget_burn_long"):
        b = getattr(memory, key)
        out[key] = (misses, 0.0, now) if b is None else (b[0] + misses, b[1], b[2])
    return out


def open_drain_watch(memory: Memory, now: float) -> dict:
    """A drain's changes to the memory: a watch from now, judged against the baseline share (0 when
    none is measured), and the previous drain's watch closed and charged if it was still open
    (``"_charged"``: the caller adds it to the burn)."""
    b = memory.over_share
    base = b[0] / b[1] if b is not None and b[1] > 0 else 0.0
    out: dict = {} if memory.drain_watch is None else _closed_watch(memory.drain_watch)
    out["drain_watch"] = (now, min(1.0, max(0.0, base)), 0.0, 0.0)
    return out


def burn_rate(memory: Memory, policy: Policy) -> float | None:
    """Recent capacity misses as a multiple of the budget (1.0: spending exactly the budget), with
    the prior: budget 1%, 20 misses in 1,000 arrivals -> (20 + 10) / (1,000 + 1,000) = 1.5%: 1.5.
    The higher of the six hours' and the three days' (``BURN_LONG_HALF_LIFE_MINUTES``): a budget
    overspent a burst at a time over days keeps the core careful after each burst's six hours."""
    short, long = burn_rates(memory, policy)
    if long is None:
        return short
    return long if short is None or long > short else short


def burn_rates(memory: Memory, policy: Policy) -> tuple[float | None, float | None]:
    """(the six hours' burn, the three days'), each with the prior; None where nothing is counted."""
    budget = policy.slo.capacity_miss_budget_pct / 100.0
    return _rate(memory.budget_burn, budget), _rate(memory.budget_burn_long, budget)


def _rate(b: tuple[float, float, float] | None, budget: float) -> float | None:
    """One burn's misses per arrival, with the prior, as a multiple of ``budget`` (a fraction)."""
    if b is None or b[1] <= 0:
        return None
    return ((b[0] + BURN_PRIOR_MISSES) / (b[1] + BURN_PRIOR_MISSES / budget)) / budget


def headroom(burn: float | None) -> float:
    """How much headroom a burning budget buys: the burn rate, between 1 and ``MAX_BOLDNESS``. The
    core divides the requests a group carries at target by it (scale-ups come before requests
    queue) and multiplies the utilisation after a drain by it before the drain's cap (a drain
    needs that much more room): the scale-up and scale-down points move together, so they never
    cross. Unmeasured or within budget: 1 (no change). Burning 1.5x: 1.5; 6x: 2.

    A budget that burns was spent by queueing the core did not foresee: a ramp its minutes did not
    bear out, or a drain the rises allowed. Found on a one-day business-hours ramp at five groups
    (``bench/stress_traces.py`` daily-swing, seed 0 at 0.35): a drain 3 -> 2 groups at burn 1.55 in
    the middle of the morning ramp, then demand 17-23 on 12 slots until a start 10 minutes late;
    0.587 pp below always-on, and 0.215 with the headroom, at fewer node-hours (112 against 126)."""
    if burn is None or burn <= 1.0:
        return 1.0
    return burn if burn < MAX_BOLDNESS else MAX_BOLDNESS  # (min(MAX_BOLDNESS, burn))


def allowed_risk(memory: Memory, policy: Policy) -> tuple[float, float | None]:
    """(the exceedance probability a scale-down may take, the burn rate it was set from)."""
    return allowed_risk_at(burn_rate(memory, policy), policy)


def allowed_risk_at(burn: float | None, policy: Policy) -> tuple[float, float | None]:
    """``allowed_risk`` for a burn rate already read (``burn_rate``)."""
    budget = policy.slo.capacity_miss_budget_pct / 100.0
    if burn is None:
        return budget, None
    inverse = 1.0 / burn  # min(MAX_BOLDNESS, max(1 / MAX_BOLDNESS, 1 / burn)), written out (every tick)
    factor = inverse if inverse > 1.0 / MAX_BOLDNESS else 1.0 / MAX_BOLDNESS
    factor = factor if factor < MAX_BOLDNESS else MAX_BOLDNESS
    return budget * factor, burn
