"""The cordon rule: an operator's cordoned active group is drained; a replacement first when the
floor needs it; the decision says so when no group can be started. Cordoned groups are never a
start candidate."""

from __future__ import annotations

from core_helpers import T0, cordon, decide, fleet, fresh, make_policy, signals

from autoscaler.core.types import Action, Problem, Reason


def test_a_cordoned_ready_group_is_drained_when_the_others_keep_the_floor():
    # floor 1; g1, g2 ready; g2 cordoned -> 1 other active group keeps floor 1 -> drain g2
    d, _ = decide(signals(g1=(1, 0, 0.1), g2=(1, 0, 0.1)), cordon(fleet("ready", "ready", "off"), "g2"),
                  make_policy(), fresh(), T0)
    assert (d.action, d.group, d.reason, d.target_groups) == (Action.SCALE_DOWN, "g2", Reason.CORDONED, 1)
    assert "g2 is cordoned by an operator; 1 other ready groups keep floor 1" in d.detail


def test_cordon_below_the_floor_starts_a_replacement_first_not_the_cordoned_group():
    # floor 1, only g1 ready and cordoned, idle: draining it would leave 0 < 1 -> start g2 (not g1)
    d, _ = decide(signals(g1=(0, 0, 0.1)), cordon(fleet("ready", "off", "off"), "g1"), make_policy(), fresh(), T0)
    assert (d.action, d.groups, d.reason, d.target_groups) == (Action.SCALE_UP, ("g2",), Reason.CORDONED, 2)
    assert "g1 cordoned: draining would leave 0 groups, below floor 1, so a replacement starts first" in d.detail
    # With demand 1 on it the load needs the replacement too (ceil(1 / 4.2) = 1 > 0 serving): the
    # scale-up rule starts it, still as a cordon's replacement (1 wanted <= 1 active).
    d, _ = decide(signals(g1=(1, 0, 0.1)), cordon(fleet("ready", "off", "off"), "g1"), make_policy(), fresh(), T0)
    assert (d.action, d.groups, d.reason, d.target_groups) == (Action.SCALE_UP, ("g2",), Reason.CORDONED, 2)
    assert d.detail.startswith("g1 cordoned: demand 1 (running 1 + queued 0) > 0 groups x 4.20 = 0 "
                               "(g1 cordoned, not counted); needs 1, so a replacement starts before it drains"), d.detail


def test_cordon_waits_for_the_replacement_then_drains():
    d, _ = decide(signals(g1=(1, 0, 0.1)), cordon(fleet("ready", "starting", "off"), "g1"), make_policy(), fresh(), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.ACTION_IN_FLIGHT)
    d, _ = decide(signals(g1=(1, 0, 0.1), g2=(0, 0, 0)), cordon(fleet("ready", "ready", "off"), "g1"),
                  make_policy(), fresh(), T0)
    assert (d.action, d.group, d.reason) == (Action.SCALE_DOWN, "g1", Reason.CORDONED)


def test_no_group_to_replace_a_cordoned_one_says_so():
    # g2 failed, g3 cordoned and off: nothing can replace g1
    f = cordon(fleet("ready", "failed", "off"), "g1", "g3")
    d, _ = decide(signals(g1=(1, 0, 0.1)), f, make_policy(), fresh(), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.NO_GROUP_AVAILABLE)
    assert "g1 cordoned" in d.detail and "no group is off or draining to start" in d.detail


def test_a_cordoned_off_group_is_never_started_under_load():
    # Heavy load on g1: the scale-up takes g3, skipping the cordoned g2.
    d, _ = decide(signals(g1=(6, 8, 0.9)), cordon(fleet("ready", "off", "off"), "g2"), make_policy(), fresh(), T0)
    assert d.action is Action.SCALE_UP and "g2" not in d.groups and d.groups[0] == "g3"


# ------------------------------------------------------- issue 18: maintenance never costs capacity
# Demand the issue names: 6 running + 20 queued = 26 on g1 alone -> ceil(26 / 4.2) = ceil(6.19) = 7 groups.
SURGE = (6, 20, 0.9)


def test_a_cordoned_group_still_starting_does_not_block_a_scale_up():
    # g1 ready, g2 starting and cordoned, g3 off; 7 groups wanted. g2 is leaving, so it is not
    # counted: 1 serving group, min(7 - 1, ceiling 3 - 2 active, +2 per decision) = 1 start: g3.
    # (Before: the cordon rule came first and held with action_in_flight, starting nothing.)
    f = cordon(fleet("ready", "starting", "off"), "g2")
    d, _ = decide(signals(g1=SURGE), f, make_policy(), fresh(), T0)
    assert (d.action, d.groups, d.reason, d.target_groups) == (Action.SCALE_UP, ("g3",), Reason.UTILIZATION_HIGH, 3)
    assert "> 1 groups x 4.20 = 4.20 (g2 cordoned, not counted); needs 7; g2 cordoned (limited to 3" in d.detail
    # Demand 5 needs ceil(5 / 4.2) = 2 groups: g1 and the starting g2 would do, but g2 is leaving:
    # 2 wanted <= 2 active, so the start is the cordon's replacement (counting g2, nothing starts).
    d, _ = decide(signals(g1=(5, 0, 0.6)), f, make_policy(), fresh(), T0)
    assert (d.action, d.groups, d.reason, d.target_groups) == (Action.SCALE_UP, ("g3",), Reason.CORDONED, 3)
    # Demand 1 fits g1 (1 <= 4.2): nothing to start; g2 is drained once it is ready.
    d, _ = decide(signals(g1=(1, 0, 0.1)), f, make_policy(), fresh(), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.ACTION_IN_FLIGHT)
    assert d.detail == "g2 cordoned; g2 cordoned while starting: draining it once it is ready", d.detail


