"""The boundary between the pure decision core and everything else.

Adapters (Prometheus, the gateway, actuators, the simulator) build these values; the core reads
them and returns a ``Decision`` and the next ``Memory``. Times are UTC epoch seconds (floats): the
core never reads the clock, ``now`` is a parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from datetime import datetime, timezone
from enum import StrEnum
from typing import Any, overload


class Action(StrEnum):
    HOLD = "hold"
    SCALE_UP = "scale_up"
    SCALE_DOWN = "scale_down"


class Reason(StrEnum):
    """The closed set of reason codes. The README lists each with its meaning."""

    # hold
    STEADY = "steady"  # capacity fits demand; nothing to do
    AT_FLOOR = "at_floor"  # demand is low but the fleet is at its effective floor
    AT_CEILING = "at_ceiling"  # demand wants more groups but the fleet is at its effective ceiling
    FLOOR_OVER_CAP = "floor_over_cap"  # a schedule cap is below the floor; the floor wins
    PINNED = "pinned"  # a manual pin holds the fleet at its size
    FLEET_UNSYNCED = "fleet_unsynced"  # the fleet's state is not known; nothing is decided
    SIGNAL_UNAVAILABLE = "signal_unavailable"  # a signal could not be read (unreachable, http error, empty, absent)
    SIGNAL_STALE = "signal_stale"  # a signal's newest sample is older than the staleness limit
    SIGNAL_INVALID = "signal_invalid"  # a signal is NaN/Inf or has more series than expected
    ACTION_IN_FLIGHT = "action_in_flight"  # a group is starting or draining; no conflicting action
    STABILIZING = "stabilizing"  # surplus, but not yet for the whole stabilisation window
    COOLDOWN = "cooldown"  # surplus, but a scale-up happened less than the cooldown ago
    FREEZE_WINDOW = "freeze_window"  # surplus, but a freeze window forbids scale-downs
    DISRUPTION_BUDGET = "disruption_budget"  # surplus, but the hourly budget of starts+drains is spent
    MIN_UPTIME = "min_uptime"  # surplus, but every candidate group is younger than the minimum uptime
    NO_GROUP_AVAILABLE = "no_group_available"  # more groups wanted, but none is off and startable
    # scale_up
    BELOW_FLOOR = "below_floor"  # fewer active groups than the effective floor
    UTILIZATION_HIGH = "utilization_high"  # running+queued exceed active groups at target utilisation
    QUEUE_HIGH = "queue_high"  # queued requests per ready group above the policy's limit
    SLO_BURN = "slo_burn"  # TTFT percentile over target, caused by queue wait
    FORECAST_HIGH = "forecast_high"  # forecast demand over the lead time exceeds capacity
    # scale_up or scale_down
    PIN = "pin"  # a manual pin asks for a different size
    # scale_down
    ABOVE_CEILING = "above_ceiling"  # more active groups than the effective ceiling (a schedule cap)
    # scale_down or scale_up
    CORDONED = "cordoned"  # an operator cordoned an active group: drain it (a replacement first if the floor or the load needs one)
    SURPLUS = "surplus"  # the remaining groups carry demand and forecast under the threshold


class Phase(StrEnum):
    """A group's life: off -> starting -> ready -> draining -> stopping -> off (failed: gave up)."""

    OFF = "off"
    STARTING = "starting"  # nodes launching, weights loading, registering with the gateway
    READY = "ready"  # serving
    DRAINING = "draining"  # removed from routing; in-flight requests finish
    STOPPING = "stopping"
    FAILED = "failed"  # a start or stop failed; not capacity, not startable until an operator clears it


# Problem kinds, as docs/interfaces.md names them.
PROBLEM_KINDS = ("unreachable", "http_error", "empty", "multiple_series", "not_a_number", "stale", "absent",
                 "out_of_range", "slow")

