"""Read a decision snapshot (signals + fleet state + memory) from JSON, for ``autoscaler decide``.

Format (README, "Ask the core offline"); every time is ISO 8601, UTC without a zone:

    {"at": "2026-01-05T09:00:00Z",
     "signals": {"groups": {"g1": {"running": 5, "queued": 2, "kv_usage": 0.61,
                                   "request_rate": 0.8, "ttft_p99_s": 2.1}},
                 "fleet": {...same keys...}, "problems": [{"signal", "group", "kind", "detail"}]},
     "fleet": {"synced": true, "groups": {"g1": {"phase": "ready", "since": "2026-01-05T07:00:00Z"}}},
     "memory": {"last_scale_up_at": null, "surplus_since": null, "disruptions": [],
                "startup_durations_s": [], "demand_samples": [], "demand_by_slot": {},
                "minute_now": null, "minute_max": [], "rise_log": [], "rise_tail": [], "tick_window": [],
                "tick_rises": [], "seasonal_skill": null, "budget_burn": null,
                "budget_burn_long": null}}

``signals`` may be the output of ``autoscaler signals --json`` as it is. Groups missing from
``fleet.groups`` are off. ``memory`` may be omitted (a fresh controller).

Validated as strictly as a policy: UTF-8 text without NUL bytes; an unknown key anywhere is an
error (a typo would silently drop what it meant to set); ``fleet`` is required (a missing one is
not "all off"); counts, rates, latencies and durations are 0 or more, ``kv_usage`` 0 to 1.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from typing import Any

from autoscaler.core.risk import closed_tail_rises
from autoscaler.core.types import (
    PROBLEM_KINDS,
    FleetState,
    GroupSignals,
    GroupState,
    Memory,
    Phase,
    Problem,
    SignalSnapshot,
    parse_time,
)
from autoscaler.errors import BadInput
from autoscaler.policy.loader import read_text_file
from autoscaler.policy.model import Policy

_SIGNAL_KEYS = {f.name for f in fields(GroupSignals)}
_TOP_KEYS = ("at", "signals", "fleet", "memory")
# `autoscaler signals --json` as it is, and the fleet's share of first tokens over the TTFT target
# (0-1; SignalSnapshot.ttft_over_target: not one of signals --json's keys, optional here)
_SIGNALS_KEYS = ("at", "groups", "fleet", "problems", "ttft_over_target")
_FLEET_KEYS = ("synced", "groups")
_GROUP_KEYS = ("phase", "since")
_PROBLEM_KEYS = ("signal", "group", "kind", "detail")
# The keys `decide --memory-out` writes, so that its output chains into the next call.
_MEMORY_KEYS = tuple(Memory().to_dict())
# Upper bounds where a signal has one (kv_usage is a share of the KV cache).
_SIGNAL_MAX = {"kv_usage": 1.0}


class _Reader:
    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, message: str) -> BadInput:
        return BadInput(f"{self.source}: {where}: {message}")

    def time(self, value: Any, where: str) -> float:
        if not isinstance(value, str):
            raise self.fail(where, f"{value!r} is not an ISO 8601 time")
        try:
            return parse_time(value)
        except ValueError:
            raise self.fail(where, f"{value!r} is not an ISO 8601 time") from None

    def number(self, value: Any, where: str) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(where, f"{value!r} is not a finite number or null")
        return float(value)

    def non_negative(self, value: Any, where: str, most: float | None = None) -> float | None:
        number = self.number(value, where)
        if number is not None and number < 0:
            raise self.fail(where, f"{value!r} is negative; it must be 0 or more")
        if number is not None and most is not None and number > most:
            raise self.fail(where, f"{value!r} is above {most:g}")
        return number

    def mapping(self, value: Any, where: str, keys: tuple[str, ...] | None = None) -> dict:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, got {type(value).__name__}")
        if keys is not None:
            unknown = [k for k in value if k not in keys]
            if unknown:
                path = f"{where}.{unknown[0]}" if where != "(top level)" else str(unknown[0])
                raise self.fail(path, f"unknown field; known: {', '.join(keys)}")
        return value

    def group_signals(self, value: Any, where: str) -> GroupSignals:
        data = self.mapping(value, where)
        unknown = sorted(set(data) - _SIGNAL_KEYS)
        if unknown:
            raise self.fail(f"{where}.{unknown[0]}", f"unknown signal; known: {', '.join(sorted(_SIGNAL_KEYS))}")
        return GroupSignals(**{k: self.non_negative(v, f"{where}.{k}", _SIGNAL_MAX.get(k)) for k, v in data.items()})


def snapshot_from_dict(data: Any, policy: Policy, source: str = "<snapshot>", at: float | None = None):
    """-> (SignalSnapshot, FleetState, Memory, now). Raises BadInput naming the field."""
    r = _Reader(source)
    data = r.mapping(data, "(top level)", _TOP_KEYS)
    names = policy.fleet.group_names()
    if "fleet" not in data:
        raise r.fail("fleet", "required: the state of the groups ({\"synced\": true, \"groups\": {...}}); "
                              "a missing fleet is not read as all off")
    if at is None:
        if "at" not in data and not isinstance(data.get("signals"), dict):
            raise r.fail("at", "required (or pass --at)")
        at_value = data.get("at", (data.get("signals") or {}).get("at"))
        if at_value is None:
            raise r.fail("at", "required (or pass --at)")
        at = r.time(at_value, "at")

    sig = r.mapping(data.get("signals", {}), "signals", _SIGNALS_KEYS)
    groups = {}
    for name, value in r.mapping(sig.get("groups", {}), "signals.groups").items():
        if name not in names:
            raise r.fail(f"signals.groups.{name}", f"no such group in the policy ({', '.join(names)})")
        groups[name] = r.group_signals(value, f"signals.groups.{name}")
    fleet_signals = r.group_signals(sig.get("fleet", {}), "signals.fleet")
    problems = []
    for i, p in enumerate(sig.get("problems", []) or []):
        p = r.mapping(p, f"signals.problems[{i}]", _PROBLEM_KEYS)
        if p.get("kind") not in PROBLEM_KINDS:
            raise r.fail(f"signals.problems[{i}].kind", f"{p.get('kind')!r} is not one of {', '.join(PROBLEM_KINDS)}")
        signal, group = p.get("signal"), p.get("group")
        if signal not in _SIGNAL_KEYS:
            raise r.fail(f"signals.problems[{i}].signal", f"{signal!r} is not one of {', '.join(sorted(_SIGNAL_KEYS))}")
        if group is not None and group not in names:
            raise r.fail(f"signals.problems[{i}].group", f"{group!r} is not a group of the policy ({', '.join(names)})")
        problems.append(Problem(signal, group, p["kind"], str(p.get("detail", ""))))
    over = r.non_negative(sig.get("ttft_over_target"), "signals.ttft_over_target", most=1.0)
    signals = SignalSnapshot(at, groups, fleet_signals, tuple(problems), over)

    fl = r.mapping(data["fleet"], "fleet", _FLEET_KEYS)
    states = {name: GroupState(name, Phase.OFF, 0.0) for name in names}
    for name, value in r.mapping(fl.get("groups", {}), "fleet.groups").items():
        if name not in names:
            raise r.fail(f"fleet.groups.{name}", f"no such group in the policy ({', '.join(names)})")
        value = r.mapping(value, f"fleet.groups.{name}", _GROUP_KEYS)
        try:
            phase = Phase(str(value.get("phase")))
        except ValueError:
            raise r.fail(f"fleet.groups.{name}.phase",
                         f"{value.get('phase')!r} is not one of {', '.join(p.value for p in Phase)}") from None
        since = r.time(value["since"], f"fleet.groups.{name}.since") if "since" in value else at
        states[name] = GroupState(name, phase, since)
    synced = fl.get("synced", True)
    if not isinstance(synced, bool):
        raise r.fail("fleet.synced", f"{synced!r} is not true or false")
    fleet = FleetState(states, synced)

    mem = r.mapping(data.get("memory", {}) or {}, "memory", _MEMORY_KEYS)

    def opt_time(key: str) -> float | None:
        return None if mem.get(key) is None else r.time(mem[key], f"memory.{key}")

    def required_number(value: Any, where: str) -> float:
        number = r.non_negative(value, where)
        if number is None:
            raise r.fail(where, "null is not a number")
        return number

    def items(key: str) -> list:
        value = mem.get(key, [])
        if not isinstance(value, list):
            raise r.fail(f"memory.{key}", f"expected a list, got {type(value).__name__}")
        return value

    def timed(key: str) -> list[tuple[float, float]]:
        out = []
        for i, v in enumerate(items(key)):
            if not isinstance(v, list) or len(v) != 2:
                raise r.fail(f"memory.{key}[{i}]", f"{v!r} is not [time, demand]")
            out.append((r.time(v[0], f"memory.{key}[{i}][0]"), required_number(v[1], f"memory.{key}[{i}][1]")))
        return out

    samples = timed("demand_samples")
    tick_window = timed("tick_window")
    by_slot = {}
    for k, v in r.mapping(mem.get("demand_by_slot", {}), "memory.demand_by_slot").items():
        if not str(k).lstrip("-").isdigit():
            raise r.fail(f"memory.demand_by_slot.{k}", "a slot is a whole number (epoch seconds // 300)")
        by_slot[int(k)] = required_number(v, f"memory.demand_by_slot.{k}")
    def signed_number(value: Any, where: str) -> float:
        number = r.number(value, where)
        if number is None:
            raise r.fail(where, "null is not a number")
        return number

    def rises() -> tuple[tuple, ...]:
        """[minute index, rise, base, reached] (or, saved before bases were kept, the first two). A
        rise is signed: demand that fell over the lead time is a negative rise (core/risk.py's _z)."""
        out: list[tuple] = []
        for i, v in enumerate(items("rise_log")):
            if (not isinstance(v, list) or len(v) not in (2, 4) or not isinstance(v[0], int)
                    or isinstance(v[0], bool)):
                raise r.fail(f"memory.rise_log[{i}]", f"{v!r} is not [minute index, rise, base, reached]")
            out.append((v[0], signed_number(v[1], f"memory.rise_log[{i}][1]"),
                        *(required_number(x, f"memory.rise_log[{i}][{j}]") for j, x in enumerate(v[2:], 2))))
        return tuple(out)

    def tick_rises() -> tuple[tuple[float, float, float], ...]:
        out = []
        for i, v in enumerate(items("tick_rises")):
            if not isinstance(v, list) or len(v) != 3:
                raise r.fail(f"memory.tick_rises[{i}]", f"{v!r} is not [rise, base, reached]")
            out.append((signed_number(v[0], f"memory.tick_rises[{i}][0]"),
                        required_number(v[1], f"memory.tick_rises[{i}][1]"),
                        required_number(v[2], f"memory.tick_rises[{i}][2]")))
        return tuple(sorted(out))

    def rise_tail() -> tuple[tuple[int, int, tuple[tuple[float, float, float], ...]], ...]:
        """[hour index, minutes measured, [[rise, base, reached], ...]], hours in time order."""
        out: list[tuple[int, int, tuple[tuple[float, float, float], ...]]] = []
        for i, v in enumerate(items("rise_tail")):
            where = f"memory.rise_tail[{i}]"
            if (not isinstance(v, list) or len(v) != 3 or not isinstance(v[2], list)
                    or any(not isinstance(v[j], int) or isinstance(v[j], bool) for j in (0, 1)) or v[1] < 0):
                raise r.fail(where, f"{v!r} is not [hour index, minutes measured, [[rise, base, reached], ...]]")
            if out and v[0] <= out[-1][0]:
                raise r.fail(f"{where}[0]", f"hour {v[0]} does not come after hour {out[-1][0]}")
            tops = []
            for j, x in enumerate(v[2]):
                if not isinstance(x, list) or len(x) != 3:
                    raise r.fail(f"{where}[2][{j}]", f"{x!r} is not [rise, base, reached]")
                tops.append((signed_number(x[0], f"{where}[2][{j}][0]"), required_number(x[1], f"{where}[2][{j}][1]"),
                             required_number(x[2], f"{where}[2][{j}][2]")))
            out.append((v[0], v[1], tuple(sorted(tops))))
        return tuple(out)

    def minute_means() -> tuple[tuple[int, float, float], ...]:
        """[minute index, mean demand, busiest tick] (or, saved before the busiest tick was kept, the
        first two: the mean stands in for it)."""
        out = []
        for i, v in enumerate(items("minute_max")):
            if (not isinstance(v, list) or len(v) not in (2, 3) or not isinstance(v[0], int)
                    or isinstance(v[0], bool)):
                raise r.fail(f"memory.minute_max[{i}]", f"{v!r} is not [minute index, mean demand, busiest tick]")
            mean = required_number(v[1], f"memory.minute_max[{i}][1]")
            out.append((v[0], mean, required_number(v[2], f"memory.minute_max[{i}][2]") if len(v) == 3 else mean))
        return tuple(out)

    def numbers(key: str, n: int) -> tuple[float, ...] | None:
        value = mem.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or len(value) != n:
            raise r.fail(f"memory.{key}", f"{value!r} is not a list of {n} numbers")
        return tuple(required_number(v, f"memory.{key}[{i}]") for i, v in enumerate(value))

    minute_now = None
    raw = mem.get("minute_now")
    if raw is not None:
        if (not isinstance(raw, list) or len(raw) not in (3, 4) or not all(isinstance(raw[i], int) for i in (0, 2))
                or any(isinstance(raw[i], bool) for i in (0, 2)) or raw[2] < 1):
            raise r.fail("memory.minute_now", f"{raw!r} is not [minute index, demand sum, samples >= 1, busiest tick]")
        total = required_number(raw[1], "memory.minute_now[1]")
        # Memory saved before the busiest tick was kept: the minute's mean stands in for it.
        peak = required_number(raw[3], "memory.minute_now[3]") if len(raw) == 4 else total / raw[2]
        minute_now = (raw[0], total, raw[2], peak)
    def burn_of(key: str) -> tuple[float, float, float] | None:
        burn = mem.get(key)
        if burn is None:
            return None
        if not isinstance(burn, list) or len(burn) != 3:
            raise r.fail(f"memory.{key}", f"{burn!r} is not [misses, arrivals, time]")
        return (required_number(burn[0], f"memory.{key}[0]"), required_number(burn[1], f"memory.{key}[1]"),
                r.time(burn[2], f"memory.{key}[2]"))

    burn = burn_of("budget_burn")
    burn_long = burn_of("budget_burn_long")  # absent from memory saved before it was kept: None
    over_share = mem.get("over_share")
    if over_share is not None:
        if not isinstance(over_share, list) or len(over_share) != 3:
            raise r.fail("memory.over_share", f"{over_share!r} is not [over-target first tokens, first tokens, time]")
        over_share = (required_number(over_share[0], "memory.over_share[0]"),
                      required_number(over_share[1], "memory.over_share[1]"), r.time(over_share[2], "memory.over_share[2]"))
    watch = mem.get("drain_watch")
    if watch is not None:
        if not isinstance(watch, list) or len(watch) != 4:
            raise r.fail("memory.drain_watch", f"{watch!r} is not [drain time, baseline share, over-target first "
                                               "tokens, first tokens]")
        watch = (r.time(watch[0], "memory.drain_watch[0]"),
                 *(required_number(v, f"memory.drain_watch[{i}]") for i, v in enumerate(watch[1:], 1)))
    moves = mem.get("session_moves")
    if moves is not None:
        if not isinstance(moves, list) or len(moves) != 2:
            raise r.fail("memory.session_moves", f"{moves!r} is not [estimated misses, drain time]")
        moves = (required_number(moves[0], "memory.session_moves[0]"), r.time(moves[1], "memory.session_moves[1]"))
    traffic = mem.get("traffic")  # absent from memory saved before silences were kept: None
    if traffic is not None:
        if not isinstance(traffic, list) or len(traffic) != 3:
            raise r.fail("memory.traffic", f"{traffic!r} is not [last arrival's tick, request rate, demand]")
        traffic = (r.time(traffic[0], "memory.traffic[0]"), required_number(traffic[1], "memory.traffic[1]"),
                   required_number(traffic[2], "memory.traffic[2]"))
    silence = mem.get("silence")
    if silence is not None:
        if not isinstance(silence, list) or len(silence) != 2:
            raise r.fail("memory.silence", f"{silence!r} is not [first silent tick, last silent tick]")
        silence = (r.time(silence[0], "memory.silence[0]"), r.time(silence[1], "memory.silence[1]"))
    # A rise is signed: demand that fell over the lead time is a negative rise (core/risk.py's _z).
    rise_log = rises()
    tail = rise_tail()
    skill = numbers("seasonal_skill", 2)
    memory = Memory(
        minute_now=minute_now,
        minute_max=minute_means(),
        rise_log=rise_log,
        rises_sorted=tuple(sorted(e[1] for e in rise_log)),
        rise_reach=tuple(sorted(e[1:] for e in rise_log)) if all(len(e) == 4 for e in rise_log) else (),
        rise_tail=tail,
        tail_sorted=closed_tail_rises(tail),
        tail_minutes=sum(c for _, c, _ in tail),
        tick_window=tuple(tick_window),
        tick_rises=tick_rises(),
        seasonal_skill=skill,  # type: ignore[arg-type]
        budget_burn=burn,
        budget_burn_long=burn_long,
        over_share=over_share,
        drain_watch=watch,
        session_moves=moves,
        traffic=traffic,
        silence=silence,
        last_scale_up_at=opt_time("last_scale_up_at"),
        surplus_since=opt_time("surplus_since"),
        slo_miss_since=opt_time("slo_miss_since"),
        disruptions=tuple(r.time(v, f"memory.disruptions[{i}]") for i, v in enumerate(items("disruptions"))),
        startup_durations_s=tuple(
            required_number(v, f"memory.startup_durations_s[{i}]") for i, v in enumerate(items("startup_durations_s"))
        ),
        demand_samples=tuple(samples),
        demand_by_slot=by_slot,
    )
    return signals, fleet, memory, at


def load_snapshot(path: str, policy: Policy, at: float | None = None):
    text = read_text_file(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}:{exc.lineno}: json: {exc.msg}") from exc
    return snapshot_from_dict(data, policy, path, at)