def test_a_cordoned_group_next_to_a_draining_one_lets_it_come_back():
    # g1 ready, g2 ready and cordoned, g3 draining. Under load (9 + 9 = 18 -> ceil(18 / 4.2) = 5
    # groups wanted, 1 serving) g3 comes back from draining, the cheapest capacity there is.
    # (Before: the cordon rule held "waiting for g3 to finish draining".)
    f = cordon(fleet("ready", "ready", "draining"), "g2")
    d, _ = decide(signals(g1=(6, 3, 0.9), g2=(6, 3, 0.9)), f, make_policy(), fresh(), T0)
    assert (d.action, d.groups, d.reason) == (Action.SCALE_UP, ("g3",), Reason.UTILIZATION_HIGH), d.detail
    assert "starting g3 (back from draining)" in d.detail
    # Idle, but floor 2: draining g2 would leave 1 < 2 serving groups -> g3 back, as the cordon's replacement.
    d, _ = decide(signals(g1=(0, 0, 0.1), g2=(0, 0, 0.1)), f, make_policy(fleet={"floor_groups": 2}), fresh(), T0)
    assert (d.action, d.groups, d.reason) == (Action.SCALE_UP, ("g3",), Reason.CORDONED), d.detail
    assert "g2 cordoned: draining would leave 1 groups, below floor 2, so a replacement starts first" in d.detail
    # Idle at floor 1: nothing needs g3; g2 waits for g3's drain to finish (one drain at a time).
    d, _ = decide(signals(g1=(0, 0, 0.1), g2=(0, 0, 0.1)), f, make_policy(), fresh(), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.ACTION_IN_FLIGHT)
    assert d.detail == "g2 cordoned; waiting for g3 to finish draining", d.detail


def test_a_cordoned_group_is_not_drained_while_another_starts():
    # g3 started for the load; g2 cordoned. Draining g2 now would take capacity while its
    # replacement is only on its way (and no scale-down runs while a group starts).
    # (Before: 1 other ready group >= floor 1 -> g2 drained at once.)
    f = cordon(fleet("ready", "ready", "starting"), "g2")
    d, _ = decide(signals(g1=(1, 0, 0.1), g2=(1, 0, 0.1)), f, make_policy(), fresh(), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.ACTION_IN_FLIGHT)
    assert d.detail == "g2 cordoned; waiting for the replacement g3 before draining", d.detail


def test_a_cordoned_group_is_drained_only_when_the_others_carry_the_load():
    # g1, g2, g3 ready, g2 cordoned, ceiling 3. Demand 9 needs ceil(9 / 4.2) = 3 groups: only 2
    # serve for good and there is no room under the ceiling for a replacement -> g2 keeps serving.
    f = cordon(fleet("ready", "ready", "ready"), "g2")
    busy = signals(g1=(3, 0, 0.3), g2=(3, 0, 0.3), g3=(3, 0, 0.3))
    d, _ = decide(busy, f, make_policy(), fresh(), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.AT_CEILING), d.detail
    assert d.detail.endswith("but already at ceiling 3 (fleet) (g2 stays until the others carry the load)")
    # Demand 8 needs ceil(8 / 4.2) = 2 = the 2 serving groups: g2 is drained, though g3 holds less
    # KV (the cordon chooses the group, not the victim key).
    fits = signals(g1=(3, 0, 0.3), g2=(3, 0, 0.3), g3=(2, 0, 0.1))
    d, _ = decide(fits, f, make_policy(), fresh(), T0)
    assert (d.action, d.group, d.reason, d.target_groups) == (Action.SCALE_DOWN, "g2", Reason.CORDONED, 2)
    assert d.detail.startswith("g2 is cordoned by an operator; 2 other ready groups keep floor 1 and carry "
                               "demand 8 (2 x 4.20 = 8.40 at target)"), d.detail