# What a reading can physically be (docs/signals.md, "out_of_range"). KV use is a share of the
# cache; a group runs a handful of requests (6 on the reference fleet), so a million running,
# queued or arriving per second is no fleet at all; a latency beyond a day is a broken histogram.
# Prometheus answering 1e308 for KV use was taken as a reading: it is a problem, not a value.
SIGNAL_RANGES: Mapping[str, tuple[float, float]] = {
    "running": (0.0, 1e6),
    "queued": (0.0, 1e6),
    "kv_usage": (0.0, 1.0),
    "request_rate": (0.0, 1e6),
    "ttft_p99_s": (0.0, 86_400.0),
    "queue_wait_p99_s": (0.0, 86_400.0),
}


def out_of_range(signal: str, value: float) -> str | None:
    """The detail of an ``out_of_range`` problem for a finite reading outside its physical range, else None."""
    low, high = SIGNAL_RANGES.get(signal, (float("-inf"), float("inf")))
    if value < low:
        return f"value {value:g} is below {low:g}, which {signal} cannot be"
    if value > high:
        return f"value {value:g} is above {high:g}, which {signal} cannot be"
    return None


_PROBLEM_REASON = {
    "unreachable": Reason.SIGNAL_UNAVAILABLE,
    "slow": Reason.SIGNAL_UNAVAILABLE,  # connected, but no answer within signals.timeout_s
    "http_error": Reason.SIGNAL_UNAVAILABLE,
    "empty": Reason.SIGNAL_UNAVAILABLE,
    "absent": Reason.SIGNAL_UNAVAILABLE,
    "stale": Reason.SIGNAL_STALE,
    "not_a_number": Reason.SIGNAL_INVALID,
    "multiple_series": Reason.SIGNAL_INVALID,
    "out_of_range": Reason.SIGNAL_INVALID,
}


def problem_reason(kind: str) -> Reason:
    return _PROBLEM_REASON.get(kind, Reason.SIGNAL_UNAVAILABLE)


def slot_init(cls: type) -> type:
    """A frozen dataclass with slots, with an ``__init__`` that writes each field through its slot's
    setter: the same object as the generated one's ``object.__setattr__`` per field builds, in
    about half the time (1.7 against 3.0 us for ForecastResult's six fields on a loaded machine).
    For the values the core builds at every tick of a replay (ForecastResult, MissRisk). Fields with
    a plain default keep it; one with a default factory is refused (nothing here needs one)."""
    params, body = [], []
    namespace: dict[str, Any] = {}
    for i, f in enumerate(fields(cls)):
        if f.default_factory is not MISSING:
            raise TypeError(f"slot_init: {cls.__name__}.{f.name} has a default factory")
        namespace[f"_set{i}"] = cls.__dict__[f.name].__set__
        if f.default is MISSING:
            params.append(f.name)
        else:
            namespace[f"_default{i}"] = f.default
            params.append(f"{f.name}=_default{i}")
        body.append(f"    _set{i}(self, {f.name})")
    exec(f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body), namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init  # type: ignore[misc]
    return cls


@dataclass(frozen=True, slots=True)
class GroupSignals:
    """One group's (or the fleet's) load. None means unknown: never a silent 0."""

    running: float | None = None
    queued: float | None = None
    kv_usage: float | None = None  # KV-cache use, 0-1
    request_rate: float | None = None  # requests/s
    ttft_p99_s: float | None = None  # TTFT at the policy's percentile (the key keeps docs/interfaces.md's name)
    queue_wait_p99_s: float | None = None  # queue wait at the same percentile, when exported

    def to_dict(self) -> dict[str, float | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class Problem:
    signal: str
    group: str | None  # None: the fleet-level query
    kind: str  # one of PROBLEM_KINDS
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"signal": self.signal, "group": self.group, "kind": self.kind, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class SignalSnapshot:
    at: float
    groups: Mapping[str, GroupSignals]
    fleet: GroupSignals
    problems: tuple[Problem, ...] = ()
    # The fleet's share of first tokens within the signal window whose TTFT exceeded the target
    # (0-1), from the TTFT histogram; None when unknown. What a drain's moved conversations cost
    # shows in it (core/risk.py, ``session_move_changes``). Not one of ``signals --json``'s keys.
    ttft_over_target: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": iso(self.at),
            "groups": {name: g.to_dict() for name, g in self.groups.items()},
            "fleet": self.fleet.to_dict(),
            "problems": [p.to_dict() for p in self.problems],
        }


