"""The cordon rule: an operator's cordoned active group is drained; a replacement first when the
floor needs it; the decision says so when no group can be started. Cordoned groups are never a
start candidate."""

from __future__ import annotations

from dataclasses import replace

from core_helpers import T0, decide, fleet, fresh, make_policy, signals

from autoscaler.core.types import Action, FleetState, Reason


def cordon(f: FleetState, *names: str) -> FleetState:
    return FleetState({n: (replace(g, cordoned=True) if n in names else g) for n, g in f.groups.items()}, f.synced)


def test_a_cordoned_ready_group_is_drained_when_the_others_keep_the_floor():
    # floor 1; g1, g2 ready; g2 cordoned -> 1 other active group keeps floor 1 -> drain g2
    d, _ = decide(signals(g1=(1, 0, 0.1), g2=(1, 0, 0.1)), cordon(fleet("ready", "ready", "off"), "g2"),
                  make_policy(), fresh(), T0)
    assert (d.action, d.group, d.reason, d.target_groups) == (Action.SCALE_DOWN, "g2", Reason.CORDONED, 1)
    assert "g2 is cordoned by an operator; 1 other ready groups keep floor 1" in d.detail


def test_cordon_below_the_floor_starts_a_replacement_first_not_the_cordoned_group():
    # floor 1, only g1 ready and cordoned: draining it would leave 0 < 1 -> start g2 (not g1)
    d, _ = decide(signals(g1=(1, 0, 0.1)), cordon(fleet("ready", "off", "off"), "g1"), make_policy(), fresh(), T0)
    assert (d.action, d.groups, d.reason, d.target_groups) == (Action.SCALE_UP, ("g2",), Reason.CORDONED, 2)
    assert "below floor 1, so a replacement starts first" in d.detail


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
