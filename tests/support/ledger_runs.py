"""Synthetic ledger runs for the ledger tests, written through the store's public API.

``STORY`` is a 48-hour run of the default fleet (g1 = spark-1/2, g2 = spark-3/4, g3 = spark-5/6)
starting Monday 2026-01-05 00:00 UTC, with a decision every 15 minutes:

    00:00  g1 and g2 ready, g3 off (powered off)
    01:00  scale_down surplus drains g2; drained and stopped 01:15, nodes powered off
    02:30  scale_up forecast_high starts g3 (this is "why was g3 on at 03:00?"); ready 02:45
    08:00  scale_up utilization_high starts g2; ready 08:15
    20:00  scale_down surplus drains g3; drained and stopped 20:15, nodes left idle
    48:00  the run ends (g1 and g2 on, g3 idle)

Expected node-hours, day 1 (00:00-24:00): g1 2 x 24 = 48 active; g2 2 x (1.25 + 16) = 34.5 active
and 2 x 6.75 = 13.5 off; g3 2 x 17.75 = 35.5 active, 2 x 2.5 = 5 off and 2 x 3.75 = 7.5 idle.
Active 48 + 34.5 + 35.5 = 118, idle 7.5, off 18.5 (sum 144 = 6 nodes x 24 h).
Day 2: g1 48 + g2 48 = 96 active, g3 48 idle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from autoscaler.core.types import Action, Decision, Reason, parse_time
from autoscaler.ledger.store import GroupEvent, Ledger, NodeInterval
from autoscaler.policy import load_policy
from autoscaler.policy.loader import LoadedPolicy

REPO = Path(__file__).resolve().parents[2]
DEFAULT_POLICY = REPO / "policies" / "default.yaml"
T0 = parse_time("2026-01-05T00:00:00Z")  # a Monday
H = 3600.0
NODES = {"g1": ("spark-1", "spark-2"), "g2": ("spark-3", "spark-4"), "g3": ("spark-5", "spark-6")}


def default_policy() -> LoadedPolicy:
    return load_policy(DEFAULT_POLICY)


def policy_with_cost(**cost: object) -> tuple[str, str]:
    """The default policy text with some cost fields changed, as a (text, sha256) pair."""
    import hashlib

    text = DEFAULT_POLICY.read_text()
    for key, value in cost.items():
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith(f"{key}:"):
                indent = line[: len(line) - len(line.lstrip())]
                lines[i] = f"{indent}{key}: {value}"
                break
        else:
            lines.insert(lines.index("cost:") + 1, f"  {key}: {value}")
        text = "\n".join(lines) + "\n"
    return text, hashlib.sha256(text.encode()).hexdigest()


def make_decision(action: str, reason: str, target: int, group: str | None, demand: float, active: int,
                  detail: str = "") -> Decision:
    inputs = {
        "ready": active, "starting": 0, "draining": 0, "active": active, "floor": 1, "ceiling": 3,
        "floor_source": "policy", "ceiling_source": "policy", "running": demand, "queued": 0.0,
        "demand": demand, "requests_per_group_at_target": 4.2, "capacity_at_target": round(active * 4.2, 4),
        "ttft_p99_s": 1.2, "queue_wait_p99_s": 0.1, "forecast_peak": demand, "forecast_basis": "trend",
        "horizon_s": 600.0, "lead_time_s": 600.0, "lead_time_source": "policy", "problems": [],
    }
    return Decision(Action(action), target, group, Reason(reason), detail or f"{reason}: demand {demand:g}",
                    inputs, groups=(group,) if group else ())


@dataclass
class Story:
    decisions: list[tuple[float, Decision]]
    events: list[GroupEvent]  # decision_index set for the ones a decision caused
    intervals: list[NodeInterval]  # the whole schedule, closed at the end
    start: float
    end: float


# (hour, action, reason, group, target) of the decisions that act; every other tick holds.
ACTS = [
    (1.0, "scale_down", "surplus", "g2", 1),
    (2.5, "scale_up", "forecast_high", "g3", 2),
    (8.0, "scale_up", "utilization_high", "g2", 3),
    (20.0, "scale_down", "surplus", "g3", 2),
]
# (hour, group, event, caused by the decision at that hour?, node state after)
EVENTS = [
    (1.0, "g2", "drain_started", True, None),
    (1.25, "g2", "drained", False, None),
    (1.25, "g2", "stopped", False, "off"),
    (2.5, "g3", "started", True, "active"),
    (2.75, "g3", "ready", False, None),
    (8.0, "g2", "started", True, "active"),
    (8.25, "g2", "ready", False, None),
    (20.0, "g3", "drain_started", True, None),
    (20.25, "g3", "drained", False, None),
    (20.25, "g3", "stopped", False, "idle"),
]
# The schedule as node intervals (hours from T0), per group.
SCHEDULE = {
    "g1": [("active", 0, 48)],
    "g2": [("active", 0, 1.25), ("off", 1.25, 8), ("active", 8, 48)],
    "g3": [("off", 0, 2.5), ("active", 2.5, 20.25), ("idle", 20.25, 48)],
}


def demand_at(hour: float) -> float:
    return round(6 + 5 * math.sin((hour - 6) / 24 * 2 * math.pi), 2)


def story(start: float = T0, hours: float = 48, tick_s: float = 900) -> Story:
    acts = {round(h * H): (a, r, g, n) for h, a, r, g, n in ACTS}
    decisions: list[tuple[float, Decision]] = []
    index_at: dict[int, int] = {}
    active = 2
    for k in range(int(hours * H / tick_s)):
        offset = round(k * tick_s)
        hour = offset / H
        if offset in acts:
            action, reason, group, target = acts[offset]
            index_at[offset] = len(decisions)
            decisions.append((start + offset, make_decision(action, reason, target, group, demand_at(hour), active)))
            active = target
        else:
            decisions.append((start + offset, make_decision("hold", "steady", active, None, demand_at(hour), active)))
    events = [
        GroupEvent(start + h * H, g, e, decision_index=index_at[round(h * H)] if caused else None)
        for h, g, e, caused, _ in EVENTS if h * H < hours * H
    ]
    intervals = [
        NodeInterval(node, g, state, start + a * H, start + min(b, hours) * H)
        for g, parts in SCHEDULE.items() for state, a, b in parts if a < hours
        for node in NODES[g]
    ]
    return Story(decisions, events, intervals, start, start + hours * H)


def record_live(ledger: Ledger, policy=None, *, source: str = "live", start: float = T0, hours: float = 48,
                label: str = "synthetic", end: bool = True) -> int:
    """The story through the one-at-a-time API, as the live service would write it."""
    s = story(start, hours)
    run = ledger.start_run(source, policy or default_policy(), at=start, label=label)
    for g in ("g1", "g2"):
        ledger.set_group_state(run, g, "active", start)
    ledger.set_group_state(run, "g3", "off", start)
    ids = {}
    events = sorted(s.events, key=lambda e: e.at)
    ei = 0
    for i, (at, decision) in enumerate(s.decisions):
        while ei < len(events) and events[ei].at < at:
            _event(ledger, run, events[ei], ids)
            ei += 1
        ids[i] = ledger.record_decision(run, at, decision)
        while ei < len(events) and events[ei].at == at:
            _event(ledger, run, events[ei], ids)
            ei += 1
    for e in events[ei:]:
        if e.at <= s.end:
            _event(ledger, run, e, ids)
    if end:
        ledger.end_run(run, s.end)
    return run


def _event(ledger: Ledger, run: int, e: GroupEvent, ids: dict[int, int]) -> None:
    state = {(g, ev): st for _, g, ev, _, st in EVENTS}.get((e.group, e.event))
    if e.event in ("started",):
        state = None  # started -> active by itself
    ledger.record_event(run, e.at, e.group, e.event,
                        decision_id=ids[e.decision_index] if e.decision_index is not None else None,
                        node_state=state)


def record_bulk(ledger: Ledger, policy=None, *, source: str = "simulation", start: float = T0, hours: float = 48,
                label: str = "synthetic-bulk") -> int:
    """The story through the bulk API, as the simulator would write it."""
    s = story(start, hours)
    run = ledger.start_run(source, policy or default_policy(), at=start, label=label)
    ledger.record_bulk(run, decisions=s.decisions, events=[e for e in s.events if e.at < s.end],
                       intervals=s.intervals)
    ledger.end_run(run, s.end)
    return run


def clipped_node_hours(intervals, lo: float, hi: float, state: str = "active") -> float:
    """The reference: hours of ``state`` in [lo, hi), summed over intervals (independent of cost.py)."""
    total = 0.0
    for iv in intervals:
        if iv.state == state:
            total += max(0.0, min(iv.end, hi) - max(iv.start, lo))
    return total / H


def backtest_schedule(start: float = T0, days: int = 14, tick_s: float = 15.0) -> Story:
    """A simulator-sized hand-over: 14 days of 15 s ticks = 80,640 decisions; g2 on every day
    07:00-21:00 (started and drained by decisions), g3 on 10:00-18:00 on weekdays; g1 always.
    Intervals: 2 nodes x (1 + 2 x 14 + 2 x 10 + gaps) = a few hundred."""
    ticks = int(days * 86400 / tick_s)
    plan: dict[int, tuple[str, str, str]] = {}  # tick -> (action, reason, group)
    on: dict[str, list[tuple[float, float]]] = {"g1": [(0.0, days * 86400.0)], "g2": [], "g3": []}
    for day in range(days):
        base = day * 86400
        plan[int((base + 7 * H) / tick_s)] = ("scale_up", "forecast_high", "g2")
        plan[int((base + 21 * H) / tick_s)] = ("scale_down", "surplus", "g2")
        on["g2"].append((base + 7 * H, base + 21 * H))
        if (day % 7) < 5:
            plan[int((base + 10 * H) / tick_s)] = ("scale_up", "utilization_high", "g3")
            plan[int((base + 18 * H) / tick_s)] = ("scale_down", "surplus", "g3")
            on["g3"].append((base + 10 * H, base + 18 * H))
    decisions: list[tuple[float, Decision]] = []
    events: list[GroupEvent] = []
    active = 1
    for k in range(ticks):
        at = start + k * tick_s
        hour = (k * tick_s / H) % 24
        if k in plan:
            action, reason, group = plan[k]
            target = active + (1 if action == "scale_up" else -1)
            events.append(GroupEvent(at, group, "started" if action == "scale_up" else "drain_started",
                                     decision_index=len(decisions)))
            decisions.append((at, make_decision(action, reason, target, group, demand_at(hour), active)))
            active = target
        else:
            decisions.append((at, make_decision("hold", "steady", active, None, demand_at(hour), active)))
    intervals: list[NodeInterval] = []
    end = days * 86400.0
    for group, spans in on.items():
        intervals += NodeInterval.for_schedule(NODES[group], group, [(start + a, start + b) for a, b in spans],
                                               start, start + end)
    return Story(decisions, events, intervals, start, start + end)
