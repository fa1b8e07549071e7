"""The drain's risk in requests (core/risk.py, ``expected_miss_share``; docs/core.md): the capacity
misses a drain adds per arrival over one lead time, set against the budget's allowed share, in
place of the chance of any excess. Worked examples with exact values."""

from __future__ import annotations

import pytest
from core_helpers import T0, decide, fleet, make_policy, signals

from autoscaler.core import Action, Memory, Reason
from autoscaler.core.risk import _added_misses, _added_sum, exceed_probability, expected_miss_share

P = make_policy()
MINUTE = int(T0 // 60)


def _reach(*rows: tuple[float, float, float]) -> dict:
    """Memory fields holding these measured rises as (z, base, reached), sorted as decide keeps them."""
    ordered = tuple(sorted(rows))
    return {"rises_sorted": tuple(r[0] for r in ordered), "rise_reach": ordered,
            "rise_log": tuple((MINUTE - 400 + i, *r) for i, r in enumerate(ordered))}


def test_the_array_sum_is_the_per_moment_rule_summed():
    """``_added_sum`` sums ``_added_misses`` over many moments in place with bare ufuncs (16 or more;
    fewer take the loop): each moment carried to today's level as the smaller of its scaled rise and
    its rise in requests. 40 moments around the two capacities, some past both."""
    import numpy as np

    rng = np.random.default_rng(7)
    z, u = np.sort(rng.uniform(0.0, 8.0, 40)), rng.uniform(0.0, 20.0, 40)
    level, scale, after, before, full = 3.0, 2.0, 12.0, 18.0, 4.0
    each = [_added_misses(min(level + zz * scale, level + uu), after, before, full) for zz, uu in zip(z, u)]
    assert 0 < sum(a == 1.0 for a in each) and 0 < sum(0.0 < a < 1.0 for a in each) and 0 < sum(a == 0.0 for a in each)
    assert _added_sum(z, u, level, scale, after, before, full) == pytest.approx(sum(each), rel=1e-12)


@pytest.mark.parametrize(("reached", "added"), [
    (12.0, 0.0),   # at the capacity after the drain: no queue
    (14.0, 0.5),   # 2 queued of 4 that make every arrival miss: half of them, none before (18 slots)
    (16.0, 1.0),   # 4 queued: all of them
    (20.0, 0.5),   # all after; before, 2 over 18: half already missed
    (30.0, 0.0),   # swamps both fleets: always-on misses them as well
])
def test_the_added_share_at_one_height(reached, added):
    assert _added_misses(reached, 12.0, 18.0, 4.0) == pytest.approx(added)


def _docstring_memory() -> Memory:
    # Level 5 (this minute's mean). 348 moments rose by nothing; 12 reached 14: a rise of 9 requests from
    # a base of 5, z = 9 / sqrt(6) = 3.674.
    z = 9.0 / 6.0 ** 0.5
    return Memory(minute_now=(MINUTE, 5.0, 1), **_reach(*([(0.0, 5.0, 5.0)] * 348 + [(z, 5.0, 14.0)] * 12)))


def test_the_docstring_example():
    # 12 of 360 moments reach 14 on 12 slots after the drain (18 before), 4 queued make every arrival
    # miss: each adds 0.5; the excess is held 1 minute of the 11 of a 615 s lead:
    # 12 x 0.5 x 1 / 11 / 360 = 0.1515% of arrivals.
    mem = _docstring_memory()
    m = expected_miss_share(mem, P, T0, after=12.0, before=18.0, queue_to_miss=4.0, lead_s=615, excess_minutes=1.0)
    assert m is not None
    assert m.share == pytest.approx(12 * 0.5 / 11 / 360)
    assert m.moments == 360 and m.share_seasonal is None
    # The exceedance risk of the same moments: 12 / 360 = 3.3%, twenty times as much.
    assert exceed_probability(mem, P, T0, 12.0, 615).probability == pytest.approx(12 / 360)
    # Held the whole lead time, each moment counts in full: 12 x 0.5 / 360.
    whole = expected_miss_share(mem, P, T0, 12.0, 18.0, 4.0, 615, excess_minutes=11.0)
    assert whole is not None and whole.share == pytest.approx(12 * 0.5 / 360)


def _steady(excess_minutes: float | None, rate: float):
    """Two ready groups at demand 5 (the docstring's moments), a drain to one (6 slots at target 1.0)
    asked: P(demand > 6) = 12 / 360 = 3.3%, above the 1% budget x 2 an unspent budget allows."""
    policy = make_policy(scaling={"target_utilization": 1.0, "scale_down": {
        "min_measured_rises": 0, "excess_minutes": excess_minutes, "utilization_below": 0.9,
        "stabilization_s": 0, "cooldown_after_scale_up_s": 0, "min_group_uptime_s": 0}})
    z = (13.0 - 5.0) / 6.0 ** 0.5  # reaches 13 from 5: 7 over 6 slots after, 1 over 12 before
    mem = Memory(minute_now=(MINUTE, 5.0, 1), surplus_since=T0 - 3600,
                 **_reach(*([(0.0, 5.0, 5.0)] * 348 + [(z, 5.0, 13.0)] * 12)))
    sig = signals(g1=(3, 0, 0.2), g2=(2, 0, 0.1), request_rate=rate)
    return decide(sig, fleet("ready", "ready", "off"), policy, mem, T0)


def test_a_drain_judged_in_requests_where_the_chance_of_an_excess_holds():
    # In requests, at 4 requests/s x 3 s = 12 queued to make every arrival miss: demand 13 on 6 slots
    # is 7 / 12 = 0.583 of arrivals, on always-on's 18 slots none: 0.583 added, for 1 minute of 11:
    # 12 x (7 / 12) / 11 / 360 = 0.18%, within the 1% budget -> drain.
    d, _ = _steady(1.0, rate=4.0)
    assert d.action is Action.SCALE_DOWN and d.reason is Reason.SURPLUS, d.detail
    assert d.inputs["expected_misses"]["share"] == pytest.approx(12 * (7 / 12) / 11 / 360, abs=1e-6)
    assert "expected added misses" in d.detail
    # The exceedance risk (null) holds the same moment: 3.3% > the allowed 1% (unmeasured burn).
    d, _ = _steady(None, rate=4.0)
    assert d.action is Action.HOLD and d.inputs["expected_misses"] is None, d.detail


def test_a_drain_is_judged_against_always_on_not_against_one_group_more():
    # Two of three groups ready, a drain to one: 6 slots after, 12 with the group kept, 18 always-on.
    # At 0.1 requests/s 0.3 queued make every arrival miss: the moments reaching 13 miss all arrivals
    # on 6 slots and on 12 alike, none on always-on's 18. Judged against the group kept, the drain
    # adds nothing (each step of a cascade looked free, and at five groups an on/off trace lost 10 pp
    # of SLO that way); against always-on each moment adds 1: held 4 minutes of 11,
    # 12 x 1 x 4 / 11 / 360 = 1.21% > the 1% budget -> hold.
    policy = make_policy(scaling={"target_utilization": 1.0, "scale_down": {
        "min_measured_rises": 0, "excess_minutes": 4.0, "utilization_below": 0.9,
        "stabilization_s": 0, "cooldown_after_scale_up_s": 0, "min_group_uptime_s": 0}})
    z = (13.0 - 5.0) / 6.0 ** 0.5
    mem = Memory(minute_now=(MINUTE, 5.0, 1), surplus_since=T0 - 3600,
                 **_reach(*([(0.0, 5.0, 5.0)] * 348 + [(z, 5.0, 13.0)] * 12)))
    sig = signals(g1=(3, 0, 0.2), g2=(2, 0, 0.1), request_rate=0.1)
    d, _ = decide(sig, fleet("ready", "ready", "off"), policy, mem, T0)
    assert d.inputs["expected_misses"]["share"] == pytest.approx(12 * 1 * 4 / 11 / 360, abs=1e-6)
    assert d.action is Action.HOLD, d.detail
    # against one group more (12 slots) the same moments would add 0
    kept = expected_miss_share(mem, policy, T0, after=6.0, before=12.0, queue_to_miss=0.3, lead_s=615, excess_minutes=4.0)
    assert kept is not None and kept.share == 0.0
    # A burning budget (3,000 misses in 100,000 arrivals: 3 x the 1% budget, headroom 2) shrinks the
    # fleet after the drain to 6 / 2 = 3 slots, but not always-on: still 18 slots. Today's level 2
    # (under 3); 12 of 360 moments reach 10: 7 over 3 slots, none over 18: 1 each, 1.21% as before.
    # With always-on shrunk as well (9 slots) those moments would swamp both and add nothing.
    z2 = (10.0 - 2.0) / 3.0 ** 0.5
    low = Memory(minute_now=(MINUTE, 2.0, 1), surplus_since=T0 - 3600, budget_burn=(3000.0, 100_000.0, T0),
                 budget_burn_long=(3000.0, 100_000.0, T0),
                 **_reach(*([(0.0, 2.0, 2.0)] * 348 + [(z2, 2.0, 10.0)] * 12)))
    d, _ = decide(signals(g1=(1, 0, 0.2), g2=(1, 0, 0.1), request_rate=0.1), fleet("ready", "ready", "off"),
                  policy, low, T0)
    assert "the budget burns" in d.detail and d.action is Action.HOLD, d.detail
    assert d.inputs["expected_misses"]["share"] == pytest.approx(12 * 1 * 4 / 11 / 360, abs=1e-6)
    shrunk = expected_miss_share(low, policy, T0, after=3.0, before=9.0, queue_to_miss=0.3, lead_s=615,
                                 excess_minutes=4.0)
    assert shrunk is not None and shrunk.share == 0.0


def test_without_a_request_rate_the_chance_of_an_excess_decides():
    # No rate, no queue at which arrivals miss: the drain is judged as before (P = 3.3%: hold).
    d, _ = _steady(1.0, rate=None)
    assert d.action is Action.HOLD and d.inputs["expected_misses"] is None


# ------------------------------------------------------------------------- the tail from one time of day
def _tail_memory() -> Memory:
    """Today's level 5 at T0 (09:00 UTC), 360 quiet recent minutes, and a tail of two closed hours a day
    before, 60 minutes each: one at 20:00 with two bursts to 30 (z 10), one at 08:00 with none, and a
    quiet hour in progress after them."""
    from autoscaler.core.risk import closed_tail_rises

    hour = MINUTE // 60  # 09:00 today
    day = 24
    burst = ((10.0, 5.0, 30.0),) * 2
    tail = ((hour - day - 13, 60, burst),   # 20:00 two days' hours back: a burst hour
            (hour - day - 1, 60, ((0.0, 5.0, 5.0),)),  # 08:00 yesterday: quiet
            (hour - 7, 60, ()))  # the hour in progress, past the recent hours
    return Memory(minute_now=(MINUTE, 5.0, 1, 5.0), rises_sorted=(0.0,) * 360, rise_reach=((0.0, 5.0, 5.0),) * 360,
                  rise_tail=tail, tail_sorted=closed_tail_rises(tail), tail_minutes=180)


def test_the_tail_seen_from_this_time_of_day_keeps_only_the_hours_near_it():
    from autoscaler.core.risk import tail_view

    mem = _tail_memory()
    # Every hour: the two bursts over 360 + 180 minutes.
    every = make_policy(scaling={"scale_down": {"tail_within_h": None}})
    assert exceed_probability(mem, every, T0, 12.0, 615).p_week == pytest.approx(2 / 540)
    # Within 3 h of 09:00: the 08:00 hour (60 minutes) and the hour in progress (02:00? no: hour - 7 is
    # 02:00, 7 h away: out): 0 of 360 + 60 minutes; the evening's bursts do not count at 09:00.
    near = make_policy(scaling={"scale_down": {"tail_within_h": 3}})
    r = exceed_probability(mem, near, T0, 12.0, 615)
    assert r.p_week == 0.0 and r.week_minutes == 420
    z, _u, last, minutes = tail_view(mem, T0, 3)
    assert len(z) == 1 and last == () and minutes == 60
    # At 21:00 the burst hour (20:00) is within 3 h, the 08:00 one is not: 2 of 360 + 60.
    evening = T0 + 12 * 3600
    r = exceed_probability(mem, near, evening, 12.0, 615)
    assert r.p_week == pytest.approx(2 / 420)
    # Around midnight too: 23:00 is within 3 h of 01:00.
    from autoscaler.core.risk import _near
    assert _near(23, 1, 3) and not _near(20, 1, 3)


def test_an_unspent_budget_allows_no_more_than_itself_in_requests():
    # The burn measured and unspent: no miss in 100,000 arrivals at the tests' 1% budget is a burn of
    # (0 + 10) / (100,000 + 1,000) / 1% = 0.0099, which lets the chance of an excess take 2 x 1% = 2%.
    # In requests the budget is the budget: 1%. The docstring's moments at a rate of 2/s (6 queued make
    # every arrival miss): reaching 13 on 6 slots, 7 queued: all; on always-on's 18 slots none; added
    # 1 each, held 2 minutes of 11: 12 x 1 x 2 / 11 / 360 = 0.606%; held 4: 1.21% -> hold at 1%
    # (a drain at the 2% a chance may take).
    policy = make_policy(scaling={"target_utilization": 1.0, "scale_down": {
        "min_measured_rises": 0, "excess_minutes": 4.0, "utilization_below": 0.9,
        "stabilization_s": 0, "cooldown_after_scale_up_s": 0, "min_group_uptime_s": 0}})
    z = (13.0 - 5.0) / 6.0 ** 0.5
    mem = Memory(minute_now=(MINUTE, 5.0, 1), surplus_since=T0 - 3600, budget_burn=(0.0, 100_000.0, T0),
                 budget_burn_long=(0.0, 100_000.0, T0),
                 **_reach(*([(0.0, 5.0, 5.0)] * 348 + [(z, 5.0, 13.0)] * 12)))
    sig = signals(g1=(3, 0, 0.2), g2=(2, 0, 0.1), request_rate=2.0)
    d, _ = decide(sig, fleet("ready", "ready", "off"), policy, mem, T0)
    assert d.inputs["expected_misses"]["share"] == pytest.approx(12 * 1 * 4 / 11 / 360, abs=1e-6)
    assert d.action is Action.HOLD and "allows 1% in requests (2% as a chance)" in d.detail, d.detail
    half = make_policy(scaling={"target_utilization": 1.0, "scale_down": {
        "min_measured_rises": 0, "excess_minutes": 2.0, "utilization_below": 0.9,
        "stabilization_s": 0, "cooldown_after_scale_up_s": 0, "min_group_uptime_s": 0}})
    d, _ = decide(sig, fleet("ready", "ready", "off"), half, mem, T0)
    assert d.action is Action.SCALE_DOWN, d.detail
