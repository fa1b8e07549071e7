"""Table tests for each rule of the decision core, with exact values and the arithmetic in comments.

Default fleet: 3 groups, floor 1, ceiling 3, 6 requests per group, target utilisation 0.7, so one
group carries 6 x 0.7 = 4.2 requests at target. Scale-down threshold 0.55 of the remaining groups.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from core_helpers import T0, decide, fleet, make_policy, signals

from autoscaler.core import Action, Memory, Reason
from autoscaler.core.decide import groups_needed
from autoscaler.core.forecast import lead_time_s, p95, record_startup
from autoscaler.core.types import Problem

P = make_policy()
SETTLED = Memory(surplus_since=T0 - 3600)  # surplus held for an hour: stabilisation is satisfied


@pytest.mark.parametrize(
    "demand, per_group, expected",
    [
        (0, 4.2, 0),
        (4.2, 4.2, 1),  # exactly at target: 4.2 / 4.2 = 1.0 -> 1 (no float rounding up to 2)
        (4.3, 4.2, 2),  # 4.3 / 4.2 = 1.02 -> 2
        (11, 4.2, 3),  # 11 / 4.2 = 2.62 -> 3
        (12.6, 4.2, 3),  # 12.6 / 4.2 = 3.0 -> 3
    ],
)
def test_groups_needed(demand, per_group, expected):
    assert groups_needed(demand, per_group) == expected


# ---------------------------------------------------------------------------------- scale up
@pytest.mark.parametrize(
    "phases, loads, expected_action, expected_target, expected_groups, expected_reason",
    [
        # 1 ready, demand 4 <= 1 x 4.2: fits, but 4 / (0 remaining groups) -> at the floor
        (("ready", "off", "off"), {"g1": (4, 0, 0.5)}, Action.HOLD, 1, (), Reason.AT_FLOOR),
        # demand 5 > 4.2 -> ceil(5 / 4.2) = 2 groups: start g2
        (("ready", "off", "off"), {"g1": (5, 0, 0.5)}, Action.SCALE_UP, 2, ("g2",), Reason.UTILIZATION_HIGH),
        # demand 6 + 3 = 9 -> ceil(9 / 4.2) = 3 groups: start g2 and g3 in one decision
        (("ready", "off", "off"), {"g1": (6, 3, 0.9)}, Action.SCALE_UP, 3, ("g2", "g3"), Reason.UTILIZATION_HIGH),
        # starting groups count as capacity on its way: 2 active x 4.2 = 8.4 >= 8 -> hold (no 2nd start)
        (("ready", "starting", "off"), {"g1": (6, 2, 0.9)}, Action.HOLD, 2, (), Reason.STEADY),
        # demand 9 > 2 active x 4.2 = 8.4 while g2 starts: scale-ups are still allowed -> start g3
        (("ready", "starting", "off"), {"g1": (6, 3, 0.9)}, Action.SCALE_UP, 3, ("g3",), Reason.UTILIZATION_HIGH),
        # a draining group comes back first: cheapest capacity there is
        (("ready", "off", "draining"), {"g1": (6, 0, 0.9)}, Action.SCALE_UP, 2, ("g3",), Reason.UTILIZATION_HIGH),
        # draining groups do not count as capacity: 1 ready x 4.2 < 5 even though g2 is still up
        (("ready", "draining", "off"), {"g1": (5, 0, 0.9)}, Action.SCALE_UP, 2, ("g2",), Reason.UTILIZATION_HIGH),
        # at the ceiling: 3 x 4.2 = 12.6 < 18 wanted, nothing left to add
        (("ready", "ready", "ready"), {"g1": (6, 0, 1), "g2": (6, 0, 1), "g3": (6, 0, 1)},
         Action.HOLD, 3, (), Reason.AT_CEILING),
    ],
)
def test_scale_up_table(phases, loads, expected_action, expected_target, expected_groups, expected_reason):
    d, _ = decide(signals(**loads), fleet(*phases), P, Memory(), T0)
    assert (d.action, d.target_groups, d.groups, d.reason) == (
        expected_action, expected_target, expected_groups, expected_reason
    ), d.detail


def test_max_groups_per_decision_limits_the_step():
    # demand 12 -> ceil(12 / 4.2) = 3 groups; at most +1 per decision -> 2
    policy = make_policy(scaling={"scale_up": {"max_groups_per_decision": 1}})
    d, _ = decide(signals(g1=(6, 6, 1.0)), fleet("ready", "off", "off"), policy, Memory(), T0)
    assert (d.action, d.target_groups, d.groups) == (Action.SCALE_UP, 2, ("g2",))
    assert "limited to 2" in d.detail


def test_queue_trigger_counts_queued_per_ready_group():
    # Utilisation alone: demand 2 + 3 over 2 ready = 5 < 8.4 -> no. Queue: 3 / 2 = 1.5 > 1.0 -> +1 group
    d, _ = decide(signals(g1=(1, 0, 0.2), g2=(1, 3, 0.2)), fleet("ready", "ready", "off"), P, Memory(), T0)
    assert (d.action, d.reason, d.groups) == (Action.SCALE_UP, Reason.QUEUE_HIGH, ("g3",))
    # Switched off, the same load holds.
    off = make_policy(scaling={"scale_up": {"queued_per_group_above": None}})
    d, _ = decide(signals(g1=(1, 0, 0.2), g2=(1, 3, 0.2)), fleet("ready", "ready", "off"), off, Memory(), T0)
    assert d.action is Action.HOLD


@pytest.mark.parametrize(
    "ttft, queue_wait, expected",
    [
        (4.0, 2.0, Action.SCALE_UP),  # 4 s > 3 s target, queue wait 2 s > 0.5 s: capacity would fix it
        (4.0, 0.1, Action.HOLD),  # 4 s but queue wait only 0.1 s: a long prompt's own prefill; no
        (2.5, 2.0, Action.HOLD),  # within target
    ],
)
def test_slo_burn_counts_only_queue_wait(ttft, queue_wait, expected):
    # demand 3 on 2 ready groups (8.4 at target): utilisation and queue triggers are quiet
    snap = signals(g1=(2, 0, 0.3), g2=(1, 0, 0.3), ttft=ttft, queue_wait=queue_wait)
    burning = Memory(slo_miss_since=T0 - 120)  # the miss has lasted slo_burn_for_s = 120 s
    d, _ = decide(snap, fleet("ready", "ready", "off"), P, burning, T0)
    assert d.action is expected, d.detail
    if expected is Action.SCALE_UP:
        assert (d.reason, d.groups) == (Reason.SLO_BURN, ("g3",))


def test_slo_burn_without_queue_wait_signal_uses_queued():
    # No queue-wait metric: a TTFT miss counts only while requests are queued.
    snap = signals(g1=(2, 0, 0.3), g2=(1, 1, 0.3), ttft=5.0)  # queued 1 / 2 = 0.5 per group: queue trigger quiet
    d, _ = decide(snap, fleet("ready", "ready", "off"), P, Memory(slo_miss_since=T0 - 120), T0)
    assert (d.action, d.reason) == (Action.SCALE_UP, Reason.SLO_BURN)
    snap = signals(g1=(2, 0, 0.3), g2=(1, 0, 0.3), ttft=5.0)
    d, mem = decide(snap, fleet("ready", "ready", "off"), P, Memory(slo_miss_since=T0 - 120), T0)
    assert d.reason is not Reason.SLO_BURN and mem.slo_miss_since is None


def test_slo_burn_must_last_before_it_adds_a_group():
    # A burst: the miss starts now. At 0 s and 119 s nothing; at 120 s (slo_burn_for_s) a group.
    snap = signals(g1=(2, 0, 0.3), g2=(1, 0, 0.3), ttft=4.0, queue_wait=2.0)
    d, mem = decide(snap, fleet("ready", "ready", "off"), P, Memory(), T0)
    assert d.action is Action.HOLD and mem.slo_miss_since == T0
    d, mem = decide(snap, fleet("ready", "ready", "off"), P, mem, T0 + 119)
    assert d.action is Action.HOLD
    d, _ = decide(snap, fleet("ready", "ready", "off"), P, mem, T0 + 120)
    assert (d.action, d.reason) == (Action.SCALE_UP, Reason.SLO_BURN)
    assert "for 120 s" in d.detail


def test_spare_groups_add_headroom():
    # demand 4 -> 1 group + 1 spare = 2 -> start g2
    policy = make_policy(scaling={"spare_groups": 1})
    d, _ = decide(signals(g1=(4, 0, 0.5)), fleet("ready", "off", "off"), policy, Memory(), T0)
    assert (d.action, d.target_groups, d.reason) == (Action.SCALE_UP, 2, Reason.UTILIZATION_HIGH)


def test_no_group_available_when_others_failed():
    d, _ = decide(signals(g1=(6, 2, 0.9)), fleet("ready", "failed", "failed"), P, Memory(), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.NO_GROUP_AVAILABLE)


# -------------------------------------------------------------------------------- scale down
def test_surplus_scale_down_drains_one_group():
    # demand 2 + 1 = 3 on 3 groups; on 2 groups: 3 / (2 x 6) = 0.25 < 0.55 -> drain one
    snap = signals(g1=(2, 0, 0.5), g2=(1, 0, 0.3), g3=(0, 0, 0.3))
    d, mem = decide(snap, fleet("ready", "ready", "ready"), P, SETTLED, T0)
    assert (d.action, d.target_groups, d.reason) == (Action.SCALE_DOWN, 2, Reason.SURPLUS)
    # victim: least KV (g2 and g3 tie at 0.3) -> fewest running (g3: 0) -> g3
    assert d.group == "g3"
    assert d.inputs["utilization_after_scale_down"] == 0.25
    assert mem.disruptions == (T0,) and mem.surplus_since is None


@pytest.mark.parametrize(
    "loads, victim",
    [
        # least KV cache in use wins, whatever the running count
        ({"g1": (0, 0, 0.10), "g2": (1, 0, 0.40), "g3": (0, 0, 0.20)}, "g1"),
        # KV tie -> fewest running + queued
        ({"g1": (1, 0, 0.20), "g2": (0, 0, 0.20), "g3": (1, 0, 0.20)}, "g2"),
        # full tie -> the group latest in policy order
        ({"g1": (0, 0, 0.20), "g2": (0, 0, 0.20), "g3": (0, 0, 0.20)}, "g3"),
    ],
)
def test_victim_order(loads, victim):
    d, _ = decide(signals(**loads), fleet("ready", "ready", "ready"), P, SETTLED, T0)
    assert (d.action, d.group) == (Action.SCALE_DOWN, victim)


def test_not_surplus_when_remaining_groups_would_be_too_busy():
    # demand 7 on 3 groups; on 2 groups: 7 / 12 = 0.58 >= 0.55 -> keep 3
    snap = signals(g1=(3, 0, 0.5), g2=(2, 0, 0.5), g3=(2, 0, 0.5))
    d, mem = decide(snap, fleet("ready", "ready", "ready"), P, SETTLED, T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.STEADY)
    assert d.inputs["utilization_after_scale_down"] == pytest.approx(7 / 12, abs=1e-4)
    assert mem.surplus_since is None  # the continuous window restarts


def test_spare_groups_are_kept_on_scale_down():
    # demand 0 on 3 groups with 1 spare: remaining = 3 - 1 - 1 = 1 group (capacity 4.2 at the target):
    # surplus. Demand 4: 4 / 6 = 0.67 >= 0.55 -> keep (and a rise past 4.2 is likely: z = 0.2 / sqrt(5))
    policy = make_policy(scaling={"spare_groups": 1})
    low = signals(g1=(0, 0, 0.2), g2=(0, 0, 0.2), g3=(0, 0, 0.2))
    d, _ = decide(low, fleet("ready", "ready", "ready"), policy, SETTLED, T0)
    assert d.action is Action.SCALE_DOWN
    high = signals(g1=(2, 0, 0.2), g2=(1, 0, 0.2), g3=(1, 0, 0.2))
    d, _ = decide(high, fleet("ready", "ready", "ready"), policy, SETTLED, T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.STEADY)


LOW3 = dict(g1=(1, 0, 0.2), g2=(0, 0, 0.1), g3=(0, 0, 0.1))  # demand 1: 1 / 12 = 0.08 on 2 groups


def test_stabilization_window_must_pass():
    # First surplus tick starts the window; 299 s later still stabilising; at 300 s it acts.
    d, mem = decide(signals(**LOW3), fleet("ready", "ready", "ready"), P, Memory(), T0)
    assert (d.reason, mem.surplus_since) == (Reason.STABILIZING, T0)
    d, mem = decide(signals(at=T0 + 299, **LOW3), fleet("ready", "ready", "ready"), P, mem, T0 + 299)
    assert d.reason is Reason.STABILIZING
    d, _ = decide(signals(at=T0 + 300, **LOW3), fleet("ready", "ready", "ready"), P, mem, T0 + 300)
    assert (d.action, d.reason) == (Action.SCALE_DOWN, Reason.SURPLUS)


def test_cooldown_after_scale_up():
    # last scale-up 599 s ago, cooldown 600 s -> hold; at 600 s -> drain
    mem = Memory(surplus_since=T0 - 3600, last_scale_up_at=T0 - 599)
    d, _ = decide(signals(**LOW3), fleet("ready", "ready", "ready"), P, mem, T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.COOLDOWN)
    mem = Memory(surplus_since=T0 - 3600, last_scale_up_at=T0 - 600)
    d, _ = decide(signals(**LOW3), fleet("ready", "ready", "ready"), P, mem, T0)
    assert d.action is Action.SCALE_DOWN


def test_disruption_budget():
    # budget 2 per hour; two disruptions 10 and 50 minutes ago -> hold; one of them 61 minutes ago -> act
    policy = make_policy(scaling={"disruption_budget_per_hour": 2})
    mem = Memory(surplus_since=T0 - 7200, disruptions=(T0 - 3000, T0 - 600))
    d, _ = decide(signals(**LOW3), fleet("ready", "ready", "ready"), policy, mem, T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.DISRUPTION_BUDGET)
    mem = Memory(surplus_since=T0 - 7200, disruptions=(T0 - 3660, T0 - 600))
    d, next_mem = decide(signals(**LOW3), fleet("ready", "ready", "ready"), policy, mem, T0)
    assert d.action is Action.SCALE_DOWN
    assert next_mem.disruptions == (T0 - 600, T0)  # the 61-minute-old one was forgotten


def test_min_uptime_protects_young_groups():
    # g2 and g3 became ready 10 minutes ago, g1 two hours ago; min uptime 900 s.
    young = {"g2": T0 - 600, "g3": T0 - 600}
    d, _ = decide(signals(**LOW3), fleet("ready", "ready", "ready", sinces=young), P, SETTLED, T0)
    # g1 is the only candidate even though g2/g3 hold less KV
    assert (d.action, d.group) == (Action.SCALE_DOWN, "g1")
    all_young = {"g1": T0 - 600, **young}
    d, _ = decide(signals(**LOW3), fleet("ready", "ready", "ready", sinces=all_young), P, SETTLED, T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.MIN_UPTIME)


def test_freeze_window_blocks_scale_down():
    # Monday 09:00 UTC is inside a mon 08:00-10:00 freeze
    policy = make_policy(schedules={"freezes": [{"name": "release", "days": ["mon"], "start": "08:00", "end": "10:00"}]})
    d, _ = decide(signals(**LOW3), fleet("ready", "ready", "ready"), policy, SETTLED, T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.FREEZE_WINDOW)
    assert "release" in d.detail
    # and scale-ups still happen inside a freeze
    d, _ = decide(signals(g1=(6, 2, 0.9)), fleet("ready", "off", "off"), policy, Memory(), T0)
    assert d.action is Action.SCALE_UP


def test_one_change_at_a_time():
    # Surplus, but g3 is draining: no second scale-down.
    d, mem = decide(signals(g1=(0, 0, 0.1), g2=(0, 0, 0.1)), fleet("ready", "ready", "draining"), P, SETTLED, T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.ACTION_IN_FLIGHT)
    assert "g3 draining" in d.detail and mem.surplus_since is None
    # Surplus, but g3 is starting: no scale-down while a start is in flight.
    d, _ = decide(signals(g1=(0, 0, 0.1), g2=(0, 0, 0.1)), fleet("ready", "ready", "starting"), P, SETTLED, T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.ACTION_IN_FLIGHT)


# ----------------------------------------------------------------------- floor, ceiling, schedules
def test_below_floor_starts_groups_without_signals():
    # floor 2, only g1 active, and Prometheus is down: the floor needs no signals
    policy = make_policy(fleet={"floor_groups": 2})
    problem = Problem("running", None, "unreachable", "connection refused")
    d, _ = decide(signals(problems=(problem,)), fleet("ready", "off", "off"), policy, Memory(), T0)
    assert (d.action, d.target_groups, d.groups, d.reason) == (Action.SCALE_UP, 2, ("g2",), Reason.BELOW_FLOOR)


BUSINESS = {"name": "business", "days": ["mon", "tue", "wed", "thu", "fri"], "start": "08:00", "end": "18:00"}


def test_schedule_floor_raises_the_floor_in_its_window():
    policy = make_policy(schedules={"windows": [{**BUSINESS, "floor_groups": 2}]})
    d, _ = decide(signals(g1=(0, 0, 0.1)), fleet("ready", "off", "off"), policy, Memory(), T0)  # Mon 09:00
    assert (d.action, d.reason, d.inputs["floor"], d.inputs["floor_source"]) == (
        Action.SCALE_UP, Reason.BELOW_FLOOR, 2, "window business"
    )
    sunday = datetime(2026, 1, 4, 9, 0, tzinfo=timezone.utc).timestamp()
    d, _ = decide(signals(at=sunday, g1=(0, 0, 0.1)), fleet("ready", "off", "off", since=sunday - 7200), policy,
                  Memory(), sunday)
    assert (d.action, d.reason) == (Action.HOLD, Reason.AT_FLOOR)


def test_schedule_cap_drains_above_it_and_blocks_scale_up():
    policy = make_policy(schedules={"windows": [{**BUSINESS, "ceiling_groups": 2}]})
    # 3 active > cap 2: drain one now, no stabilisation needed
    d, _ = decide(signals(g1=(3, 0, 0.5), g2=(3, 0, 0.5), g3=(3, 0, 0.5)), fleet("ready", "ready", "ready"),
                  policy, Memory(), T0)
    assert (d.action, d.reason, d.target_groups) == (Action.SCALE_DOWN, Reason.ABOVE_CEILING, 2)
    # 2 active, demand 12 wants 3: capped
    d, _ = decide(signals(g1=(6, 0, 0.5), g2=(6, 0, 0.5)), fleet("ready", "ready", "off"), policy, Memory(), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.AT_CEILING)


def test_cap_below_floor_floor_wins_and_says_so():
    policy = make_policy(
        fleet={"floor_groups": 2},
        schedules={"windows": [{**BUSINESS, "ceiling_groups": 1}]},
    )
    d, _ = decide(signals(g1=(0, 0, 0.1), g2=(0, 0, 0.1)), fleet("ready", "ready", "off"), policy, SETTLED, T0)
    assert (d.action, d.reason, d.inputs["ceiling"]) == (Action.HOLD, Reason.FLOOR_OVER_CAP, 2)


def test_wrapping_window_covers_the_next_morning():
    # fri 22:00-06:00 is active Saturday 03:00, not Friday 03:00
    policy = make_policy(schedules={"windows": [
        {"name": "night", "days": ["fri"], "start": "22:00", "end": "06:00", "floor_groups": 3}]})
    sat = datetime(2026, 1, 10, 3, 0, tzinfo=timezone.utc).timestamp()
    fri = datetime(2026, 1, 9, 3, 0, tzinfo=timezone.utc).timestamp()
    d, _ = decide(signals(at=sat, g1=(0, 0, 0.1)), fleet("ready", "off", "off"), policy, Memory(), sat)
    assert (d.reason, d.target_groups) == (Reason.BELOW_FLOOR, 3)
    d, _ = decide(signals(at=fri, g1=(0, 0, 0.1)), fleet("ready", "off", "off"), policy, Memory(), fri)
    assert d.reason is Reason.AT_FLOOR


def test_schedule_time_zone_is_respected():
    # 08:00-18:00 Asia/Tokyo (UTC+9) on Monday: 09:00 UTC is 18:00 Tokyo -> just outside
    policy = make_policy(schedules={"timezone": "Asia/Tokyo", "windows": [{**BUSINESS, "floor_groups": 2}]})
    d, _ = decide(signals(g1=(0, 0, 0.1)), fleet("ready", "off", "off"), policy, Memory(), T0)
    assert d.inputs["floor"] == 1
    d, _ = decide(signals(at=T0 - 60, g1=(0, 0, 0.1)), fleet("ready", "off", "off"), policy, Memory(), T0 - 60)
    assert d.inputs["floor"] == 2  # 17:59 Tokyo


def test_pin_holds_exactly_and_expires_by_itself():
    until = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc).isoformat()
    policy = make_policy(schedules={"pin": {"groups": 2, "until": until, "note": "launch"},
                                    "windows": [{**BUSINESS, "ceiling_groups": 1}]})
    # pinned at 2 (overrides the business cap of 1): 1 active -> start one
    d, _ = decide(signals(g1=(0, 0, 0.1)), fleet("ready", "off", "off"), policy, Memory(), T0)
    assert (d.action, d.reason, d.target_groups) == (Action.SCALE_UP, Reason.PIN, 2)
    # at 2 with heavy load: the pin also caps
    d, _ = decide(signals(g1=(6, 3, 0.9), g2=(6, 3, 0.9)), fleet("ready", "ready", "off"), policy, Memory(), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.PINNED)
    # 3 active > pin: drain one with reason pin
    d, _ = decide(signals(g1=(0, 0, 0.1), g2=(0, 0, 0.1), g3=(0, 0, 0.1)), fleet("ready", "ready", "ready"),
                  policy, Memory(), T0)
    assert (d.action, d.reason) == (Action.SCALE_DOWN, Reason.PIN)
    # after 12:00 the pin is inactive (not invalid): the business cap of 1 applies again
    later = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc).timestamp()
    d, _ = decide(signals(at=later, g1=(0, 0, 0.1), g2=(0, 0, 0.1)), fleet("ready", "ready", "off"),
                  policy, Memory(), later)
    assert (d.action, d.reason, d.inputs["ceiling"]) == (Action.SCALE_DOWN, Reason.ABOVE_CEILING, 1)


def test_pin_is_clamped_to_the_fleet_floor_and_ceiling():
    policy = make_policy(fleet={"floor_groups": 2}, schedules={"pin": {"groups": 1, "until": "2030-01-01T00:00:00"}})
    d, _ = decide(signals(g1=(0, 0, 0.1)), fleet("ready", "off", "off"), policy, Memory(), T0)
    assert (d.reason, d.target_groups) == (Reason.PIN, 2)


# ---------------------------------------------------------------------------- signals, sync
@pytest.mark.parametrize(
    "kind, reason",
    [
        ("unreachable", Reason.SIGNAL_UNAVAILABLE),
        ("http_error", Reason.SIGNAL_UNAVAILABLE),
        ("empty", Reason.SIGNAL_UNAVAILABLE),
        ("absent", Reason.SIGNAL_UNAVAILABLE),
        ("stale", Reason.SIGNAL_STALE),
        ("not_a_number", Reason.SIGNAL_INVALID),
        ("multiple_series", Reason.SIGNAL_INVALID),
    ],
)
def test_signal_problems_hold_and_name_the_signal(kind, reason):
    # Surplus load (would drain), but kv_usage of g2 has a problem: hold, never scale down on bad data.
    problem = Problem("kv_usage", "g2", kind, "detail from the adapter")
    snap = signals(problems=(problem,), **LOW3)
    d, mem = decide(snap, fleet("ready", "ready", "ready"), P, SETTLED, T0)
    assert (d.action, d.reason) == (Action.HOLD, reason)
    assert "kv_usage" in d.detail and "g2" in d.detail
    assert mem.surplus_since is None


def test_missing_value_without_problem_is_still_a_hold():
    d, _ = decide(signals(g1=(None, 0, 0.1), g2=(0, 0, 0.1), g3=(0, 0, 0.1)), fleet("ready", "ready", "ready"),
                  P, SETTLED, T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.SIGNAL_UNAVAILABLE)
    assert "g1" in d.detail


def test_problem_of_an_off_group_is_ignored():
    problem = Problem("running", "g3", "absent", "no series")
    d, _ = decide(signals(problems=(problem,), g1=(5, 0, 0.5)), fleet("ready", "off", "off"), P, Memory(), T0)
    assert (d.action, d.reason) == (Action.SCALE_UP, Reason.UTILIZATION_HIGH)


def test_scale_up_still_happens_when_a_non_demand_signal_is_missing():
    problem = Problem("kv_usage", "g1", "stale", "old")
    d, _ = decide(signals(problems=(problem,), g1=(6, 2, 0.5)), fleet("ready", "off", "off"), P, Memory(), T0)
    assert (d.action, d.reason) == (Action.SCALE_UP, Reason.UTILIZATION_HIGH)


def test_unsynced_fleet_holds():
    d, _ = decide(signals(g1=(6, 6, 1.0)), fleet("ready", "off", "off", synced=False), P, Memory(), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.FLEET_UNSYNCED)


# ---------------------------------------------------------------------------------- forecast
def test_lead_time_is_measured_p95_once_enough_samples():
    policy = make_policy(forecast={"min_startup_samples": 5})
    mem = Memory()
    for s in (500, 520, 540, 560):
        mem = record_startup(mem, s)
    assert lead_time_s(policy, mem) == (600.0, "fleet.startup_expected_s")  # 4 < 5 samples
    mem = record_startup(mem, 900)
    # nearest-rank p95 of 5 samples: ceil(0.95 x 5) = 5th smallest = 900
    assert lead_time_s(policy, mem) == (900.0, "p95 of 5 measured start-ups")
    assert p95(tuple(float(x) for x in range(1, 21))) == 19.0  # ceil(0.95 x 20) = 19th


def test_trend_forecast_scales_up_ahead_of_a_ramp():
    # Demand climbed 0 -> 3.6 over the last 600 s (slope 0.006/s); horizon 600 s -> 3.6 + 3.6 = 7.2
    # -> ceil(7.2 / 4.2) = 2 groups, though current demand 3.6 fits one.
    policy = make_policy(forecast={"enabled": True, "seasonal_days": 0})
    samples = tuple((T0 - 585 + 15 * i, 3.6 * i / 39) for i in range(39))  # linear, 0 -> 3.5 at T0 - 15 s
    mem = Memory(demand_samples=samples)
    # current demand 3 + 0.6 = 3.6 fits one group (4.2): only the forecast can ask for a second
    d, _ = decide(signals(g1=(3, 0.6, 0.4)), fleet("ready", "off", "off"), policy, mem, T0)
    assert (d.action, d.reason) == (Action.SCALE_UP, Reason.FORECAST_HIGH), d.detail
    no_forecast = make_policy(forecast={"enabled": False})
    d2, _ = decide(signals(g1=(3, 0.6, 0.4)), fleet("ready", "off", "off"), no_forecast, mem, T0)
    assert d2.action is Action.HOLD
    assert d.forecast_used and "forecast" in d.detail
    assert d.inputs["forecast_basis"] == "trend"


TRUSTED = (1.0, 3.0)  # seasonal error 1 vs persistence 3: weight 3 / (1 + 3) = 0.75 >= 0.5


def test_seasonal_forecast_uses_the_same_time_on_earlier_days():
    # Yesterday demand rose from 2 at this slot to 10 within the next 10 minutes; today it is 2 now.
    # forecast = 2 + (10 - 2) = 10 -> ceil(10 / 4.2) = 3 groups.
    policy = make_policy(forecast={"enabled": True, "seasonal_days": 7})
    slot = int((T0 - 86400) // 300)
    # The seasonal forecast has earned its weight: lately its error was 1 against persistence's 3.
    mem = Memory(demand_by_slot={slot: 2.0, slot + 1: 6.0, slot + 2: 10.0}, seasonal_skill=TRUSTED)
    d, _ = decide(signals(g1=(2, 0, 0.2)), fleet("ready", "off", "off"), policy, mem, T0)
    assert (d.action, d.reason, d.target_groups) == (Action.SCALE_UP, Reason.FORECAST_HIGH, 3)
    assert d.inputs["forecast_basis"] == "seasonal"
    # Not trusted by default (no measured skill), nor when it predicted worse than persistence.
    for skill in (None, (3.0, 1.0)):
        d, _ = decide(signals(g1=(2, 0, 0.2)), fleet("ready", "off", "off"), policy,
                      Memory(demand_by_slot=mem.demand_by_slot, seasonal_skill=skill), T0)
        assert d.action is Action.HOLD and d.inputs["forecast_basis"] == "current", skill


def test_seasonal_peak_expects_the_typical_busiest_slot_of_earlier_days():
    # 'peak': per earlier day, the busiest slot within the 600 s horizon: day 1: max(3, 9) = 9,
    # day 2: 5, day 3: 7 -> sorted [5, 7, 9]; quantile 0.5 -> 7 (quantile 0.25 -> 5 + 0.5 x 2 = 6).
    slot = int(T0 // 300)
    hist = {}
    for day, peaks in ((1, (3.0, 9.0)), (2, (5.0, 1.0)), (3, (2.0, 7.0))):
        base = slot - day * 288
        hist[base + 1], hist[base + 2] = peaks
    for q, expected in ((0.5, 7.0), (0.25, 6.0)):
        policy = make_policy(forecast={"enabled": True, "seasonal_statistic": "peak", "seasonal_quantile": q})
        d, _ = decide(signals(g1=(2, 0, 0.2)), fleet("ready", "off", "off"), policy,
                      Memory(demand_by_slot=hist, seasonal_skill=TRUSTED), T0)
        assert d.inputs["forecast_peak"] == expected
        assert (d.action, d.reason, d.target_groups) == (Action.SCALE_UP, Reason.FORECAST_HIGH, 2)  # ceil(6|7 / 4.2)


def test_forecast_blocks_a_scale_down_before_a_known_rise():
    # Current demand 1 would allow 3 -> 2, but yesterday it rose by 7 within the horizon:
    # (1 + 7) / 12 = 0.67 >= 0.55 -> keep 3.
    policy = make_policy(forecast={"enabled": True})
    slot = int((T0 - 86400) // 300)
    mem = Memory(surplus_since=T0 - 3600, demand_by_slot={slot: 1.0, slot + 1: 8.0}, seasonal_skill=TRUSTED)
    d, _ = decide(signals(**LOW3), fleet("ready", "ready", "ready"), policy, mem, T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.STEADY)
    assert d.inputs["forecast_peak"] == 8.0


# ------------------------------------------------------------------- review: invariants under load
BUSY3 = dict(g1=(6, 4, 0.9), g2=(6, 4, 0.9), g3=(6, 4, 0.9))  # demand 30: wants every group there is


def test_a_cap_is_enforced_under_heavy_load():
    policy = make_policy(schedules={"windows": [{**BUSINESS, "ceiling_groups": 2}]})
    d, _ = decide(signals(**BUSY3), fleet("ready", "ready", "ready"), policy, Memory(), T0)
    assert (d.action, d.reason, d.target_groups) == (Action.SCALE_DOWN, Reason.ABOVE_CEILING, 2)


def test_a_pin_is_enforced_under_heavy_load_and_with_signals_missing():
    policy = make_policy(schedules={"pin": {"groups": 1, "until": "2030-01-01T00:00:00Z"}})
    d, _ = decide(signals(**BUSY3), fleet("ready", "ready", "ready"), policy, Memory(), T0)
    assert (d.action, d.reason) == (Action.SCALE_DOWN, Reason.PIN)
    outage = (Problem("running", None, "unreachable", "connection refused"),)
    d, _ = decide(signals(problems=outage), fleet("ready", "ready", "ready"), policy, Memory(), T0)
    assert (d.action, d.reason, d.group) == (Action.SCALE_DOWN, Reason.PIN, "g3")  # no KV known: policy order


def test_a_cap_wins_over_a_freeze_window():
    policy = make_policy(schedules={"windows": [{**BUSINESS, "ceiling_groups": 2}],
                                    "freezes": [{"name": "release", "days": ["mon"], "start": "08:00", "end": "10:00"}]})
    d, _ = decide(signals(**LOW3), fleet("ready", "ready", "ready"), policy, Memory(), T0)
    assert (d.action, d.reason) == (Action.SCALE_DOWN, Reason.ABOVE_CEILING)
    assert "freeze window release" in d.detail


def test_demand_above_the_ceiling_breaks_the_continuous_surplus_window():
    # Surplus since 290 s; one busy tick at the ceiling; low again two minutes later (the busy minute
    # no longer sets the level the risk starts from): the window restarts then, not from 290 s before.
    d, mem = decide(signals(**BUSY3), fleet("ready", "ready", "ready"), P, Memory(surplus_since=T0 - 290), T0)
    assert d.reason is Reason.AT_CEILING and mem.surplus_since is None
    d, mem = decide(signals(at=T0 + 120, **LOW3), fleet("ready", "ready", "ready"), P, mem, T0 + 120)
    assert d.reason is Reason.STABILIZING and mem.surplus_since == T0 + 120


def test_one_unknown_group_does_not_blind_a_scale_up():
    # g1 reports 6 running + 20 queued; g2's values are missing. What g1 carries alone needs
    # ceil(26 / 4.2) = 7 groups -> start g3 now (ceiling 3); no scale-down on the same data.
    problem = Problem("running", "g2", "absent", "no series")
    snap = signals(problems=(problem,), g1=(6, 20, 0.9), g2=(None, None, None))
    d, _ = decide(snap, fleet("ready", "ready", "off"), P, Memory(), T0)
    assert (d.action, d.reason, d.groups) == (Action.SCALE_UP, Reason.UTILIZATION_HIGH, ("g3",))
    assert "at least: g2 unknown" in d.detail


def test_a_group_ready_after_the_scrape_is_capacity_not_a_problem():
    # g3 became ready 5 s after the signals were scraped: it has no series yet. That is not a
    # signal problem; demand comes from g1 and g2.
    ready_later = {"g3": T0 + 5}
    snap = signals(at=T0, g1=(3, 0, 0.5), g2=(3, 0, 0.5))
    d, _ = decide(snap, fleet("ready", "ready", "ready", sinces=ready_later), P, Memory(), T0 + 15)
    assert d.reason not in (Reason.SIGNAL_UNAVAILABLE, Reason.SIGNAL_STALE, Reason.SIGNAL_INVALID), d.detail
    assert d.inputs["demand"] == 6


def test_no_ready_group_means_unknown_demand_not_zero():
    d, mem = decide(signals(), fleet("starting", "off", "off"), P, Memory(), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.ACTION_IN_FLIGHT)
    assert d.inputs["demand"] is None and mem.demand_samples == ()


def test_floor_over_cap_is_said_when_scaling_up_to_the_floor():
    policy = make_policy(fleet={"floor_groups": 2}, schedules={"windows": [{**BUSINESS, "ceiling_groups": 1}]})
    d, _ = decide(signals(g1=(0, 0, 0.1)), fleet("ready", "off", "off"), policy, Memory(), T0)
    assert (d.action, d.reason, d.target_groups) == (Action.SCALE_UP, Reason.BELOW_FLOOR, 2)
    assert d.inputs["floor_over_cap"] is True and "cap of 1" in d.detail