def test_a_cordon_waits_for_signals_but_its_floor_replacement_does_not():
    outage = (Problem("running", None, "unreachable", "connection refused"),)
    # Demand unknown: draining g2 might take capacity the load needs -> hold, naming both.
    f = cordon(fleet("ready", "ready", "off"), "g2")
    d, _ = decide(signals(problems=outage, g1=(None, None, None), g2=(None, None, None)), f, make_policy(), fresh(), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.SIGNAL_UNAVAILABLE)
    assert d.detail.startswith("g2 cordoned, not drained yet: signal running for the fleet is unreachable"), d.detail
    # The floor needs no signals: g1 alone and cordoned, floor 1 -> g2 starts as its replacement.
    # (This is why the cordon rule comes before the signal problems.)
    d, _ = decide(signals(problems=outage, g1=(None, None, None)), cordon(fleet("ready", "off", "off"), "g1"),
                  make_policy(), fresh(), T0)
    assert (d.action, d.groups, d.reason) == (Action.SCALE_UP, ("g2",), Reason.CORDONED), d.detail


# A ceiling below the group count: four groups defined, ceiling 3.
FOUR = make_policy(4)


def test_a_cordon_on_a_ceiling_below_the_group_count():
    # g1, g2 ready, g2 cordoned, g3 and g4 off. Demand 8 needs 2 groups, 1 serves for good:
    # the replacement is g3 (room: ceiling 3 - 2 active = 1), never the cordoned g2.
    f = cordon(fleet("ready", "ready", "off", "off"), "g2")
    d, _ = decide(signals(g1=(4, 0, 0.5), g2=(4, 0, 0.5)), f, FOUR, fresh(), T0)
    assert (d.action, d.groups, d.reason, d.target_groups) == (Action.SCALE_UP, ("g3",), Reason.CORDONED, 3)
    # g1..g3 active, g2 cordoned: demand 9 needs 3 and g4 would be a fourth active group over the
    # ceiling of 3 -> g2 keeps serving (the ceiling is an invariant; g4 stays off).
    f = cordon(fleet("ready", "ready", "ready", "off"), "g2")
    d, _ = decide(signals(g1=(3, 0, 0.5), g2=(3, 0, 0.5), g3=(3, 0, 0.5)), f, FOUR, fresh(), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.AT_CEILING), d.detail
    # Floor 3 = ceiling 3, idle: draining g2 would leave 2 < 3, and g4 has no room: hold, said so.
    floor3 = make_policy(4, fleet={"floor_groups": 3})
    d, _ = decide(signals(g1=(0, 0, 0.1), g2=(0, 0, 0.1), g3=(0, 0, 0.1)), f, floor3, fresh(), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.AT_CEILING), d.detail
    assert d.detail == ("g2 cordoned: draining would leave 2 groups, below floor 3, and no room for a replacement; "
                        "but already at ceiling 3 (fleet) (g2 stays until the bounds allow a replacement)")


def test_above_the_ceiling_the_cordoned_group_goes_first_whatever_its_kv():
    # A cap of 2 on g1..g3 ready with differing KV (g1 0.1, g2 0.8, g3 0.4): the victim key would
    # drain g1 (least KV); g2 is cordoned, so it goes first (else the cap and then the cordon would
    # take two groups).
    cap = make_policy(schedules={"windows": [{"name": "cap", "days": ["mon"], "start": "08:00", "end": "10:00",
                                              "ceiling_groups": 2}]})
    kv = signals(g1=(1, 0, 0.1), g2=(1, 0, 0.8), g3=(1, 0, 0.4))
    d, _ = decide(kv, cordon(fleet("ready", "ready", "ready"), "g2"), cap, fresh(), T0)
    assert (d.action, d.group, d.reason) == (Action.SCALE_DOWN, "g2", Reason.ABOVE_CEILING), d.detail
    assert "(g2 cordoned: first)" in d.detail
    d, _ = decide(kv, fleet("ready", "ready", "ready"), cap, fresh(), T0)
    assert (d.action, d.group) == (Action.SCALE_DOWN, "g1")


def test_a_floor_short_of_two_starts_two_replacements_and_cordoned_groups_drain_in_policy_order():
    # Four groups, ceiling 4, floor 2; g1 and g2 ready and both cordoned, idle: serving 0, so
    # min(floor 2 - 0, room 4 - 2) = 2 replacements at once: g3 and g4.
    policy = make_policy(4, fleet={"floor_groups": 2, "ceiling_groups": 4})
    idle = signals(g1=(0, 0, 0.1), g2=(0, 0, 0.1))
    d, _ = decide(idle, cordon(fleet("ready", "ready", "off", "off"), "g1", "g2"), policy, fresh(), T0)
    assert (d.action, d.groups, d.reason, d.target_groups) == (Action.SCALE_UP, ("g3", "g4"), Reason.CORDONED, 4)
    # g1 and g3 cordoned, g2 ready, floor 1: one drain at a time, the first in policy order (g1),
    # whatever the KV (g3's is the lower).
    d, _ = decide(signals(g1=(0, 0, 0.5), g2=(1, 0, 0.3), g3=(0, 0, 0.1)), cordon(fleet("ready", "ready", "ready"), "g1", "g3"),
                  make_policy(), fresh(), T0)
    assert (d.action, d.group, d.reason) == (Action.SCALE_DOWN, "g1", Reason.CORDONED), d.detail