@dataclass(frozen=True, slots=True)
class GroupState:
    name: str
    phase: Phase
    since: float  # when the group entered this phase (epoch s)
    cordoned: bool = False  # an operator (or repeated start failures) took it out: never a start candidate


@dataclass(frozen=True, slots=True)
class FleetState:
    groups: Mapping[str, GroupState]  # every group of the policy, in policy order
    synced: bool = True  # False while the runner does not know the true state (e.g. after a crash)


@dataclass(frozen=True, slots=True)
class Memory:
    """What the core remembers between ticks. Replaced, never mutated (tuples and fresh dicts)."""

    last_scale_up_at: float | None = None
    surplus_since: float | None = None  # since when the scale-down condition has held continuously
    slo_miss_since: float | None = None  # since when the TTFT percentile has missed because of queue wait
    disruptions: tuple[float, ...] = ()  # times of group starts and drains within the last hour
    startup_durations_s: tuple[float, ...] = ()  # the most recent measured start-up times
    demand_samples: tuple[tuple[float, float], ...] = ()  # (t, demand) within the trend window
    # Seasonal history: 5-minute slot index (epoch // 300) -> highest demand seen in that slot,
    # for finished slots, kept for forecast.seasonal_days + 1 days. The slot in progress is kept
    # apart (``slot_now``) so the history is copied once per slot, not at every tick.
    demand_by_slot: Mapping[int, float] = field(default_factory=dict)
    slot_now: tuple[int, float] | None = None  # (slot index, highest demand so far)
    # The seasonal statistic for (slot, slots ahead): the history only changes when a slot ends,
    # so it is computed once per slot, not at every tick.
    seasonal_memo: tuple[int, int, float | None] | None = None
    # Recent rises (core/risk.py): the minute in progress (index, sum of demand samples, count), the
    # closed minutes' mean demand one lead time back, and the normalised rise measured from each closed minute of the last three
    # hours (time order, and the same values sorted for the probability: derived, not serialised).
    minute_now: tuple[int, float, int, float] | None = None  # (index, sum, count, busiest tick)
    minute_max: tuple[tuple[int, float, float], ...] = ()  # (index, mean, busiest tick)
    rise_log: tuple[tuple, ...] = ()  # (minute, rise, base, reached), or (minute, rise) from older memory
    rises_sorted: tuple[float, ...] = ()
    # The same rises as (rise, base, reached), sorted; empty when any rise's base is not known
    # (memory saved before bases were kept), and the rise alone decides (derived, not serialised).
    rise_reach: tuple[tuple[float, float, float], ...] = ()
    # The week's tail (core/risk.py, ``tail_changes``): a rise that leaves the three hours joins its
    # hour, (hour index, minutes measured in it, its TAIL_PER_HOUR highest rises as (rise, base,
    # reached), sorted), for TAIL_HOURS hours; the rises of its closed hours (all but the
    # last) sorted, and the count of minutes they all stand for (derived, not serialised).
    rise_tail: tuple[tuple[int, int, tuple[tuple[float, float, float], ...]], ...] = ()
    tail_sorted: tuple[tuple[float, float, float], ...] = ()
    tail_minutes: int = 0
    # The cold start's evidence (core/risk.py, ``tick_rise_changes``): until PRIOR_RISES minutes of
    # rises are measured, a rise is also measured from a minute that starts at every tick. The ticks
    # of the last lead time and minute, (time, demand), and the rises so far, sorted; both empty once
    # the minutes take over.
    tick_window: tuple[tuple[float, float], ...] = ()
    tick_rises: tuple[tuple[float, float, float], ...] = ()  # (rise, base, reached), sorted
    # How well the seasonal forecast predicted recently: (mean abs error of the seasonal prediction,
    # of persistence), exponentially weighted; None until measured (the seasonal part is then unused).
    seasonal_skill: tuple[float, float] | None = None
    # The error budget's burn: (estimated capacity misses, arrivals, at), exponentially weighted
    # over six hours, and the same over three days (core/risk.py, ``burn_rate``: the higher counts).
    budget_burn: tuple[float, float, float] | None = None
    budget_burn_long: tuple[float, float, float] | None = None
    # Drains that move sessions (core/risk.py, ``session_move_changes``): the share of first tokens
    # over the TTFT target, (over-target first tokens, first tokens, at), exponentially weighted (the
    # baseline a drain is judged against); the watch after the last drain, (drain time, baseline
    # share, over-target first tokens since, first tokens since); and what the last closed watch
    # charged to the budget, (estimated session-move misses, its drain's time).
    over_share: tuple[float, float, float] | None = None
    drain_watch: tuple[float, float, float, float] | None = None
    session_moves: tuple[float, float] | None = None
    # (this slot, slots ahead, the sorted growths of the moments around this time of day on earlier
    # days, the days they come from; core/risk.py): they change only when a slot ends, so they are
    # computed once per slot (derived, not serialised).
    seasonal_peaks_memo: tuple[int, int, tuple[float, ...], int] | None = None
    # The last tick with arrivals and the traffic before it, (time, request rate, demand), both
    # exponentially smoothed over TRAFFIC_SMOOTHING_S (core/risk.py, ``traffic_changes``): what a
    # return after a silence would bring. The silence observed, (its first tick, its last tick), or
    # None while there is traffic (or the controller cannot tell).
    traffic: tuple[float, float, float] | None = None
    silence: tuple[float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return self._as_dict(self.history_by_slot(), self.rise_tail)

    def to_dicts(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """``to_dict`` in two parts: (``recent_dict``, ``history_dict``); ``merge_memory_dicts``
        joins them back."""
        return self.recent_dict(), self.history_dict()

    def recent_dict(self) -> dict[str, Any]:
        """What changes at every tick: ``to_dict`` with only the slot in progress and the tail's
        last hour under ``demand_by_slot`` and ``rise_tail``."""
        now_slot: dict[int, float] = {}
        if self.slot_now is not None:
            now_slot[self.slot_now[0]] = max(self.demand_by_slot.get(self.slot_now[0], 0.0), self.slot_now[1])
        return self._as_dict(now_slot, self.rise_tail[-1:])

    def history_dict(self) -> dict[str, Any]:
        """The history: the finished 5-minute slots and the week's closed hours of rises (every hour
        of the tail but the last), which change once a slot or an hour. After a week it is about
        165 KB of JSON, most of the memory: the live service saves it only when it changed
        (service/controller.py, bench/bench_memory_save.py)."""
        current = None if self.slot_now is None else self.slot_now[0]
        return {"demand_by_slot": {str(k): v for k, v in self.demand_by_slot.items() if k != current},
                "rise_tail": _tail_list(self.rise_tail[:-1])}

    def _as_dict(self, by_slot: Mapping[int, float], tail: tuple) -> dict[str, Any]:
        return {
            "last_scale_up_at": iso(self.last_scale_up_at),
            "surplus_since": iso(self.surplus_since),
            "slo_miss_since": iso(self.slo_miss_since),
            "disruptions": [iso(t) for t in self.disruptions],
            "startup_durations_s": list(self.startup_durations_s),
            "demand_samples": [[iso(t), d] for t, d in self.demand_samples],
            "demand_by_slot": {str(k): v for k, v in by_slot.items()},
            "minute_now": None if self.minute_now is None else list(self.minute_now),
            "minute_max": [list(m) for m in self.minute_max],
            "rise_log": [list(r) for r in self.rise_log],
            "rise_tail": _tail_list(tail),
            "tick_window": [[iso(t), d] for t, d in self.tick_window],
            "tick_rises": [list(r) for r in self.tick_rises],
            "seasonal_skill": None if self.seasonal_skill is None else list(self.seasonal_skill),
            "budget_burn": None if self.budget_burn is None else [self.budget_burn[0], self.budget_burn[1],
                                                                  iso(self.budget_burn[2])],
            "budget_burn_long": None if self.budget_burn_long is None else [
                self.budget_burn_long[0], self.budget_burn_long[1], iso(self.budget_burn_long[2])],
            "over_share": None if self.over_share is None else [self.over_share[0], self.over_share[1],
                                                                iso(self.over_share[2])],
            "drain_watch": None if self.drain_watch is None else [iso(self.drain_watch[0]), *self.drain_watch[1:]],
            "session_moves": None if self.session_moves is None else [self.session_moves[0],
                                                                      iso(self.session_moves[1])],
            "traffic": None if self.traffic is None else [iso(self.traffic[0]), self.traffic[1], self.traffic[2]],
            "silence": None if self.silence is None else [iso(self.silence[0]), iso(self.silence[1])],
        }

    def history_by_slot(self) -> dict[int, float]:
        """Finished slots and the slot in progress together."""
        out = dict(self.demand_by_slot)
        if self.slot_now is not None:
            out[self.slot_now[0]] = max(out.get(self.slot_now[0], 0.0), self.slot_now[1])
        return out

    def with_(self, **changes: Any) -> Memory:
        return _copy_with(self, changes)

    def with_changes(self, changes: Mapping[str, Any]) -> Memory:
        """``with_`` for changes already in a dict (the core gathers a tick's in one), by a copier
        made for the fields it changes (``_copier``)."""
        copy = _COPIERS.get(tuple(changes))
        if copy is None:
            copy = _copier(tuple(changes))
        return copy(self, changes)


def _tail_list(tail: tuple) -> list:
    return [[h, c, [list(r) for r in tops]] for h, c, tops in tail]


def merge_memory_dicts(recent: Any, history: Any) -> Any:
    """``Memory.to_dicts``'s two parts (as stored: either may be missing or malformed) as one
    ``to_dict``. The recent part wins: its slot in progress over the history's same slot, its tail
    from its first hour on. A recent part that holds the whole memory (``to_dict``, as an older
    version saved it) keeps all it holds; what an older history adds beyond it is either history
    that version did not read (it comes back) or older than the horizon (the core forgets it at the
    next slot or minute, as it forgets its own)."""
    if not isinstance(recent, dict) or not isinstance(history, dict):
        return recent
    out = dict(recent)
    slots, own = history.get("demand_by_slot"), recent.get("demand_by_slot")
    if isinstance(slots, dict) and isinstance(own, dict):
        out["demand_by_slot"] = {**slots, **own}
    tail, own_tail = history.get("rise_tail"), recent.get("rise_tail")
    if isinstance(tail, list) and isinstance(own_tail, list):
        first = own_tail[0][0] if own_tail and isinstance(own_tail[0], list) and own_tail[0] else None
        older = [h for h in tail if first is None or (isinstance(h, list) and h and _before(h[0], first))]
        out["rise_tail"] = older + own_tail
    return out


def _before(a: Any, b: Any) -> bool:
    try:
        return bool(a < b)
    except TypeError:  # malformed: kept, and the memory's validation names it
        return True


_MEMORY_FIELDS = tuple(f.name for f in fields(Memory))
# Each field's slot descriptor's __set__ (slots=True: a member descriptor per field), in field order.
_SLOT_SETTERS = tuple(Memory.__dict__[name].__set__ for name in _MEMORY_FIELDS)
_SLOT_SETTER = dict(zip(_MEMORY_FIELDS, _SLOT_SETTERS))


def _copy_with_source() -> str:
    """The source of ``_copy_with(memory, changes)``: a copy of ``memory`` with ``changes`` (field ->
    value). dataclasses.replace() re-validates every field, and this runs at every tick of a 14-day
    replay: every field is read as an attribute (a slot read the interpreter specialises) and
    written through its slot's setter (a frozen class's object.__setattr__ would look the name up
    each time), one statement a field rather than a loop over them (a third less time; the
    attribute reads a quarter less than one attrgetter call unpacked)."""
    lines = ["def _copy_with(self, changes):", "    new = _new(Memory)"]
    lines += [f"    _set{i}(new, self.{name})" for i, name in enumerate(_MEMORY_FIELDS)]
    lines += ["    for name, value in changes.items():",
              "        set_slot = _SLOT_SETTER.get(name)",
              "        if set_slot is None:",
              "            raise TypeError(f\"Memory has no field {name!r}\")",
              "        set_slot(new, value)",
              "    return new"]
    return "\n".join(lines)


_namespace: dict[str, Any] = {"_new": object.__new__, "Memory": Memory, "_SLOT_SETTER": _SLOT_SETTER}
_namespace.update({f"_set{i}": setter for i, setter in enumerate(_SLOT_SETTERS)})
exec(_copy_with_source(), _namespace)
_copy_with: Callable[[Memory, Mapping[str, Any]], Memory] = _namespace["_copy_with"]

# ``_copy_with`` made for one tuple of changed fields (the keys of a tick's changes, in their
# order): each field written once, from the changes or from the memory, with no loop over the
# changes and no setter looked up by name (the 14-day replay's ticks change 24 such tuples). At
# every tick (timeit, 8 fields changed) 2.4-2.6 us a copy against 3.0-3.1 (the same fields get the
# same values).
_COPIERS: dict[tuple, Callable[[Memory, Mapping[str, Any]], Memory]] = {}


def _copier(names: tuple) -> Callable[[Memory, Mapping[str, Any]], Memory]:
    """The copier for ``names`` (memoised, at most 256 of them); ``_copy_with`` itself for names
    that are not all fields (it raises, as ``with_`` does) or once that many are made."""
    if len(_COPIERS) >= 256 or not all(isinstance(n, str) and n in _SLOT_SETTER for n in names):
        return _copy_with
    lines = ["def _copy(self, changes):", "    new = _new(Memory)"]
    lines += [f"    _set{i}(new, changes[{name!r}])" if name in names else f"    _set{i}(new, self.{name})"
              for i, name in enumerate(_MEMORY_FIELDS)]
    lines += ["    return new"]
    space = dict(_namespace)
    exec("\n".join(lines), space)
    _COPIERS[names] = space["_copy"]
    return space["_copy"]


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    target_groups: int  # active (ready + starting) groups after the action
    group: str | None  # the (first) group to start or drain, or None
    reason: Reason
    detail: str  # one line with the numbers that decided it
    inputs: Mapping[str, Any]  # what the core saw (JSON-able)
    groups: tuple[str, ...] = ()  # every group to start (a scale-up may add several) or drain
    forecast_used: bool = False  # the action was taken on forecast demand rather than current demand

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": str(self.action),
            "target_groups": self.target_groups,
            "group": self.group,
            "reason": str(self.reason),
            "detail": self.detail,
            "inputs": dict(self.inputs),
        }


@overload
def iso(t: float) -> str: ...
@overload
def iso(t: None) -> None: ...
@overload
def iso(t: float | None) -> str | None: ...


def iso(t: float | None) -> str | None:
    """Epoch seconds -> ISO 8601 UTC with a Z, or None."""
    if t is None:
        return None
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def parse_time(text: str) -> float:
    """ISO 8601 -> epoch seconds; a time without a zone is UTC. Raises ValueError."""
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()
