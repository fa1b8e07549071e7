"""Scenario tests: step a fake clock through load shapes and say what must happen at each step.

``FakeFleet`` is a hand-written fake of the actuators: a started group becomes ready after
``startup_s``; a drained group is off ``drain_s`` later. Demand (running + queued) is a function of
time, spread evenly over the ready groups; KV use follows the load unless a group's is fixed
(``kv``: sessions that stay where they are). The core is the real one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pytest
from core_helpers import T0, decide, make_policy

from autoscaler.core import Action, Memory, Reason, record_startup
from autoscaler.core.types import FleetState, GroupSignals, GroupState, Phase, Problem, SignalSnapshot

TICK = 15.0


@dataclass
class FakeFleet:
    policy: object
    startup_s: float = 600.0
    drain_s: float = 60.0
    phases: dict = field(default_factory=dict)
    since: dict = field(default_factory=dict)
    memory: Memory = field(default_factory=Memory)
    log: list = field(default_factory=list)  # (t, decision)
    cordoned: set = field(default_factory=set)  # groups an operator cordoned
    kv: dict = field(default_factory=dict)  # group -> fixed KV use (else it follows the load)
    names: tuple = ()

    def __post_init__(self):
        self.names = tuple(g.name for g in self.policy.fleet.groups)
        for i, name in enumerate(self.names):  # every schedule starts with the ceiling ready
            ready = i < self.policy.fleet.ceiling_groups
            self.phases[name], self.since[name] = (Phase.READY if ready else Phase.OFF), T0 - 86400

    def state(self) -> FleetState:
        return FleetState({n: GroupState(n, self.phases[n], self.since[n], n in self.cordoned) for n in self.names})

    def ready_count(self) -> int:
        return sum(p is Phase.READY for p in self.phases.values())

    def active_count(self) -> int:
        return sum(p in (Phase.READY, Phase.STARTING) for p in self.phases.values())

    def advance(self, now: float) -> None:
        for n in self.names:
            if self.phases[n] is Phase.STARTING and now - self.since[n] >= self.startup_s:
                self.memory = record_startup(self.memory, now - self.since[n])
                self.phases[n], self.since[n] = Phase.READY, now
            elif self.phases[n] is Phase.DRAINING and now - self.since[n] >= self.drain_s:
                self.phases[n], self.since[n] = Phase.OFF, now

    def snapshot(self, now: float, demand: float, problems=()) -> SignalSnapshot:
        ready = [n for n in self.names if self.phases[n] is Phase.READY]
        per = demand / len(ready) if ready else 0.0
        slots = self.policy.fleet.requests_per_group
        groups = {n: GroupSignals(running=min(per, slots), queued=max(per - slots, 0.0),
                                  kv_usage=self.kv.get(n, min(per / slots, 1.0)))
                  for n in ready}
        running = sum(g.running for g in groups.values())
        queued = sum(g.queued for g in groups.values())
        return SignalSnapshot(now, groups, GroupSignals(running=running, queued=queued), tuple(problems))

    def step(self, now: float, demand: float, problems=()):
        self.advance(now)
        d, self.memory = decide(self.snapshot(now, demand, problems), self.state(), self.policy, self.memory, now)
        if d.action is Action.SCALE_UP:
            for n in d.groups:
                if self.phases[n] is Phase.DRAINING:
                    self.phases[n] = Phase.READY  # returned to service; its 'since' stays
                else:
                    self.phases[n], self.since[n] = Phase.STARTING, now
        elif d.action is Action.SCALE_DOWN:
            self.phases[d.group], self.since[d.group] = Phase.DRAINING, now
        self.log.append((now, d))
        return d

    def run(self, start: float, seconds: float, demand_at, problems_at=lambda t: ()):
        t = start
        while t < start + seconds:
            self.step(t, demand_at(t), problems_at(t))
            t += TICK
        return t

    def actions(self, since: float = float("-inf")):
        return [(t, d.action, d.reason) for t, d in self.log if d.action is not Action.HOLD and t >= since]


def test_ramp_up_plateau_ramp_down():
    policy = make_policy()
    f = FakeFleet(policy)
    # Quiet hour at demand 2: 3 -> 2 -> 1 group. Each drain waits for the 300 s stabilisation.
    t = f.run(T0, 3600, lambda t: 2.0)
    downs = [a for a in f.actions() if a[1] is Action.SCALE_DOWN]
    assert [a[2] for a in downs] == [Reason.SURPLUS, Reason.SURPLUS]
    assert downs[0][0] - T0 == 300  # first drain exactly at the end of the 300 s window
    assert f.active_count() == 1
    # Ramp: demand climbs 2 -> 12 over 10 minutes. Each tick where demand > active x 4.2 adds groups
    # within that one tick: the first tick with demand > 4.2 starts a group.
    ramp_start = t
    t = f.run(t, 600, lambda t: 2.0 + 10.0 * (t - ramp_start) / 600)
    ups = [a for a in f.actions(ramp_start) if a[1] is Action.SCALE_UP]
    assert ups and all(a[2] is Reason.UTILIZATION_HIGH for a in ups)
    first_over = ramp_start + 15 * next(i for i in range(40) if 2.0 + 10.0 * (15 * i) / 600 > 4.2)
    assert ups[0][0] == first_over  # decided within one tick
    assert f.active_count() == 3  # 12 / 4.2 -> 3 groups
    # Plateau at 12 for 30 min: nothing changes (no flapping, no drain while 12 / 12 = 1.0 on 2 groups).
    plateau = t
    t = f.run(t, 1800, lambda t: 12.0)
    assert f.actions(plateau) == []
    assert f.ready_count() == 3
    # Ramp down to 1 and stay. The ramp just seen (a rise of 10 within 10 minutes) is in the recent
    # history the scale-down risk is measured on: while P(demand > what the remaining groups carry
    # within the lead time) is above the budget (1%, unmeasured burn here: no request rate), the
    # groups stay. They go one at a time: 3 -> 2 when the ramp's rises are few enough of the three
    # hours', 2 -> 1 only when they are few enough of the week's minutes (the ramp's rises left
    # the three hours for the week's tail), 16.9 hours after the ramp down began.
    down = t
    t = f.run(t, 20 * 3600, lambda t: max(1.0, 12.0 - 11.0 * (t - down) / 600))
    downs = [(at, d) for at, d in f.log if at >= down and d.action is Action.SCALE_DOWN]
    assert len(downs) == 2 and f.active_count() == 1
    assert downs[0][0] - down > 3600  # not within the first hour after such a ramp
    for _, d in downs:
        assert d.detail.startswith("P(demand > ") and d.inputs["risk"]["probability"] <= 0.01
    assert 16 * 3600 < downs[1][0] - down < 17 * 3600, (downs[1][0] - down) / 3600
    week = downs[1][1].inputs["risk"]
    assert week["p_week"] == week["p_recent"] and week["week_minutes"] > 1000
    assert "0% over 180 minutes and 1% over the week's" in downs[1][1].detail, downs[1][1].detail
    held = [d for at, d in f.log if down + 1200 < at < downs[0][0]]
    assert held and all(d.inputs["risk"]["probability"] > 0.01 for d in held if d.reason is Reason.STEADY)
    assert downs[1][0] - downs[0][0] >= 300 + f.drain_s  # one at a time, each after its own window


def test_oscillation_around_a_threshold_does_not_flap():
    # 2 groups. Demand alternates every tick between 2 and 4: on 1 group that is 2/6 = 0.33 and
    # 4/6 = 0.67 against the 0.55 scale-down threshold, i.e. around it. The continuous-window rule
    # means the 4s keep restarting the window: no drain, no flapping, for two hours.
    policy = make_policy()
    f = FakeFleet(policy)
    f.phases["g3"], f.since["g3"] = Phase.OFF, T0 - 86400
    f.run(T0, 7200, lambda t: 2.0 if int((t - T0) / TICK) % 2 else 4.0)
    assert f.actions() == []
    assert f.active_count() == 2
    # Without the stabilisation window (and with a budget that takes any risk, so that only the
    # window and the threshold decide) the same load drains on the first low tick.
    twitchy = make_policy(scaling={"scale_down": {"stabilization_s": 0, "min_group_uptime_s": 0,
                                                   "cooldown_after_scale_up_s": 0}},
                          slo={"capacity_miss_budget_pct": 100})
    g = FakeFleet(twitchy)
    g.phases["g3"], g.since["g3"] = Phase.OFF, T0 - 86400
    g.run(T0, 600, lambda t: 2.0 if int((t - T0) / TICK) % 2 else 4.0)
    assert [a[1] for a in g.actions()][:1] == [Action.SCALE_DOWN]


def test_oscillating_bursts_are_absorbed_by_the_window():
    # Bursts of 10 for one tick every 4 minutes over a base of 2. Each burst resets the continuous
    # surplus window, so the fleet never drains below what the burst needs, and it never flaps.
    policy = make_policy()
    f = FakeFleet(policy)
    f.run(T0, 7200, lambda t: 10.0 if int(t - T0) % 240 == 0 else 2.0)
    assert f.actions() == []
    assert f.active_count() == 3


def test_signal_outage_holds_then_resumes():
    # Surplus load (demand 1 on 3 groups), but Prometheus is down for the first 20 minutes.
    policy = make_policy()
    f = FakeFleet(policy)
    outage = (Problem("running", None, "unreachable", "connection refused"),)
    f.run(T0, 1200, lambda t: 1.0, lambda t: outage)
    assert f.actions() == []  # never scaled down on missing data
    assert {d.reason for _, d in f.log} == {Reason.SIGNAL_UNAVAILABLE}
    assert all("running" in d.detail for _, d in f.log)
    # Back: the stabilisation window starts only when signals return (no credit for the outage).
    back = T0 + 1200
    f.run(back, 600, lambda t: 1.0)
    downs = f.actions(back)
    assert downs and downs[0][0] - back == 300


def test_freeze_window_then_release():
    # Monday 09:00-10:00 freeze. Surplus from 09:00; drains wait until 10:00.
    policy = make_policy(schedules={"freezes": [{"name": "deploy", "days": ["mon"], "start": "09:00", "end": "10:00"}]})
    f = FakeFleet(policy)
    f.run(T0, 5400, lambda t: 1.0)
    holds = {d.reason for t, d in f.log if t < T0 + 3600 and t >= T0 + 300}
    assert holds == {Reason.FREEZE_WINDOW}
    first_down = f.actions()[0]
    assert first_down[1] is Action.SCALE_DOWN and first_down[0] == T0 + 3600


def test_schedule_floor_keeps_groups_through_the_business_day():
    # Weekdays 08:00-18:00 floor 2. Monday from 09:00 at demand 1: stays at 2 until 18:00, then 1.
    policy = make_policy(schedules={"windows": [
        {"name": "business", "days": ["mon", "tue", "wed", "thu", "fri"], "start": "08:00", "end": "18:00",
         "floor_groups": 2}]})
    f = FakeFleet(policy)
    f.run(T0, 9 * 3600 + 600, lambda t: 1.0)
    six_pm = datetime(2026, 1, 5, 18, 0, tzinfo=timezone.utc).timestamp()
    downs = [t for t, a, _ in f.actions() if a is Action.SCALE_DOWN]
    assert len(downs) == 2
    assert downs[0] < six_pm <= downs[1]  # 3 -> 2 in the morning, 2 -> 1 only after 18:00
    at_floor = {d.reason for t, d in f.log if downs[0] + 60 < t < six_pm}
    assert at_floor == {Reason.AT_FLOOR}


def test_pin_holds_until_it_expires():
    # Pin 3 groups until 10:00 under surplus load, then the fleet shrinks by itself.
    policy = make_policy(schedules={"pin": {"groups": 3, "until": "2026-01-05T10:00:00Z", "note": "demo"}})
    f = FakeFleet(policy)
    f.run(T0, 2 * 3600, lambda t: 1.0)
    ten = T0 + 3600
    assert {d.reason for t, d in f.log if t < ten} == {Reason.PINNED}
    downs = [t for t, a, _ in f.actions() if a is Action.SCALE_DOWN]
    assert downs and downs[0] >= ten + 300


def test_drain_interrupted_by_a_surge_returns_the_group():
    # 3 -> 2 drains g3 (drain takes 10 minutes here); a surge during the drain brings g3 back
    # instead of starting a cold group.
    policy = make_policy()
    f = FakeFleet(policy, drain_s=600)
    f.run(T0, 330, lambda t: 2.0)
    assert f.phases["g3"] is Phase.DRAINING
    d = f.step(T0 + 330, 9.0)
    assert (d.action, d.groups, d.reason) == (Action.SCALE_UP, ("g3",), Reason.UTILIZATION_HIGH)
    assert "back from draining" in d.detail
    assert f.phases["g3"] is Phase.READY


def test_a_cordon_during_a_surge_costs_no_capacity():
    # Issue 18: g1 ready, g2 starting (ready at T0 + 300) and cordoned by an operator, g3 off.
    # Demand 26 for 30 minutes needs ceil(26 / 4.2) = 7 groups, then 3 needs 1.
    policy = make_policy()
    f = FakeFleet(policy, cordoned={"g2"})
    f.phases.update(g2=Phase.STARTING, g3=Phase.OFF)
    f.since.update(g2=T0 - 300)
    f.run(T0, 3600, lambda t: 26.0 if t < T0 + 1800 else 3.0)
    acts = [(t - T0, d.action, d.reason, d.groups) for t, d in f.log if d.action is not Action.HOLD]
    # T0: g2 is leaving, so 1 group serves: g3 starts at once (before: held, action_in_flight).
    assert acts[0] == (0, Action.SCALE_UP, Reason.UTILIZATION_HIGH, ("g3",))
    # T0 + 300 g2 ready, T0 + 600 g3 ready: all three serve through the surge; the cordoned g2
    # keeps serving while the others cannot carry the load, and the holds say so.
    surge = [d for t, d in f.log if T0 + 600 <= t < T0 + 1800]
    assert all(d.inputs["ready"] == 3 and d.reason is Reason.AT_CEILING for d in surge)
    assert all(d.detail.endswith("(g2 stays until the others carry the load)") for d in surge)
    # T0 + 1800, the first tick at demand 3: g1 and g3 carry it (3 <= 2 x 4.2): g2 is drained then,
    # and never started again.
    assert acts[1] == (1800, Action.SCALE_DOWN, Reason.CORDONED, ("g2",))
    assert all("g2" not in groups for _, a, _, groups in acts if a is Action.SCALE_UP)
    assert f.phases["g2"] is Phase.OFF


def test_a_cap_and_a_cordon_on_four_groups_with_differing_kv():
    # Four groups, ceiling 3 (g4 off); sessions keep the groups' KV use apart: g1 0.8, g2 0.2, g3
    # 0.5. g3 is cordoned at 09:00; demand 10 needs ceil(10 / 4.2) = 3 groups all along; a window
    # caps the fleet at 2 groups from 09:30 to 10:00.
    cap = {"name": "cap", "days": ["mon"], "start": "09:30", "end": "10:00", "ceiling_groups": 2}
    policy = make_policy(4, schedules={"windows": [cap]})
    f = FakeFleet(policy, cordoned={"g3"}, kv={"g1": 0.8, "g2": 0.2, "g3": 0.5})
    assert f.phases == {"g1": Phase.READY, "g2": Phase.READY, "g3": Phase.READY, "g4": Phase.OFF}
    f.run(T0, 4500, lambda t: 10.0)
    acts = [(t - T0, d.action, d.reason, d.groups) for t, d in f.log if d.action is not Action.HOLD]
    assert acts == [
        # 09:30: 3 active > cap 2: the cordoned g3 goes, not g2 (least KV) that the victim key names
        (1800, Action.SCALE_DOWN, Reason.ABOVE_CEILING, ("g3",)),
        # 10:00: the cap ends, 3 wanted on 2: g4 starts (g3 is cordoned: never a start candidate)
        (3600, Action.SCALE_UP, Reason.UTILIZATION_HIGH, ("g4",)),
    ]
    # 09:00-09:30: g4 would be a fourth active group over the ceiling of 3: g3 keeps serving.
    assert {d.reason for t, d in f.log if t < T0 + 1800} == {Reason.AT_CEILING}
    # 09:30-10:00: 2 serve under the cap of 2: held at the ceiling, nothing else drained.
    assert {d.reason for t, d in f.log if T0 + 1800 < t < T0 + 3600} == {Reason.AT_CEILING}


def test_every_reason_code_is_reached_by_some_test(tmp_path):
    """Every code of the closed set is returned by the real core in some core test. The core tests
    (tests/test_core_*.py but the fast path's trace replays) run in a subprocess that records each reason the core returned (core_helpers.decide), so the
    check is the same whatever order, or selection, this test runs in."""
    if os.environ.get("AUTOSCALER_TEST_REASONS_OUT"):
        pytest.skip("inside the coverage run itself")
    out = tmp_path / "reasons.txt"
    here = Path(__file__).resolve().parent
    env = {**os.environ, "AUTOSCALER_TEST_REASONS_OUT": str(out)}
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
         # test_core_fast_path replays traces (half the CPU of the rest) and returns no reason they miss
         *sorted(str(p) for p in here.glob("test_core_*.py") if p.name != "test_core_fast_path.py"),
         "-k", "not test_every_reason_code_is_reached_by_some_test"],
        capture_output=True, text=True, env=env, cwd=here.parent, timeout=600,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    seen = set(out.read_text().split())
    missing = sorted(r.value for r in Reason if r.value not in seen)
    assert not missing, f"no test reaches: {missing}"


def test_a_compressed_minute_is_the_policys_own():
    # The demo's time: 1 s ticks, 8 s start-ups, forecast.minute_s 2. Demand steps between 2 and 5
    # every 10 s for two minutes: decide measures its rises per 2-s minute (lead 8 + 1 = 9 s: 5 of
    # them), so within 120 s of wall time there are dozens of measured rises where the default
    # 60-s minute would have none (one minute closed, none a whole lead time after another).
    policy = make_policy(fleet={"startup_expected_s": 8}, scaling={"tick_interval_s": 1},
                         forecast={"minute_s": 2, "trend_window_s": 10})
    f = FakeFleet(policy, startup_s=8, drain_s=2)
    for i in range(120):
        f.step(T0 + i, 5.0 if (i // 10) % 2 else 2.0)
    risk = f.log[-1][1].inputs.get("risk")
    samples = len(f.memory.rises_sorted)
    assert samples >= 40, samples
    assert risk is None or risk["rise_samples"] == samples
    assert "minutes of 2 s" in " ".join(d.detail for _, d in f.log if d.detail.startswith("P(demand"))
