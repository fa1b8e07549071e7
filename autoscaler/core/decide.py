"""The decision: a pure function of (signals, fleet state, policy, memory, now).

No network, no database, no clock: the same code runs live, in advisory mode and in the simulator
on a virtual clock. It raises only on programming errors; missing data, an unsynced fleet or an
action in flight give a HOLD with a reason.

Order of the rules (the first that applies decides):
1. fleet state unknown                      -> hold fleet_unsynced
2. fewer active groups than the floor       -> scale_up below_floor / pin (no signals needed)
3. more active groups than the ceiling      -> scale_down above_ceiling / pin (one at a time; any
                                               load, signals or freeze: the bounds are invariants;
                                               a cordoned group is the first victim)
4. demand (running + queued over the ready groups that were scraped) and its forecast; scale-up
   triggers: utilisation, queue, SLO burn, forecast (on a lower bound when some groups are unknown),
   against the groups that serve for good (a cordoned group is leaving: not counted)
                                            -> scale_up (several groups if the gap needs it; reason
                                               cordoned when the start only replaces cordoned
                                               groups), or hold at_ceiling / pinned / no_group_available
5. an active group is cordoned              -> a replacement for the floor (within the ceiling), else
                                               hold while anything starts or drains or demand is
                                               unknown, else drain it (cordoned). After the load's
                                               scale-ups, so that maintenance never costs capacity the
                                               load needs; before the signal problems, so that the
                                               floor's replacement needs no signals
6. a signal problem                         -> hold signal_* (never scale down on missing data)
7. surplus: the remaining groups (less spares) carry current and forecast demand under
   scale_down.utilization_below, continuously for the stabilisation window, outside the cooldown,
   outside a freeze, within the disruption budget, with a group old enough
                                            -> scale_down surplus (one group), else a hold naming
                                               the clamp that stopped it
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from autoscaler.core.bounds import Bounds, active_freeze, effective_bounds
from autoscaler.core.forecast import ForecastResult, demand_changes, forecast, lead_time_s, seasonal_memo
from autoscaler.core.risk import (
    SILENCE_BUDGET_SHARE,
    Risk,
    allowed_risk_at,
    burn_changes,
    burn_rate,
    burn_rates,
    charged_burn,
    evidence_floor,
    evidence_minutes,
    exceed_probability,
    expected_miss_share,
    headroom,
    lead_minutes,
    level_now,
    minute_changes,
    open_drain_watch,
    return_risk,
    seasonal_peaks_memo,
    tick_rise_changes,
    traffic_changes,
    watch_misses,
)
from autoscaler.core.types import (
    Action,
    Decision,
    FleetState,
    GroupSignals,
    GroupState,
    Memory,
    Phase,
    Problem,
    Reason,
    SignalSnapshot,
    problem_reason,
)
from autoscaler.core.victim import choose_victim, groups_to_start
from autoscaler.policy.model import Policy

HOUR_S = 3600.0
_EPS = 1e-9

# Signals each step reads. Scale-ups use whatever is available; scale-downs need all of these clean.
_DEMAND_SIGNALS = ("running", "queued")
_SCALE_DOWN_SIGNALS = ("running", "queued", "kv_usage")
_SLO_SIGNALS = ("ttft_p99_s", "queue_wait_p99_s")
_NO_SIGNALS = GroupSignals()  # a group without signals (frozen: one instance serves every lookup)


def groups_needed(demand: float, per_group: float) -> int:
    """Groups that serve ``demand`` at ``per_group`` requests each: ceil(11 / 4.2) = ceil(2.62) = 3."""
    if demand <= 0:
        return 0
    return math.ceil(demand / per_group - _EPS)


def _no_surplus(memory: Memory) -> Memory:
    """``memory`` with no surplus running: the same memory when none was (most ticks), not a copy."""
    return memory if memory.surplus_since is None else memory.with_(surplus_since=None)


def _fmt(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.2f}"


# (the fleet state, ``_phases`` of it): it holds the state, so the identity cannot be reused by another
_PHASES_MEMO: list = [None, None]
_Phases = tuple[list[GroupState], list[GroupState], list[GroupState], list[GroupState], float]


def _phases(fleet: FleetState) -> _Phases:
    """(ready, starting, draining, cordoned active groups, the latest ``since`` of a ready group) of
    ``fleet``, in policy order, memoised for the fleet state. Cordoned active groups are leaving:
    capacity while they are there, not counted by the scale-ups (their replacement starts before
    they drain)."""
    by_phase: dict[Phase, list[GroupState]] = {Phase.READY: [], Phase.STARTING: [], Phase.DRAINING: []}
    for g in fleet.groups.values():
        bucket = by_phase.get(g.phase)
        if bucket is not None:
            bucket.append(g)
    ready, starting = by_phase[Phase.READY], by_phase[Phase.STARTING]
    cordoned: list[GroupState] = [g for g in ready + starting if g.cordoned]
    sinces = [g.since for g in ready]
    # (a since that is NaN is never <= the scrape's time, whatever the others: no shortcut then)
    latest = math.inf if any(math.isnan(x) for x in sinces) else max(sinces, default=-math.inf)
    _PHASES_MEMO[:] = [fleet, (ready, starting, by_phase[Phase.DRAINING], cordoned, latest)]
    return _PHASES_MEMO[1]


class _Tick:
    """The numbers one decision works from; built once, read by every rule."""

    # (slots: 30 attributes are one more than an instance's shared dict holds without a resize, and
    # the rules read them many times a tick)
    __slots__ = ("signals", "fleet", "policy", "now", "explain", "ready", "starting", "draining", "cordoned",
                 "active", "serving", "bounds", "per_group", "spare", "reporting", "problems", "running", "queued",
                 "demand", "demand_floor", "queued_floor", "unknown", "lead", "horizon", "fc", "risk_horizon",
                 "memory", "burn", "headroom", "base_per_group")

    def __init__(self, signals: SignalSnapshot, fleet: FleetState, policy: Policy, memory: Memory, now: float,
                 explain: bool = True):
        self.signals, self.fleet, self.policy, self.now = signals, fleet, policy, now
        self.explain = explain
        # The groups of each phase the rules read (ready, starting, draining, cordoned; the ready
        # groups' latest ``since``), once per fleet state: a replay hands the same one again while
        # no group changed. The lists are shared by those ticks: the rules only read them.
        phases: _Phases = _PHASES_MEMO[1] if _PHASES_MEMO[0] is fleet else _phases(fleet)
        self.ready, self.starting, self.draining, self.cordoned, latest_ready = phases
        self.active = len(self.ready) + len(self.starting)
        self.serving = self.active - len(self.cordoned)
        self.bounds: Bounds = effective_bounds(policy, now)
        scaling = policy.scaling
        self.per_group = policy.fleet.requests_per_group * scaling.target_utilization
        self.spare = scaling.spare_groups

        # A group that became ready after the signals were scraped has no series yet: it is
        # capacity, but neither its load nor its missing series say anything.
        self.reporting = self.ready if latest_ready <= signals.at else [g for g in self.ready if g.since <= signals.at]
        self.problems: list[Problem] = []
        if signals.problems:
            names = {g.name for g in self.reporting}
            self.problems = [p for p in signals.problems if p.group is None or p.group in names]
        get = signals.groups.get
        known = bool(self.reporting) and not (self.problems and self._problem_in(_DEMAND_SIGNALS))
        # Running and queued summed in one pass, each as ``sum(r or 0.0 for r in ...)`` adds them (from
        # the int 0, in the same order: the same bits), without three lists and two generators a tick.
        running_sum: float = 0
        queued_sum: float = 0
        if known:
            for g in self.reporting:
                s = get(g.name, _NO_SIGNALS)
                r, q = s.running, s.queued
                if r is None or q is None:
                    known = False
                    break
                running_sum += r or 0.0
                queued_sum += q or 0.0
        self.running: float | None = running_sum if known else None
        self.queued: float | None = queued_sum if known else None
        self.demand: float | None = (None if self.running is None or self.queued is None
                                     else self.running + self.queued)
        # For scale-ups only: what the groups that did report carry (a lower bound of the demand).
        self.demand_floor: float | None = self.demand
        self.queued_floor: float | None = self.queued
        self.unknown: list[str] = []
        if self.demand is None and self.reporting:
            loads = [get(g.name, _NO_SIGNALS) for g in self.reporting]
            bad = {p.group for p in self.problems if p.signal in _DEMAND_SIGNALS}
            part = [(g.name, s) for g, s in zip(self.reporting, loads)
                    if s.running is not None and s.queued is not None and g.name not in bad and None not in bad]
            self.unknown = [g.name for g in self.reporting if g.name not in {n for n, _ in part}]
            if part:  # (every value in ``part`` is known: ``or 0.0`` only tells the type checker)
                self.demand_floor = sum((s.running or 0.0) + (s.queued or 0.0) for _, s in part)
                self.queued_floor = sum(s.queued or 0.0 for _, s in part)

        if memory.disruptions and now - memory.disruptions[0] >= HOUR_S:
            memory = memory.with_(disruptions=tuple(t for t in memory.disruptions if now - t < HOUR_S))
        # The start-up samples only change outside decide (record_startup): one lead time per tick.
        self.lead = lead_time_s(policy, memory)
        self.horizon = policy.forecast.horizon_s or self.lead[0]
        self.fc: ForecastResult | None = None
        # How long a drained group takes to come back: its start-up and the tick that notices.
        self.risk_horizon = self.lead[0] + scaling.tick_interval_s
        if self.demand is not None:
            fl = signals.fleet
            # The trend window, the seasonal history, the risk's per-minute history and the budget's
            # burn, in one copy of the memory (each reads only fields the others do not change).
            changes = demand_changes(memory, policy, now, self.demand, self.risk_horizon)
            changes.update(minute_changes(memory, now, self.demand, self.risk_horizon, policy.forecast.minute_s))
            if scaling.scale_down.tick_rises:
                changes.update(tick_rise_changes(memory, now, self.demand, self.risk_horizon, policy.forecast.minute_s))
            changes.update(burn_changes(memory, policy, now, fl.request_rate, self.queued or 0.0,
                                        fl.queue_wait_p99_s, len(self.ready) < self.bounds.ceiling,
                                        signals.ttft_over_target))
            if scaling.scale_down.silence_s is not None:
                changes.update(traffic_changes(memory, now, fl.request_rate, self.demand, scaling.tick_interval_s))
            memory = memory.with_changes(changes)
            if policy.forecast.enabled:
                memory = seasonal_memo(memory, policy, now, self.horizon)
                memory = seasonal_peaks_memo(memory, policy, now, self.risk_horizon)
            self.fc = forecast(memory, policy, now, self.demand, self.horizon)
        elif memory.silence is not None:  # demand unknown: not known to be silent
            memory = memory.with_(silence=None)
        self.memory = memory
        # A budget burning faster than allowed buys headroom (core/risk.py, ``headroom``): each group
        # counts for fewer requests, so groups start before requests queue and a drain needs more
        # room, in proportion to the burn and at most MAX_BOLDNESS: burning 1.5x, 4.2 / 1.5 = 2.8.
        self.burn = burn_rate(memory, policy)
        self.headroom = headroom(self.burn)
        self.base_per_group = self.per_group
        self.per_group = self.per_group / self.headroom

    @property
    def order(self) -> dict[str, int]:
        """Each group's place in the policy order (the victim's tie-break): only a drain reads it."""
        return {name: i for i, name in enumerate(self.fleet.groups)}

    def _problem_in(self, names: tuple[str, ...]) -> Problem | None:
        for p in self.problems:
            if p.signal in names:
                return p
        return None

    def inputs(self, **extra: Any) -> dict[str, Any]:
        fleet = self.signals.fleet
        lead, lead_src = self.lead
        out: dict[str, Any] = {
            "ready": len(self.ready),
            "starting": len(self.starting),
            "draining": len(self.draining),
            "active": self.active,
            "floor": self.bounds.floor,
            "ceiling": self.bounds.ceiling,
            "floor_source": self.bounds.floor_source,
            "ceiling_source": self.bounds.ceiling_source,
            "running": self.running,
            "queued": self.queued,
            "demand": self.demand,
            "requests_per_group_at_target": round(self.per_group, 4),
            "headroom": round(self.headroom, 4),
            "budget_burn": None if self.burn is None else round(self.burn, 4),
            "budget_burn_long": None if (long := burn_rates(self.memory, self.policy)[1]) is None else round(long, 4),
            "capacity_at_target": round(self.active * self.per_group, 4),
            "ttft_p99_s": fleet.ttft_p99_s,
            "queue_wait_p99_s": fleet.queue_wait_p99_s,
            "forecast_peak": None if self.fc is None else round(self.fc.peak, 4),
            "forecast_basis": None if self.fc is None else self.fc.basis,
            "horizon_s": self.horizon,
            "lead_time_s": lead,
            "lead_time_source": lead_src,
            "problems": [p.to_dict() for p in self.problems],
            "floor_over_cap": self.bounds.floor_over_cap,
        }
        out.update(extra)
        return out


def decide(
    signals: SignalSnapshot, fleet: FleetState, policy: Policy, memory: Memory, now: float, explain: bool = True
) -> tuple[Decision, Memory]:
    """One decision and the memory to pass to the next tick.

    ``explain=False`` is a replay's fast path: a hold comes without its detail and inputs (empty),
    which a replay that keeps only actions never reads; the action, groups, reason and memory are
    the same, and a scale-up or drain is explained in full as always. (Building a hold's numbers
    was about a fifth of the 14-day replay's time.)"""
    t = _Tick(signals, fleet, policy, memory, now, explain)
    # The rules in order, the first that decides wins; a rule whose own first test says it does not
    # apply is not called (the same tests: most ticks reach the surplus, and the loop over seven
    # rules cost about 1% of a 14-day replay).
    bounds = t.bounds
    if not fleet.synced:
        return _unsynced(t)
    if t.active < bounds.floor:
        return _below_floor(t)
    if t.active > bounds.ceiling:
        return _above_ceiling(t)
    result = _scale_up(t)
    if result is None and t.cordoned:
        result = _cordoned(t)
    if result is None:
        result = _signal_problem(t)
    return _scale_down(t) if result is None else result


def _hold(t: _Tick, reason: Reason, detail: str, memory: Memory | None = None, **extra: Any):
    if not t.explain:
        return _unexplained_hold(t.active, reason), (memory or t.memory)
    decision = Decision(Action.HOLD, t.active, None, reason, detail, t.inputs(**extra))
    return decision, (memory or t.memory)


# A hold without its numbers (``explain=False``) is the same value for the same groups and reason:
# one frozen instance each, with no inputs (read-only, so that no holder can change another's).
class _NoInputs(dict):
    """An empty dict that stays empty (shared by every unexplained hold; a dict, so that it pickles)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("an unexplained hold's inputs are empty and read-only")

    __setitem__ = __delitem__ = __ior__ = update = setdefault = pop = popitem = clear = _refuse


_UNEXPLAINED: dict[tuple[int, Reason], Decision] = {}
_NO_INPUTS: Mapping[str, Any] = _NoInputs()


def _unexplained_hold(active: int, reason: Reason) -> Decision:
    decision = _UNEXPLAINED.get((active, reason))
    if decision is None:
        decision = _UNEXPLAINED[(active, reason)] = Decision(Action.HOLD, active, None, reason, "", _NO_INPUTS)
    return decision


def _start(t: _Tick, count: int, reason: Reason, detail: str, forecast_used: bool = False, **extra: Any):
    names = groups_to_start(t.fleet, count)
    if not names:
        return _hold(t, Reason.NO_GROUP_AVAILABLE, f"{detail}; but no group is off or draining to start",
                     _no_surplus(t.memory))
    reclaimed = [n for n in names if t.fleet.groups[n].phase is Phase.DRAINING]
    how = ", ".join(f"{n} (back from draining)" if n in reclaimed else n for n in names)
    target = t.active + len(names)
    decision = Decision(
        Action.SCALE_UP,
        target,
        names[0],
        reason,
        f"{detail}; starting {how}: {t.active} -> {target} groups",
        t.inputs(groups_to_start=names, **extra),
        groups=tuple(names),
        forecast_used=forecast_used,
    )
    memory = t.memory.with_(
        last_scale_up_at=t.now,
        surplus_since=None,
        disruptions=t.memory.disruptions + tuple(t.now for n in names if n not in reclaimed),
    )
    return decision, memory


def _drain(t: _Tick, victim: str, reason: Reason, detail: str, **extra: Any):
    decision = Decision(
        Action.SCALE_DOWN,
        t.active - 1,
        victim,
        reason,
        f"{detail}; draining {victim}: {t.active} -> {t.active - 1} groups",
        t.inputs(victim=victim, **extra),
        groups=(victim,),
    )
    # The drain opens a watch for the sessions it moves (core/risk.py, session_move_changes).
    watch = open_drain_watch(t.memory, t.now)
    charged = watch.pop("_charged", 0.0)
    if charged:
        watch.update(charged_burn(t.memory, charged, t.now))
    memory = t.memory.with_(surplus_since=None, disruptions=t.memory.disruptions + (t.now,), **watch)
    return decision, memory


# ----------------------------------------------------------------------------------- the rules
def _unsynced(t: _Tick):
    if t.fleet.synced:
        return None
    return _hold(t, Reason.FLEET_UNSYNCED, "the fleet's state is not known yet; deciding nothing until it is synced")


def _below_floor(t: _Tick):
    if t.active >= t.bounds.floor:
        return None
    reason = Reason.PIN if t.bounds.pinned else Reason.BELOW_FLOOR
    over_cap = f"; the floor wins over a lower cap ({t.bounds.ceiling_source})" if t.bounds.floor_over_cap else ""
    return _start(
        t, t.bounds.floor - t.active, reason,
        f"{t.active} active groups < floor {t.bounds.floor} ({t.bounds.floor_source}){over_cap}",
    )


def _scale_up(t: _Tick):
    policy, up = t.policy, t.policy.scaling.scale_up
    # (groups wanted, reason, its detail when asked, on forecast): the detail is written only for a
    # start or an explained hold (a replay's holds are not explained, and most ticks at the ceiling
    # want more groups than it allows)
    wants: list[tuple[int, Reason, Callable[[], str], bool]] = []
    ready = len(t.ready)
    demand: float | None
    queued: float | None
    if t.demand is not None:
        demand, queued = t.demand, t.queued
    elif t.demand_floor is not None:  # some groups unknown: what the others carry is a lower bound
        demand, queued = t.demand_floor, t.queued_floor
    else:
        demand = queued = None
    serving = t.serving
    # (what the demand is made of and who is leaving: _demand_of and _leaving, written when a detail is)
    if demand is not None and queued is not None:
        need = groups_needed(demand, t.per_group) + t.spare
        if up.on_utilization and need > serving:
            # 11 requests / (6 x 0.7 = 4.2 per group) -> 3 groups
            wants.append((need, Reason.UTILIZATION_HIGH,
                          lambda: f"demand {_fmt(demand)} ({_demand_of(t)}) "
                          f"> {serving} groups x {_fmt(t.per_group)} = {_fmt(serving * t.per_group)}"
                          f"{_headroom_note(t)}{_leaving(t)}; "
                          f"needs {need}" + (f" incl. {t.spare} spare" if t.spare else ""), False))
        if (up.queued_per_group_above is not None and ready and queued is not None
                and queued / ready > up.queued_per_group_above):
            wants.append((ready + 1, Reason.QUEUE_HIGH,
                          lambda: f"queued {_fmt(queued)} over {ready} ready groups = {_fmt(queued / ready)} "
                          f"per group > {_fmt(up.queued_per_group_above)}", False))
        if t.fc is not None and t.fc.basis != "current":
            fc = t.fc
            need_fc = groups_needed(fc.peak, t.per_group) + t.spare
            if need_fc > serving:
                wants.append((need_fc, Reason.FORECAST_HIGH,
                              lambda: f"forecast demand {_fmt(fc.peak)} ({fc.basis}) within {_fmt(fc.horizon_s)} s "
                              f"> {serving} groups x {_fmt(t.per_group)}{_headroom_note(t)}{_leaving(t)}; "
                              f"needs {need_fc}", True))
    fleet = t.signals.fleet
    capacity_miss = False
    if up.on_slo_burn and ready and fleet.ttft_p99_s is not None and fleet.ttft_p99_s > policy.slo.ttft_target_s:
        # (the why is written only when a start or an explained hold reads it, as the details above)
        if fleet.queue_wait_p99_s is not None:
            capacity_miss = fleet.queue_wait_p99_s > up.slo_burn_min_queue_wait_s

            def why() -> str:
                return f"queue wait p{policy.slo.ttft_percentile:g} {_fmt(fleet.queue_wait_p99_s)} s"
        else:
            capacity_miss = bool(t.queued)

            def why() -> str:
                return f"{_fmt(t.queued)} requests queued"
    if not capacity_miss:
        if t.memory.slo_miss_since is not None:
            t.memory = t.memory.with_(slo_miss_since=None)
    else:
        since = t.memory.slo_miss_since if t.memory.slo_miss_since is not None else t.now
        if since != t.memory.slo_miss_since:
            t.memory = t.memory.with_(slo_miss_since=since)
        if t.now - since >= up.slo_burn_for_s:
            wants.append((ready + 1, Reason.SLO_BURN,
                          lambda: f"TTFT p{policy.slo.ttft_percentile:g} {_fmt(fleet.ttft_p99_s)} s > target "
                          f"{_fmt(policy.slo.ttft_target_s)} s with {why()} for {_fmt(t.now - since)} s", False))
    if not wants:
        return None
    want, reason, detail_of, on_forecast = max(wants, key=lambda w: w[0])  # first of equals wins (list order)
    if want <= serving:
        return None
    # Cordoned groups still count against the ceiling (they are running): 7 wanted on g1 ready and
    # g2 starting, cordoned, ceiling 3 -> serving 1, min(7 - 1, 3 - 2, +2) = 1 start (g3).
    starts = min(want - serving, t.bounds.ceiling - t.active, up.max_groups_per_decision)
    detail = detail_of() if starts > 0 or t.explain else ""  # (an unexplained hold has no detail)
    if t.cordoned:
        names = ", ".join(g.name for g in t.cordoned)
        if want <= t.active:  # the groups there would do, but the cordoned ones are leaving
            reason = Reason.CORDONED
            detail = f"{names} cordoned: {detail}, so a replacement starts before it drains"
        else:
            detail += f"; {names} cordoned"
    if starts <= 0:  # demand wants more: no surplus, whatever the ceiling says
        keeps = f" ({', '.join(g.name for g in t.cordoned)} stays until the others carry the load)" \
            if t.cordoned else ""
        return _bound_hold(t, detail, keeps)
    if starts < want - serving:
        detail += (f" (limited to {t.active + starts}: ceiling {t.bounds.ceiling}, at most "
                   f"+{up.max_groups_per_decision} per decision)")
    return _start(t, starts, reason, detail, forecast_used=on_forecast)


def _demand_of(t: _Tick) -> str:
    """What a scale-up's demand is: running + queued, or (some groups unknown) a lower bound."""
    if t.demand is not None:
        return f"running {_fmt(t.running)} + queued {_fmt(t.queued)}"
    return f"at least: {', '.join(t.unknown)} unknown"


def _leaving(t: _Tick) -> str:
    return f" ({', '.join(g.name for g in t.cordoned)} cordoned, not counted)" if t.cordoned else ""


def _bound_hold(t: _Tick, detail: str, keeps: str = ""):
    """The hold when more groups are wanted than the ceiling allows: pinned, the floor over a cap,
    or the ceiling itself."""
    if t.bounds.pinned:
        return _hold(t, Reason.PINNED, f"{detail}; but pinned at {t.bounds.ceiling} groups until "
                     f"{t.policy.schedules.pin.until.isoformat()}{keeps}", _no_surplus(t.memory))  # type: ignore[union-attr]
    if t.bounds.floor_over_cap:
        return _hold(t, Reason.FLOOR_OVER_CAP, f"{detail}; but held at the floor {t.bounds.floor} "
                     f"({t.bounds.ceiling_source}){keeps}", _no_surplus(t.memory))
    return _hold(t, Reason.AT_CEILING, f"{detail}; but already at ceiling {t.bounds.ceiling} "
                 f"({t.bounds.ceiling_source}){keeps}", _no_surplus(t.memory))


def _signal_problem(t: _Tick):
    if not t.reporting:  # nothing serves yet, or only groups too new to have been scraped
        waiting = ", ".join(f"{g.name} {g.phase}" for g in t.starting + t.ready) or "nothing"
        return _hold(t, Reason.ACTION_IN_FLIGHT, f"no ready group has been scraped yet ({waiting}); holding at "
                     f"{t.active} groups", _no_surplus(t.memory))
    problem = t._problem_in(_SCALE_DOWN_SIGNALS)
    if problem is None and t.demand is None:
        missing = next(g.name for g in t.reporting if t.signals.groups.get(g.name) is None
                       or t.signals.groups[g.name].running is None or t.signals.groups[g.name].queued is None)
        problem = Problem("running", missing, "absent", "no value for a ready group")
    if problem is None:
        return None
    where = f"group {problem.group}" if problem.group else "the fleet"
    return _hold(
        t,
        problem_reason(problem.kind),
        f"signal {problem.signal} for {where} is {problem.kind}: {problem.detail}; holding at {t.active} groups "
        "(never scaling down on missing data)",
        _no_surplus(t.memory),
    )


def _above_ceiling(t: _Tick):
    if t.active <= t.bounds.ceiling:
        return None
    # The ceiling is an invariant: it is enforced under any load, with signals missing (the victim
    # key falls back to the policy order) and inside a freeze window (freezes stop the scale-downs
    # the core chooses, not the ones a cap or pin demands). One group at a time.
    reason = Reason.PIN if t.bounds.pinned else Reason.ABOVE_CEILING
    detail = f"{t.active} active groups > ceiling {t.bounds.ceiling} ({t.bounds.ceiling_source})"
    if t.starting or t.draining:
        busy = ", ".join(f"{g.name} {g.phase}" for g in t.starting + t.draining)
        return _hold(t, Reason.ACTION_IN_FLIGHT, f"{detail}; waiting for {busy}", _no_surplus(t.memory))
    freeze = active_freeze(t.policy, t.now)
    if freeze:
        detail += f" (inside freeze window {freeze}: the ceiling wins)"
    # A cordoned group is leaving anyway: it goes first (else the cap and then the cordon would
    # cost two groups); among several, and otherwise, the victim key (core/victim.py).
    cordoned = [g for g in t.ready if g.cordoned]
    if cordoned:
        detail += f" ({', '.join(g.name for g in cordoned)} cordoned: first)"
    victim = choose_victim(cordoned or t.ready, t.order, dict(t.signals.groups))
    return _drain(t, victim.name, reason, detail)  # type: ignore[union-attr]


def _cordoned(t: _Tick):
    """An active group an operator cordoned is drained, one at a time, once that costs nothing the
    floor or the load needs. The scale-ups (the rule before) already started what the load needs
    without it; here: a replacement first when draining would leave fewer groups than the floor
    (within the ceiling: at the ceiling the cordoned group keeps serving, and the hold says so);
    then no drain while any group starts or drains (one change at a time, and a starting group
    is capacity on its way, not yet in service) or while demand is unknown (never scale down on
    missing data; the floor's replacement needs no signals)."""
    if not t.cordoned:
        return None
    names = ", ".join(g.name for g in t.cordoned)
    floor = t.bounds.floor
    if t.serving < floor:
        # floor 2, g1 ready, g2 ready and cordoned, g3 draining: serving 1 < 2 -> g3 back from draining
        detail = f"{names} cordoned: draining would leave {t.serving} groups, below floor {floor}"
        room = t.bounds.ceiling - t.active
        if room <= 0:
            return _bound_hold(t, f"{detail}, and no room for a replacement",
                               f" ({names} stays until the bounds allow a replacement)")
        return _start(t, min(floor - t.serving, room), Reason.CORDONED, f"{detail}, so a replacement starts first")
    if t.starting or t.draining:
        waits = []
        replacements = [g.name for g in t.starting if not g.cordoned]
        if replacements:
            waits.append(f"waiting for the replacement {', '.join(replacements)} before draining")
        if any(g.cordoned for g in t.starting):
            waits.append(f"{', '.join(g.name for g in t.starting if g.cordoned)} cordoned while starting: "
                         "draining it once it is ready")
        if t.draining:
            waits.append(f"waiting for {', '.join(g.name for g in t.draining)} to finish draining")
        return _hold(t, Reason.ACTION_IN_FLIGHT, f"{names} cordoned; {'; '.join(waits)}", _no_surplus(t.memory))
    if t.demand is None:
        held = _signal_problem(t)
        assert held is not None  # without demand it always holds
        return replace(held[0], detail=f"{names} cordoned, not drained yet: {held[0].detail}"), held[1]
    victim = min(t.cordoned, key=lambda g: t.order[g.name])  # every one is ready: nothing starts
    others = len(t.ready) - 1
    return _drain(t, victim.name, Reason.CORDONED,
                  f"{victim.name} is cordoned by an operator; {others} other ready groups keep floor {floor} "
                  f"and carry demand {_fmt(t.demand)} ({others} x {_fmt(t.per_group)} = "
                  f"{_fmt(others * t.per_group)} at target)")


def _fmt_pct(p: float) -> str:
    return f"{100 * p:.2g}%" if p < 0.1 else f"{100 * p:.0f}%"


def _burn_after_drain(t: _Tick) -> float | None:
    """The burn a drain now would leave: with the open watch of the previous drain closed and its
    session-move misses charged, as ``_drain`` does; the burn as it is when no watch is open."""
    watch = t.memory.drain_watch
    moved = 0.0 if watch is None else watch_misses(watch)
    if moved <= 0:
        return t.burn
    return burn_rate(t.memory.with_(**charged_burn(t.memory, moved, t.now)), t.policy)


def _headroom_note(t: _Tick) -> str:
    """How a burning budget set the requests a group counts for (core/risk.py, ``headroom``)."""
    if t.headroom == 1.0:
        return ""
    return (f" (the budget burns {t.burn:.2f}x: {_fmt(t.base_per_group)} / {t.headroom:.2f} a group, "
            f"to start before requests queue)")


def _surplus(t: _Tick, remaining: int, explain: bool = True) -> tuple[bool, str, dict[str, Any]]:
    """Would ``remaining`` groups (less spares) carry what comes within one lead time?

    Yes when current demand and the forecast fit them under ``scale_down.utilization_below`` (a cap:
    below the scale-up point, so that the drain is not undone at once), and the measured chance that
    demand exceeds their capacity within the lead time (core/risk.py) is at most what the SLO error
    budget allows. Without ``explain``, the answer alone (no numbers, no inputs).
    """
    policy, down = t.policy, t.policy.scaling.scale_down
    assert t.demand is not None and t.fc is not None  # _signal_problem held otherwise
    if down.silence_s is not None and remaining > 0:
        silence = t.memory.silence  # (this tick folded in: its last tick is now while it lasts)
        if silence is not None and silence[1] == t.now and t.now - silence[0] >= down.silence_s:
            return _silent_surplus(t, remaining, explain)
    # The trend is a point forecast for scale-ups (ramps); whether demand may rise within the lead
    # time is the risk's question. A trusted seasonal forecast counts as well.
    worst = max(t.demand, t.fc.peak) if t.fc.basis == "seasonal" else t.demand
    util_after = worst / (remaining * policy.fleet.requests_per_group) if remaining > 0 else math.inf
    # The headroom the drain must leave is the one after it: a drain closes the previous drain's
    # open watch and charges its session moves to the burn (_drain). Judged on the burn before
    # that, a drain at headroom 1 could leave a burn of 2 and be undone by the next tick's scale-up
    # at the same demand.
    burn_after = _burn_after_drain(t)
    room_after = headroom(burn_after)
    room = room_after if room_after > t.headroom else t.headroom  # (max(t.headroom, room_after), as max keeps them)
    capacity = remaining * t.base_per_group / room
    fits = util_after * room < down.utilization_below
    if not explain and not fits:
        return False, "", {}
    risk: Risk | None = None
    allowed, burn = allowed_risk_at(t.burn, policy)  # (t.burn is the memory's: burn_rate(t.memory))
    # In requests the budget is the budget: an unspent one allows no more than itself (the exceedance
    # risk, a proxy, may take up to twice it); a burning one halves it as before. At 2x, five groups
    # spent 0.495 pp of the 0.5 pp bar on m-small (seed 0, 0.35).
    budget = policy.slo.capacity_miss_budget_pct / 100.0
    allowed_in_requests = budget if budget < allowed else allowed  # (min(allowed, budget), as min keeps them)
    # The risk in requests (core/risk.py, expected_miss_share): the misses the drain adds per
    # arrival, against the same allowed share; without a request rate, the chance of any excess.
    # Asked when there is a risk (a level to measure from: ``level_now``) and the numbers it needs.
    misses = None
    rate = t.signals.fleet.request_rate
    if (down.excess_minutes is not None and remaining > 0 and rate is not None and math.isfinite(rate) and rate > 0
            and (level := level_now(t.memory)) is not None):
        # Against always-on (the ceiling's groups, as an operator's window or pin caps it, at the
        # requests a group carries at target, unshrunk by a burning budget), not against one group
        # more: the budget counts the misses ours adds to always-on's, and a drain judged against the
        # fleet it leaves let each step of a cascade add up to the budget again (and, with the
        # headroom of a burning budget shrinking both fleets, a burst that swamped both added
        # nothing: on an on/off trace at five groups four steps down at 0.1-0.2% each, 10 pp of SLO).
        misses = expected_miss_share(t.memory, policy, t.now, capacity, t.bounds.ceiling * t.base_per_group,
                                     rate * policy.slo.ttft_target_s, t.risk_horizon, down.excess_minutes,
                                     stop_above=None if explain else allowed_in_requests,
                                     level=level)  # (today's, as it would read it: read once)
        if not explain and misses is not None and misses.share > allowed_in_requests:
            # Only "within what is allowed?" matters, and the risk in requests already says no
            # (most ticks of a replay): the exceedance risk, which only adds conditions, is not asked.
            return False, "", {}
    if remaining > 0:
        # Without ``explain`` only "within what is allowed?" matters: the risk may stop counting
        # once the three hours alone say no (core/risk.py); a drain is then explained in full.
        risk = exceed_probability(t.memory, policy, t.now, capacity, t.risk_horizon,
                                  stop_above=None if explain else allowed)
    need = down.min_measured_rises
    # The measurements must show the risk within budget (core/risk.py, evidence_floor): part of the
    # cold start's hold, off with it (scale_down.min_measured_rises 0).
    floor = evidence_floor(risk) if risk is not None and need else 0.0
    judged = misses.share if misses is not None else risk.probability if risk is not None else math.inf
    allowed_misses = allowed_in_requests if misses is not None else allowed
    surplus = (risk is not None and risk.samples >= need and fits and judged <= allowed_misses
               and floor <= allowed)
    if not explain:
        return surplus, "", {}
    extra: dict[str, Any] = {"utilization_after_scale_down": None if remaining <= 0 else round(util_after, 4),
                             "risk": None if risk is None else risk.to_dict(), "risk_allowed": round(allowed, 5),
                             "expected_misses": None if misses is None else misses.to_dict(),
                             "ttft_over_target": t.signals.ttft_over_target,
                             "session_move_misses": None if t.memory.session_moves is None
                             else round(t.memory.session_moves[0], 2)}
    # e.g. demand 3, forecast 3.5, 3 -> 2 groups: 3.5 / (2 x 6) = 0.29 < 0.9
    numbers = (f"demand {_fmt(t.demand)}, forecast {_fmt(t.fc.peak)} over {_fmt(t.horizon)} s; on "
               f"{max(remaining, 0)} groups that is {_fmt(util_after if remaining > 0 else None)} utilisation "
               f"(cap {_fmt(down.utilization_below)}"
               + ("" if room == 1.0 else f" / {room:.2f}: the budget burns {burn_after or 0.0:.2f}x") + ")")
    if risk is None:
        return False, numbers, extra
    seasonal = ("" if risk.p_seasonal is None else
                f"; seasonal {_fmt_pct(risk.p_seasonal)} over {risk.seasonal_days} days x weight {risk.seasonal_weight:.2f}")
    spend = "unmeasured" if burn is None else f"burning {burn:.2f}x"
    moves = t.memory.session_moves
    if moves is not None and moves[0] > 0:
        spend += f" (incl. {_fmt(round(moves[0], 1))} session-move misses of the last drain)"
    week = ("" if risk.p_week is None else
            f" and {_fmt_pct(risk.p_week)} over the week's {risk.week_minutes:,} {_minutes(policy)}")
    recent = (f"recent {_fmt_pct(risk.p_recent)} over {_rises(risk, policy)}" if risk.p_week is None else
              f"recent {_fmt_pct(risk.p_recent)}: {_fmt_pct(risk.p_hours or 0.0)} over {_rises(risk, policy)}{week}")
    exceed = (f"P(demand > {_fmt(capacity)} within {_fmt(t.risk_horizon)} s) = {_fmt_pct(risk.probability)} "
              f"({recent}{seasonal})")
    if misses is not None:
        # e.g. "expected added misses 0.15% of arrivals (excess held 1 minute of 11; a queue of 4 misses
        # every arrival); P(demand > 12 within 615 s) = 33% (...)"
        exceed = (f"expected added misses {_fmt_pct(misses.share)} of arrivals over {_fmt(t.risk_horizon)} s "
                  f"(an excess held {_fmt(down.excess_minutes)} of "
                  f"{lead_minutes(t.risk_horizon, policy.forecast.minute_s)} {_minutes(policy)}; "
                  f"{_fmt(misses.queue_to_miss)} queued make every arrival miss); {exceed}")
    numbers = (f"{exceed}, "
               f"budget {_fmt(policy.slo.capacity_miss_budget_pct)}% {spend} allows {_fmt_pct(allowed_misses)}"
               + ("" if allowed_misses == allowed else f" in requests ({_fmt_pct(allowed)} as a chance)")
               + f"; {numbers}")
    if risk.samples < need:
        # Cold start: the prior is a guess about a fleet never seen; a drain waits for the fleet's own
        # rises (scale_down.min_measured_rises, 30: at the default minute and a 615 s lead, 41 minutes).
        numbers = f"only {risk.samples} of {need} {_rises_of(risk, policy)} measured: no drain on the prior alone; {numbers}"
        return False, numbers, extra
    extra["risk_evidence_floor"] = round(floor, 5)
    if floor > allowed and judged <= allowed_misses:
        n = evidence_minutes(risk)
        numbers = (f"{n:,} {_minutes(policy)} of rises cannot show a risk below {_fmt_pct(floor)} (1 / ({n:,} + 2)), "
                   f"above the {_fmt_pct(allowed)} allowed: no drain yet; {numbers}")
    return surplus, numbers, extra


SILENCE_PCT = 100 * SILENCE_BUDGET_SHARE


def _silent_surplus(t: _Tick, remaining: int, explain: bool) -> tuple[bool, str, dict[str, Any]]:
    """``_surplus`` in a silence: no request for ``scale_down.silence_s`` and none running or
    queued. A drain then loses nothing while the silence lasts; what it stakes is a return of the
    traffic before a start catches up (core/risk.py, ``return_risk``), set against the misses the
    budget has free. The measured history must be there (``min_measured_rises``), as for any drain."""
    policy, down = t.policy, t.policy.scaling.scale_down
    room = max(t.headroom, headroom(_burn_after_drain(t)))
    after = remaining * t.base_per_group / room
    # Always-on is the SLO's reference: its capacity is the ceiling's, whatever our budget's burn
    # (a burning budget shrinks only what stays, so the stake grows with it).
    always_on = t.bounds.ceiling * t.base_per_group
    ret = return_risk(t.memory, policy, t.now, after, always_on, t.risk_horizon)
    measured = len(t.memory.rises_sorted) >= down.min_measured_rises
    surplus = ret is not None and measured and ret.misses <= ret.allowed
    if not explain:
        return surplus, "", {}
    extra: dict[str, Any] = {"return_risk": None if ret is None else ret.to_dict()}
    if ret is None:
        return False, "silent, but no traffic, budget or rises measured yet", extra
    numbers = (f"no request for {_fmt(round(ret.silent_s))} s (silence after {_fmt(down.silence_s)} s): a return at "
               f"{_fmt(round(ret.rate, 3))}/s and demand {_fmt(round(ret.level, 2))} on {_fmt(after)} slots would add "
               f"{_fmt(round(ret.misses, 1))} misses over {_fmt(t.risk_horizon)} s, against "
               f"{_fmt(round(ret.allowed, 1))} allowed ({_fmt(SILENCE_PCT)}% of the budget's "
               f"{_fmt(round(ret.free, 1))} free misses over three days)")
    if not measured:
        numbers = (f"only {len(t.memory.rises_sorted)} of {down.min_measured_rises} minutes of rises measured: "
                   f"no drain on the prior alone; {numbers}")
    return surplus, numbers, extra


def _rises(risk: Risk, policy: Policy) -> str:
    """What the recent risk stands on: "180 minutes", or in the cold start "34 rises at tick resolution"."""
    if risk.resolution == "tick":
        return f"{risk.samples} rises at tick resolution"
    return f"{risk.samples} {_minutes(policy)}"


def _rises_of(risk: Risk, policy: Policy) -> str:
    return "rises at tick resolution" if risk.resolution == "tick" else f"{_minutes(policy)} of rises"


def _minutes(policy: Policy) -> str:
    """The core's minute in a reason: "minutes", or "minutes of 2 s" when ``forecast.minute_s`` is not 60."""
    m = policy.forecast.minute_s
    return "minutes" if m == 60 else f"minutes of {_fmt(m)} s"


def _scale_down(t: _Tick):
    policy, down = t.policy, t.policy.scaling.scale_down
    remaining = t.active - 1 - t.spare
    surplus, numbers, extra = _surplus(t, remaining, t.explain)
    if t.active <= t.bounds.floor:
        memory = _no_surplus(t.memory)
        if t.bounds.pinned:
            return _hold(t, Reason.PINNED, f"pinned at {t.bounds.floor} groups until "
                         f"{policy.schedules.pin.until.isoformat()}", memory, **extra)  # type: ignore[union-attr]
        if t.bounds.floor_over_cap:
            return _hold(t, Reason.FLOOR_OVER_CAP, f"a schedule cap is below the floor {t.bounds.floor} "
                         f"({t.bounds.floor_source}); the floor wins", memory, **extra)
        if surplus or remaining <= 0:
            return _hold(t, Reason.AT_FLOOR, f"{numbers}; at floor {t.bounds.floor} ({t.bounds.floor_source})",
                         memory, **extra)
        return _hold(t, Reason.STEADY, f"{numbers}; {t.active} groups fit", memory, **extra)
    if not surplus:
        if not t.explain:  # (most ticks of a replay: _hold's unexplained hold, without writing its detail)
            return _unexplained_hold(t.active, Reason.STEADY), _no_surplus(t.memory)
        return _hold(t, Reason.STEADY, f"{numbers}; keeping {t.active} groups", _no_surplus(t.memory),
                     **extra)
    if t.starting or t.draining:
        busy = ", ".join(f"{g.name} {g.phase}" for g in t.starting + t.draining)
        return _hold(t, Reason.ACTION_IN_FLIGHT, f"{numbers}; but {busy}: one change at a time",
                     _no_surplus(t.memory), **extra)
    since = t.memory.surplus_since if t.memory.surplus_since is not None else t.now
    memory = t.memory if t.memory.surplus_since == since else t.memory.with_(surplus_since=since)
    t.memory = memory
    held_for = t.now - since
    if held_for < down.stabilization_s:
        return _hold(t, Reason.STABILIZING, f"{numbers} for {_fmt(held_for)} s of the required "
                     f"{_fmt(down.stabilization_s)} s", **extra)
    if t.memory.last_scale_up_at is not None and t.now - t.memory.last_scale_up_at < down.cooldown_after_scale_up_s:
        ago = t.now - t.memory.last_scale_up_at
        return _hold(t, Reason.COOLDOWN, f"{numbers}; but the last scale-up was {_fmt(ago)} s ago "
                     f"(cooldown {_fmt(down.cooldown_after_scale_up_s)} s)", **extra)
    freeze = active_freeze(policy, t.now)
    if freeze:
        return _hold(t, Reason.FREEZE_WINDOW, f"{numbers}; but freeze window {freeze} forbids scale-downs", **extra)
    budget = policy.scaling.disruption_budget_per_hour
    if len(t.memory.disruptions) >= budget:
        return _hold(t, Reason.DISRUPTION_BUDGET, f"{numbers}; but {len(t.memory.disruptions)} groups were "
                     f"started or drained in the last hour (budget {budget})", **extra)
    old_enough = [g for g in t.ready if t.now - g.since >= down.min_group_uptime_s]
    if not old_enough:
        youngest = max(t.now - g.since for g in t.ready) if t.ready else 0.0
        return _hold(t, Reason.MIN_UPTIME, f"{numbers}; but no group has been ready for "
                     f"{_fmt(down.min_group_uptime_s)} s (oldest {_fmt(youngest)} s)", **extra)
    victim = choose_victim(old_enough, t.order, dict(t.signals.groups))
    assert victim is not None
    v = t.signals.groups.get(victim.name, _NO_SIGNALS)
    if not t.explain:  # a drain is explained in full: the same numbers, measured again
        _, numbers, extra = _surplus(t, remaining)
    return _drain(t, victim.name, Reason.SURPLUS,
                  f"{numbers} for {_fmt(held_for)} s; victim {victim.name} (KV {_fmt(v.kv_usage)}, "
                  f"running {_fmt(v.running)})", **extra)
