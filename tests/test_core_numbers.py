"""The core's worked examples as tests with exact values (issue 18, "tests that pin the numbers").

Each rule's docstring does its arithmetic in numbers; here the same numbers are the expected
values, with the arithmetic in a comment. bench/core_mutations.py changes each mechanism by one
point (a constant, a comparison, a window's edge) and checks that a test here fails.

Default fleet: 3 groups, floor 1, ceiling 3, 6 requests per group at target 0.7: 4.2 a group.
"""

from __future__ import annotations

import math

import pytest
from core_helpers import T0, decide, fleet, make_policy, signals

from autoscaler.core import Action, Memory, Reason
from autoscaler.core.bounds import effective_bounds
from autoscaler.core.forecast import lead_time_s, record_demand, record_startup
from autoscaler.core.risk import (
    BURN_HALF_LIFE_S,
    BURN_LONG_HALF_LIFE_MINUTES,
    SKILL_HALF_LIFE_SLOTS,
    burn_changes,
    burn_rate,
    burn_rates,
    exceed_probability,
    lead_minutes,
    record_minute,
    seasonal_weight,
    update_skill,
)
from autoscaler.policy.model import Policy

P = make_policy()
MINUTE = int(T0 // 60)  # T0 is 09:00:00: the first second of a minute
SLOT = int(T0 // 300)
DAY_SLOTS = 288
SETTLED = Memory(surplus_since=T0 - 3600)
ANY_RISK = {"capacity_miss_budget_pct": 100}
THREE_READY = fleet("ready", "ready", "ready")


def _rises(*zs: float) -> dict:
    """Memory fields holding these measured rises (sorted, as decide keeps them)."""
    ordered = tuple(sorted(zs))
    return {"rises_sorted": ordered, "rise_log": tuple((MINUTE - 400 + i, z) for i, z in enumerate(ordered))}


# ------------------------------------------------------------------------- the window of a rise
@pytest.mark.parametrize("lead_s, minutes", [(615, 11), (600, 10), (601, 11), (30, 1), (0, 1)])
def test_lead_minutes(lead_s, minutes):
    # whole minutes covering the lead: 615 / 60 = 10.25 -> 11; 600 / 60 = 10.0 -> 10 (not 11); at least 1
    assert lead_minutes(lead_s) == minutes


def test_the_rise_is_measured_to_the_busiest_minute_within_one_lead_time():
    # Lead 615 s = 11 minutes. Minute 0's mean is (2 + 4) / 2 = 3; minutes 1-10 are 3; minute 11 (the
    # last within one lead time of minute 0) is 7; minute 12 is 15. Minute 0's rise is measured when
    # minute 11 closes: (7 - 3) / sqrt(3 + 1) = 2.0 (the 15 of minute 12 is beyond its lead time).
    # Minute 1's, when minute 12 closes: (15 - 3) / sqrt(4) = 6.0.
    mem = Memory()
    samples = [(0, 2.0), (0, 4.0)] + [(i, 3.0) for i in range(1, 11)] + [(11, 7.0), (12, 15.0), (13, 3.0)]
    for n, (minute, demand) in enumerate(samples):
        mem = record_minute(mem, T0 + 60 * minute + n % 2, demand, 615)
    # (minute, rise, base, reached): the base and the level reached are kept for the mean reversion
    assert mem.rise_log == ((MINUTE, 2.0, 3.0, 7.0), (MINUTE + 1, 6.0, 3.0, 15.0))
    assert mem.rises_sorted == (2.0, 6.0)
    assert mem.rise_reach == ((2.0, 3.0, 7.0), (6.0, 3.0, 15.0))
    # the closed minutes kept: the last ell + 1 = 12 (minutes 1 to 12), as means
    # (index, mean, busiest tick): one sample a minute here, so both are the sample
    assert mem.minute_max[0] == (MINUTE + 1, 3.0, 3.0) and mem.minute_max[-1] == (MINUTE + 12, 15.0, 15.0)
    assert len(mem.minute_max) == 12


def test_a_rise_reaches_halfway_from_a_minutes_mean_to_its_busiest_tick():
    # PEAK_WEIGHT 0.5. Lead 615 s = 11 minutes; minutes 0-10 at 3. Minute 11 has ticks at 3, 3, 3
    # and 11 (a 15-s burst): mean 5, busiest 11 -> reached 5 + 0.5 x (11 - 5) = 8. Minute 0's rise,
    # when minute 11 closes: (8 - 3) / sqrt(3 + 1) = 2.5 (the mean alone: (5 - 3) / 2 = 1.0; the
    # busiest tick alone: (11 - 3) / 2 = 4.0).
    mem = Memory()
    for minute in range(11):
        mem = record_minute(mem, T0 + 60 * minute, 3.0, 615)
    for tick, demand in enumerate((3.0, 3.0, 3.0, 11.0)):
        mem = record_minute(mem, T0 + 60 * 11 + 15 * tick, demand, 615)
    assert mem.minute_now == (MINUTE + 11, 20.0, 4, 11.0)
    mem = record_minute(mem, T0 + 60 * 12, 3.0, 615)
    assert mem.minute_max[-1] == (MINUTE + 11, 5.0, 11.0)
    assert mem.rise_log == ((MINUTE, 2.5, 3.0, 8.0),)


def test_memory_saved_before_the_busiest_tick_was_kept_still_loads():
    # An older ledger's memory: minute_now [index, sum, count], minute_max [index, mean]: the mean
    # stands in for the busiest tick (so its rises are measured as before).
    from autoscaler.service.controller import memory_from_json

    mem = memory_from_json({"minute_now": [MINUTE, 6.0, 2], "minute_max": [[MINUTE - 1, 4.0]]}, P, T0)
    assert mem.minute_now == (MINUTE, 6.0, 2, 3.0) and mem.minute_max == ((MINUTE - 1, 4.0, 4.0),)


def test_recent_rises_are_kept_for_three_hours():
    # RECENT_MINUTES = 180: when minute 0's rise joins (minute 11 closes, lead 615 s: (7 - 3) / 2 =
    # 2.0), a rise measured from minute -180 has left the window and one from minute -179 has not.
    old = ((MINUTE - 180, 5.0), (MINUTE - 179, 4.0))
    mem = Memory(minute_max=tuple((MINUTE + i, 3.0) for i in range(11)), minute_now=(MINUTE + 11, 7.0, 1),
                 rise_log=old, rises_sorted=(4.0, 5.0))
    mem = record_minute(mem, T0 + 60 * 12, 3.0, 615)
    assert mem.rise_log == ((MINUTE - 179, 4.0), (MINUTE, 2.0, 3.0, 7.0))
    assert mem.rises_sorted == (2.0, 4.0)
    # Rises from older memory have no base: the mean reversion is off until they have left.
    assert mem.rise_reach == ()
    # With bases kept, the sorted (rise, base, reached) follow the window too.
    old = ((MINUTE - 180, 5.0, 1.0, 9.0), (MINUTE - 179, 4.0, 1.0, 8.0))
    mem = Memory(minute_max=tuple((MINUTE + i, 3.0) for i in range(11)), minute_now=(MINUTE + 11, 7.0, 1),
                 rise_log=old, rises_sorted=(4.0, 5.0), rise_reach=((4.0, 1.0, 8.0), (5.0, 1.0, 9.0)))
    mem = record_minute(mem, T0 + 60 * 12, 3.0, 615)
    assert mem.rise_reach == ((2.0, 3.0, 7.0), (4.0, 1.0, 8.0)) and mem.rises_sorted == (2.0, 4.0)


# ----------------------------------------------------------------------- the cold-start prior
def test_the_level_is_the_last_closed_minute_or_this_one_when_higher():
    # risk.level_now: the last closed minute's mean 8, this minute so far 2 -> level 8: capacity 14
    # is the prior's 2 sd (z > (14 - 8) / 3 = 2): 2.275%. This minute at 9 -> level 9:
    # z > (14 - 9) / sqrt(10) = 1.58 -> P(Z > (1.58 - 0.5) / 0.75 = 1.44) = 7.47%.
    closed = ((MINUTE - 1, 8.0),)
    r = exceed_probability(Memory(minute_max=closed, minute_now=(MINUTE, 2.0, 1)), P, T0, 14.0, 615)
    assert r.probability == pytest.approx(0.0227501319, rel=1e-8)
    higher = exceed_probability(Memory(minute_max=closed, minute_now=(MINUTE, 9.0, 1)), P, T0, 14.0, 615)
    z = (5 / math.sqrt(10) - 0.5) / 0.75
    assert higher.probability == pytest.approx(0.5 * math.erfc(z / math.sqrt(2)), rel=1e-9)
    assert higher.probability == pytest.approx(0.0747, abs=1e-4)
    # a closed minute that is not the last one (minute -2) is not today's level: this minute's 2
    # -> z > (14 - 2) / sqrt(3) = 6.9: P ~ 0
    stale = exceed_probability(Memory(minute_max=((MINUTE - 2, 8.0),), minute_now=(MINUTE, 2.0, 1)), P, T0, 14.0, 615)
    assert stale.probability < 1e-12


def test_the_cold_start_prior_and_its_blend_with_measured_rises():
    # risk.py: a load at level 8 is expected to reach 8 + 0.5 x sqrt(9) = 9.5 and exceeds
    # 8 + 2 x 3 = 14 with P(Z > (2 - 0.5) / 0.75 = 2 sd) = 2.275%. No measured rise: the prior alone.
    at8 = Memory(minute_now=(MINUTE, 8.0, 1))
    prior = 0.5 * math.erfc(2 / math.sqrt(2))  # 0.0227501
    r = exceed_probability(at8, P, T0, 14.0, 615)
    assert r.probability == pytest.approx(0.0227501319, rel=1e-8) and r.samples == 0
    assert exceed_probability(at8, P, T0, 9.5, 615).probability == pytest.approx(0.5)  # the prior's mean rise
    # 10 measured rises, 5 of them (z 3.0) above the z 2.0 that reaches 14: measured 5 / 10 = 0.5,
    # blended 10 : 20 with the prior: (10 x 0.5 + 20 x 0.02275) / 30 = 0.18183.
    ten = at8.with_(**_rises(*([0.0] * 5 + [3.0] * 5)))
    assert exceed_probability(ten, P, T0, 14.0, 615).probability == pytest.approx((5 + 20 * prior) / 30, rel=1e-9)
    assert (5 + 20 * prior) / 30 == pytest.approx(0.181833, abs=1e-6)
    # 29 measured, none above: (29 x 0 + 1 x 0.02275) / 30 = 0.000758; 30 measured: the prior is gone.
    assert exceed_probability(at8.with_(**_rises(*[0.0] * 29)), P, T0, 14.0, 615).probability == \
        pytest.approx(prior / 30, rel=1e-9)
    assert exceed_probability(at8.with_(**_rises(*[0.0] * 30)), P, T0, 14.0, 615).probability == 0.0


# ------------------------------------------------------------------------- "exceeds" at a tie
def test_a_rise_that_reaches_the_capacity_exactly_does_not_exceed_it():
    # Level 3, capacity 7: exceeds when z > (7 - 3) / sqrt(3 + 1) = 2.0. Two of 40 rises are
    # exactly 2.0: they reach it, they do not exceed it -> 0. Capacity 6.9: z > 1.95 -> 2 / 40 = 5%.
    mem = Memory(minute_now=(MINUTE, 3.0, 1), **_rises(*([0.0] * 38 + [2.0, 2.0])))
    assert exceed_probability(mem, P, T0, 7.0, 615).probability == 0.0
    assert exceed_probability(mem, P, T0, 6.9, 615).probability == pytest.approx(0.05)


@pytest.mark.parametrize(
    "ttft, queue_wait, burning",
    [
        (3.0, 2.0, False),  # TTFT p99 3.0 s = the 3 s target: not a miss
        (3.01, 2.0, True),
        (4.0, 0.5, False),  # queue wait 0.5 s = slo_burn_min_queue_wait_s: not capacity's doing
        (4.0, 0.51, True),
    ],
)
def test_slo_burn_is_strictly_over_its_thresholds(ttft, queue_wait, burning):
    # demand 3 on 2 ready groups (8.4): only the SLO burn can start a group; it has lasted 120 s.
    snap = signals(g1=(2, 0, 0.3), g2=(1, 0, 0.3), ttft=ttft, queue_wait=queue_wait)
    d, mem = decide(snap, fleet("ready", "ready", "off"), P, Memory(slo_miss_since=T0 - 120), T0)
    assert (d.reason is Reason.SLO_BURN) is burning, d.detail
    assert (mem.slo_miss_since == T0 - 120) is burning


def test_the_burn_counts_a_queue_wait_over_its_threshold_not_at_it():
    # 2 requests/s over a 15 s tick = 30 arrivals; queued 3 -> a 1.5 s wait, half the 3 s target:
    # 15 misses once the queue wait at p99 is above 0.5 s; at 0.5 s exactly: none.
    def misses(queue_wait: float) -> float:
        return burn_changes(Memory(), P, T0, 2.0, 3.0, queue_wait)["budget_burn"][0]

    assert (misses(0.5), misses(0.51)) == (0.0, pytest.approx(15.0))


# ------------------------------------------------------------------------ the seasonal skill
def _skill_history(days: dict[int, tuple[float, float]]) -> dict[int, float]:
    # slot SLOT ends at 9, SLOT - 3 (one lead time of 615 s = 3 slots before) was 4; day d earlier
    # the two slots were ``days[d]`` = (slot - 3, slot)
    by_slot = {SLOT - 3: 4.0}
    for day, (before, after) in days.items():
        by_slot[SLOT - 3 - day * DAY_SLOTS], by_slot[SLOT - day * DAY_SLOTS] = before, after
    return by_slot


def test_the_seasonal_skill_update_of_the_docstring():
    # risk.update_skill: lead 615 s = ceil(2.05) = 3 slots; the slot ended at 9; 3 slots before it
    # was 4 (persistence error |4 - 9| = 5); a day earlier those slots were 5 and 10: the seasonal
    # prediction 10 x (4 + 1) / (5 + 1) = 8.33 (error 0.67).
    policy = make_policy(forecast={"enabled": True, "seasonal_days": 1})
    mem = Memory(demand_by_slot=_skill_history({1: (5.0, 10.0)}))
    first = update_skill(mem, policy, SLOT, 9.0, 615).seasonal_skill
    assert first == (pytest.approx(2 / 3), 5.0)  # the first measurement is the errors themselves
    # From errors (1, 1), one half-life (288 slots: a day) of the same errors moves each halfway:
    # 2/3 + (1 - 2/3) x 0.5 = 0.8333 and 5 + (1 - 5) x 0.5 = 3.0; weight 3 / (0.8333 + 3) = 0.7826.
    assert SKILL_HALF_LIFE_SLOTS == 288.0
    mem = mem.with_(seasonal_skill=(1.0, 1.0))
    for _ in range(288):
        mem = update_skill(mem, policy, SLOT, 9.0, 615)
    assert mem.seasonal_skill == (pytest.approx(5 / 6), pytest.approx(3.0))
    assert seasonal_weight(mem) == pytest.approx(3.0 / (5 / 6 + 3.0))


def test_decide_scores_the_seasonal_skill_one_risk_horizon_ahead():
    # The docstring's example through decide: slot SLOT (highest demand 9 so far) closes at the
    # first tick of the next slot, and is scored against the predictions made 615 s = 3 slots
    # before it (the risk's horizon): errors (0.67, 5), as above. (Scored 1 slot ahead, slot
    # SLOT - 1 has no value: nothing would be measured.)
    policy = make_policy(forecast={"enabled": True, "seasonal_days": 1})
    mem = Memory(demand_by_slot=_skill_history({1: (5.0, 10.0)}), slot_now=(SLOT, 9.0))
    now = T0 + 300
    _, mem = decide(signals(at=now, g1=(1, 0, 0.2), g2=(0, 0, 0.1), g3=(0, 0, 0.1)), THREE_READY, policy, mem, now)
    assert mem.seasonal_skill == (pytest.approx(2 / 3), 5.0)
    assert mem.demand_by_slot[SLOT] == 9.0 and mem.slot_now == (SLOT + 1, 1.0)


def test_the_seasonal_prediction_is_the_median_over_earlier_days():
    # Three days: 10 x 5 / 6 = 8.33, 4 x 5 / 5 = 4.0, 20 x 5 / 5 = 20 -> sorted [4, 8.33, 20],
    # median 8.33: error |8.33 - 9| = 0.67 (the mean, 10.8, would be 1.8; the lowest, 4, 5.0).
    policy = make_policy(forecast={"enabled": True, "seasonal_days": 3})
    mem = Memory(demand_by_slot=_skill_history({1: (5.0, 10.0), 2: (4.0, 4.0), 3: (4.0, 20.0)}))
    assert update_skill(mem, policy, SLOT, 9.0, 615).seasonal_skill == (pytest.approx(2 / 3), 5.0)


# --------------------------------------------------------------------- the burn's half-life
def test_the_burn_halves_in_six_hours():
    # 100 misses in 10,000 arrivals; six hours (BURN_HALF_LIFE_S) later, with nothing arriving,
    # both are halved: 50 in 5,000 (the burn itself stays (50 + 10) / (5,000 + 1,000) / 1% = 1.0);
    # three hours later, 1 / sqrt(2) of them.
    assert BURN_HALF_LIFE_S == 21600.0
    mem = Memory(budget_burn=(100.0, 10_000.0, T0), budget_burn_long=(100.0, 10_000.0, T0))
    assert burn_changes(mem, P, T0 + 21600, 0.0, 0.0, None)["budget_burn"] == (50.0, 5000.0, T0 + 21600)
    m, a, _ = burn_changes(mem, P, T0 + 10800, 0.0, 0.0, None)["budget_burn"]
    assert (m, a) == (pytest.approx(100 / math.sqrt(2)), pytest.approx(10_000 / math.sqrt(2)))
    assert burn_rate(Memory(budget_burn=(50.0, 5000.0, T0)), P) == pytest.approx(1.0)
    # A clock that steps back decays nothing (and with nothing new, changes nothing).
    assert burn_changes(mem, P, T0 - 60, 0.0, 0.0, None) == {}


# ---------------------------------------------------------------- the risk's horizon in decide
def _seasonal_memory(skill: tuple[float, float] | None) -> Memory:
    """Today at level 3 (this minute so far: one sample of 3) with 40 measured rises of 0; seven
    earlier days at level 3 around this time of day, with a burst of 20 one slot after it on day 2."""
    by_slot = {}
    for day in range(1, 8):
        c = SLOT - day * DAY_SLOTS
        for s in range(c - 10, c + 11):
            by_slot[s] = 3.0
        if day == 2:
            by_slot[c + 1] = 20.0
    return Memory(surplus_since=T0 - 3600, minute_now=(MINUTE, 3.0, 1), demand_by_slot=by_slot,
                  seasonal_skill=skill, **_rises(*[0.0] * 40))


SEASONAL = make_policy(forecast={"enabled": True, "seasonal_days": 7})
DEMAND3 = signals(g1=(1, 0, 0.2), g2=(1, 0, 0.1), g3=(1, 0, 0.1))


def test_the_risk_looks_one_start_up_and_one_tick_ahead():
    # The risk horizon is the lead time (startup_expected_s 600 s) + one tick (15 s) = 615 s.
    # (1) Rises: minute -12 at 3, minutes -11..-2 at 3, minute -1 at 7. The tick at T0 closes
    # minute -1; lead_minutes(615) = 11, so the rise it completes is minute -12's: (7 - 3) / 2 = 2.0
    # (at 600 s it would be minute -11's).
    closed = tuple((MINUTE - k, 3.0) for k in range(12, 1, -1))
    mem = Memory(minute_max=closed, minute_now=(MINUTE - 1, 7.0, 1))
    d, mem = decide(DEMAND3, THREE_READY, P, mem, T0)
    assert d.inputs["lead_time_s"] == 600.0 and mem.rise_log == ((MINUTE - 12, 2.0, 3.0, 7.0),)
    # (2) Earlier days: 615 s reaches ceil(615 / 300) = 3 slots ahead, so the burst one slot after
    # this time of day lies ahead of 3 of day 2's 13 moments (2 at 600 s). Capacity on 2 groups
    # 8.4: a moment exceeds when its growth > (8.4 + 1) / (3 + 1) = 2.35; the burst's is
    # (20 + 1) / (3 + 1) = 5.25. P_seasonal = (3 + P_recent 0) / (91 + 1) = 3.26%.
    d, _ = decide(DEMAND3, THREE_READY, SEASONAL, _seasonal_memory((1.0, 1.0)), T0)
    assert d.inputs["risk"]["p_seasonal"] == round(3 / 92, 5), d.detail
    assert "within 615 s" in d.detail


# ------------------------------------------------------------- the seasonal share in the gate
def test_the_seasonal_share_blends_by_its_weight_and_never_lowers_the_risk():
    # Level 3, capacity 6. Recent: 1 of 40 rises (z 3.0) exceeds z > (6 - 3) / 2 = 1.5 -> 2.5%.
    # Seasonal: growth > 7 / 4 = 1.75: 3 of 91 moments, + the pseudo-moment at 2.5%:
    # (3 + 0.025) / 92 = 3.29%. Skill (1, 3): weight 3 / (1 + 3) = 0.75.
    # P = 0.25 x 2.5% + 0.75 x 3.29% = 0.625% + 2.47% = 3.09%.
    mem = _seasonal_memory((1.0, 3.0)).with_(**_rises(*([0.0] * 39 + [3.0])))
    r = exceed_probability(mem, SEASONAL, T0, 6.0, 615)
    assert (r.p_recent, r.seasonal_weight) == (pytest.approx(0.025), 0.75)
    assert r.p_seasonal == pytest.approx(3.025 / 92)
    assert r.probability == pytest.approx(0.25 * 0.025 + 0.75 * 3.025 / 92)
    assert r.probability == pytest.approx(0.03091, abs=1e-5)
    # Recent: 4 of 40 exceed -> 10%; seasonal (3 + 0.1) / 92 = 3.37%, lower. The blend would say
    # 0.25 x 10% + 0.75 x 3.37% = 5.03%: a calm history at this time of day halving what the last
    # hours measured. It does not: P = 10% (the seasonal share only raises the risk).
    mem = _seasonal_memory((1.0, 3.0)).with_(**_rises(*([0.0] * 36 + [3.0] * 4)))
    r = exceed_probability(mem, SEASONAL, T0, 6.0, 615)
    assert r.p_seasonal == pytest.approx(3.1 / 92)
    assert r.probability == pytest.approx(0.1)


def test_the_seasonal_share_can_hold_a_drain_the_recent_rises_allow():
    # Demand 3 on 3 groups, 2 after a drain: 3 / 12 = 0.25 utilisation fits; no recent rise reaches
    # 8.4 (P_recent 0). With the seasonal share trusted at weight 0.5: P = 0.5 x 3 / 92 = 1.63% >
    # the 1% budget -> keep 3 groups. Unmeasured skill (weight 0): P = 0 -> drain.
    d, _ = decide(DEMAND3, THREE_READY, SEASONAL, _seasonal_memory((1.0, 1.0)), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.STEADY), d.detail
    assert d.inputs["risk"]["probability"] == round(0.5 * 3 / 92, 5)
    d, _ = decide(DEMAND3, THREE_READY, SEASONAL, _seasonal_memory(None), T0)
    assert (d.action, d.reason) == (Action.SCALE_DOWN, Reason.SURPLUS), d.detail
    assert d.inputs["risk"]["probability"] == 0.0


def test_a_trusted_seasonal_forecast_counts_in_the_cap_a_trend_does_not():
    # The risk allows anything here (budget 100%): only the utilisation cap 0.55 decides.
    policy = make_policy(slo=ANY_RISK, forecast={"enabled": True, "seasonal_days": 7, "seasonal_statistic": "peak"})
    low = signals(g1=(1, 0, 0.2), g2=(0, 0, 0.1), g3=(0, 0, 0.1))
    # Seasonal 'peak': yesterday's busiest slot within the 600 s horizon was 8 -> forecast 8, basis
    # seasonal (skill (1, 3): trusted). On 2 groups 8 / 12 = 0.67 >= 0.55 -> keep 3.
    hist = {SLOT - DAY_SLOTS + 1: 8.0}
    d, _ = decide(low, THREE_READY, policy, SETTLED.with_(demand_by_slot=hist, seasonal_skill=(1.0, 3.0)), T0)
    assert (d.action, d.reason, d.inputs["forecast_basis"]) == (Action.HOLD, Reason.STEADY, "seasonal"), d.detail
    assert d.inputs["utilization_after_scale_down"] == pytest.approx(8 / 12, abs=1e-4)
    # A trend to 3.6 + 600 x 3.6 / 585 = 7.29 (the clean ramp of test_trend_projects_the_whole_horizon)
    # needs ceil(7.29 / 4.2) = 2 <= 3 groups: no scale-up, and, a point forecast for scale-ups
    # only, no part in the cap: 3.6 / 12 = 0.3 -> drain.
    ramp = tuple((T0 - 585 + 15 * i, 3.6 * i / 39) for i in range(39))
    at = signals(g1=(1.2, 0, 0.2), g2=(1.2, 0, 0.1), g3=(1.2, 0, 0.1))
    d, _ = decide(at, THREE_READY, policy, SETTLED.with_(demand_samples=ramp), T0)
    assert (d.action, d.inputs["forecast_basis"]) == (Action.SCALE_DOWN, "trend"), d.detail
    assert d.inputs["utilization_after_scale_down"] == pytest.approx(0.3)


def test_the_seasonal_forecast_is_trusted_from_a_weight_of_one_half():
    # forecast.SEASONAL_TRUST = 0.5: skill (1, 1) -> weight 1 / (1 + 1) = 0.5 -> trusted: yesterday
    # rose from 2 to 10 within the horizon -> 2 + 8 = 10 -> ceil(10 / 4.2) = 3 groups. Skill
    # (1.1, 1): weight 1 / 2.1 = 0.476 -> not trusted: the current 2 fits one group.
    policy = make_policy(forecast={"enabled": True, "seasonal_days": 7})
    hist = {SLOT - DAY_SLOTS: 2.0, SLOT - DAY_SLOTS + 1: 6.0, SLOT - DAY_SLOTS + 2: 10.0}
    one = fleet("ready", "off", "off")
    d, _ = decide(signals(g1=(2, 0, 0.2)), one, policy, Memory(demand_by_slot=hist, seasonal_skill=(1.0, 1.0)), T0)
    assert (d.action, d.reason, d.target_groups, d.inputs["forecast_peak"]) == (
        Action.SCALE_UP, Reason.FORECAST_HIGH, 3, 10.0), d.detail
    d, _ = decide(signals(g1=(2, 0, 0.2)), one, policy, Memory(demand_by_slot=hist, seasonal_skill=(1.1, 1.0)), T0)
    assert (d.action, d.inputs["forecast_basis"]) == (Action.HOLD, "current"), d.detail


def test_the_seasonal_history_keeps_one_day_more_than_it_reads():
    # seasonal_days 7: the moments of day 7 reach 30 minutes (and a slot) before this time of day
    # 7 days ago, so the history keeps 7 + 1 days. When slot SLOT closes (a sample in SLOT + 1),
    # slots from SLOT + 1 - 8 x 288 = SLOT - 2303 on stay; SLOT - 2304 goes.
    policy = make_policy(forecast={"enabled": True, "seasonal_days": 7})
    mem = Memory(demand_by_slot={SLOT - 2304: 1.0, SLOT - 2303: 2.0, SLOT - 1: 3.0}, slot_now=(SLOT, 4.0))
    mem = record_demand(mem, policy, T0 + 300, 1.0)
    assert dict(mem.demand_by_slot) == {SLOT - 2303: 2.0, SLOT - 1: 3.0, SLOT: 4.0}


def test_the_seasonal_forecast_covers_every_slot_the_horizon_touches():
    # horizon_s 450 s reaches ceil(450 / 300) = 2 slots ahead: yesterday's 9 in the second slot
    # after this time of day counts ('peak', one day: 9) -> ceil(9 / 4.2) = 3 groups.
    policy = make_policy(forecast={"enabled": True, "seasonal_days": 7, "horizon_s": 450,
                                   "seasonal_statistic": "peak"})
    hist = {SLOT - DAY_SLOTS + 1: 2.0, SLOT - DAY_SLOTS + 2: 9.0}
    d, _ = decide(signals(g1=(2, 0, 0.2)), fleet("ready", "off", "off"), policy,
                  Memory(demand_by_slot=hist, seasonal_skill=(1.0, 3.0)), T0)
    assert (d.action, d.reason, d.target_groups, d.inputs["forecast_peak"]) == (
        Action.SCALE_UP, Reason.FORECAST_HIGH, 3, 9.0), d.detail


def test_the_lead_time_is_the_95th_percentile_of_the_start_ups_not_the_slowest():
    # 20 start-ups of 510, 520, ..., 700 s: nearest-rank p95 = the ceil(0.95 x 20) = 19th smallest =
    # 690 s (the slowest, 700 s, is the 20th); the risk horizon is 690 + 15 = 705 s.
    mem = Memory()
    for s in range(510, 701, 10):
        mem = record_startup(mem, s)
    assert lead_time_s(P, mem) == (690.0, "p95 of 20 measured start-ups")
    d, _ = decide(DEMAND3, THREE_READY, P, mem.with_(surplus_since=T0 - 3600), T0)
    assert "within 705 s" in d.detail, d.detail


@pytest.mark.parametrize(
    "max_step, load, groups, limited",
    [
        # 6 + 3 = 9 -> ceil(9 / 4.2) = 3 groups: +2 from 1, within the +2 a decision: no limit said
        (2, (6, 3, 0.9), ("g2", "g3"), None),
        # the same at +1 a decision: 2, and the detail says why not 3
        (1, (6, 3, 0.9), ("g2",), " (limited to 2: ceiling 3, at most +1 per decision)"),
        # 6 + 20 = 26 -> 7 groups: the ceiling of 3 limits it
        (2, (6, 20, 0.9), ("g2", "g3"), " (limited to 3: ceiling 3, at most +2 per decision)"),
    ],
)
def test_a_scale_up_says_when_it_is_limited_and_only_then(max_step, load, groups, limited):
    policy = make_policy(scaling={"scale_up": {"max_groups_per_decision": max_step}})
    d, _ = decide(signals(g1=load), fleet("ready", "off", "off"), policy, Memory(), T0)
    assert (d.action, d.groups) == (Action.SCALE_UP, groups)
    if limited is None:
        assert "limited" not in d.detail, d.detail
    else:
        assert limited + "; starting" in d.detail, d.detail


def test_a_forecast_that_only_repeats_the_current_demand_starts_nothing():
    # Utilisation scale-ups switched off; no history, no trend: the forecast is the current demand
    # 9 (basis current), which would need ceil(9 / 4.2) = 3 groups, but it is no forecast: hold.
    policy = make_policy(scaling={"scale_up": {"on_utilization": False, "queued_per_group_above": None}},
                         forecast={"enabled": True})
    d, _ = decide(signals(g1=(6, 3, 0.9)), fleet("ready", "off", "off"), policy, Memory(), T0)
    assert (d.action, d.inputs["forecast_basis"], d.inputs["forecast_peak"]) == (Action.HOLD, "current", 9.0), d.detail


# ------------------------------------------------------------------ scale-down: spares, victim, budget
def test_spare_groups_are_kept_out_of_the_remaining_capacity():
    # Spare 1, demand 4 on 3 groups, any risk allowed: remaining = 3 - 1 - 1 spare = 1 group:
    # 4 / (1 x 6) = 0.67 >= 0.55 -> keep. Without the spare: 4 / (2 x 6) = 0.33 -> drain.
    load = signals(g1=(2, 0, 0.2), g2=(1, 0, 0.2), g3=(1, 0, 0.2))
    spare = make_policy(scaling={"spare_groups": 1}, slo=ANY_RISK)
    d, _ = decide(load, THREE_READY, spare, SETTLED, T0)
    assert (d.action, d.reason, d.inputs["utilization_after_scale_down"]) == (Action.HOLD, Reason.STEADY, 0.6667)
    d, _ = decide(load, THREE_READY, make_policy(slo=ANY_RISK), SETTLED, T0)
    assert (d.action, d.inputs["utilization_after_scale_down"]) == (Action.SCALE_DOWN, 0.3333)


def test_the_victims_load_counts_queued_requests():
    # KV tie at 0.2: g1 has 1 running + 0 queued = 1, g2 0 running + 2 queued = 2, g3 1 + 1 = 2
    # -> g1 (the least load), though g2 runs nothing.
    d, _ = decide(signals(g1=(1, 0, 0.2), g2=(0, 2, 0.2), g3=(1, 1, 0.2)), THREE_READY, make_policy(slo=ANY_RISK),
                  SETTLED, T0)
    assert (d.action, d.group) == (Action.SCALE_DOWN, "g1"), d.detail


def test_a_disruption_an_hour_old_is_forgotten():
    # Budget 2 an hour; disruptions exactly 3,600 s and 600 s ago: the first has left the hour
    # (now - t >= 3,600 drops it): 1 < 2 -> drain, and the memory keeps (T0 - 600, T0).
    policy = make_policy(scaling={"disruption_budget_per_hour": 2})
    low = signals(g1=(1, 0, 0.2), g2=(0, 0, 0.1), g3=(0, 0, 0.1))
    d, mem = decide(low, THREE_READY, policy, SETTLED.with_(disruptions=(T0 - 3600, T0 - 600)), T0)
    assert d.action is Action.SCALE_DOWN, d.detail
    assert mem.disruptions == (T0 - 600, T0)


# ------------------------------------------------------------------------- bounds and the pin
FOUR = 4  # groups defined: a ceiling of 3 below the group count


def test_the_pin_is_clamped_to_the_ceiling():
    # Four groups, ceiling 3, a pin of 4: min(max(4, floor 1), ceiling 3) = 3.
    policy = make_policy(FOUR, schedules={"pin": {"groups": 4, "until": "2030-01-01T00:00:00Z"}})
    b = effective_bounds(policy, T0)
    assert (b.floor, b.ceiling, b.pinned, b.floor_source) == (3, 3, True, "pin")
    # 2 active -> start 1 (to 3, not 2 to 4); 4 active -> drain one (pin).
    d, _ = decide(signals(g1=(0, 0, 0.1), g2=(0, 0, 0.1)), fleet("ready", "ready", "off", "off"), policy, Memory(), T0)
    assert (d.action, d.reason, d.groups, d.target_groups) == (Action.SCALE_UP, Reason.PIN, ("g3",), 3)
    four = signals(g1=(0, 0, 0.4), g2=(0, 0, 0.3), g3=(0, 0, 0.2), g4=(0, 0, 0.1))
    d, _ = decide(four, fleet("ready", "ready", "ready", "ready"), policy, Memory(), T0)
    assert (d.action, d.reason, d.group, d.target_groups) == (Action.SCALE_DOWN, Reason.PIN, "g4", 3)


BUSINESS = {"name": "business", "days": ["mon"], "start": "08:00", "end": "18:00"}


@pytest.mark.parametrize(
    "fleet_floor, window, bounds",
    [
        # a cap equal to the floor is not over it: floor 2, ceiling 2, floor_over_cap False
        (2, {"ceiling_groups": 2}, (2, 2, "fleet", "window business", False)),
        # a cap below the floor: the floor wins and says so
        (2, {"ceiling_groups": 1}, (2, 2, "fleet", "fleet, over the cap of 1 (window business)", True)),
        # a window floor equal to the fleet's, a cap equal to the fleet ceiling: neither changes a source
        (2, {"floor_groups": 2, "ceiling_groups": 3}, (2, 3, "fleet", "fleet", False)),
        (1, {"floor_groups": 2}, (2, 3, "window business", "fleet", False)),
    ],
)
def test_effective_bounds_table(fleet_floor, window, bounds):
    policy = make_policy(fleet={"floor_groups": fleet_floor}, schedules={"windows": [{**BUSINESS, **window}]})
    b = effective_bounds(policy, T0)  # Monday 09:00: inside the window
    assert (b.floor, b.ceiling, b.floor_source, b.ceiling_source, b.floor_over_cap) == bounds


@pytest.mark.parametrize(
    "at, floor",
    [
        ("2026-01-09T21:59:59Z", 1),  # Friday before 22:00
        ("2026-01-09T22:00:00Z", 3),  # the start is inside
        ("2026-01-10T05:59:59Z", 3),  # Saturday morning: the window wraps past midnight
        ("2026-01-10T06:00:00Z", 1),  # the end is outside
        ("2026-01-11T03:00:00Z", 1),  # Sunday morning follows Saturday, not a listed day
    ],
)
def test_a_window_past_midnight_starts_inside_and_ends_outside(at, floor):
    from autoscaler.core.types import parse_time

    policy = make_policy(schedules={"windows": [
        {"name": "night", "days": ["fri"], "start": "22:00", "end": "06:00", "floor_groups": 3}]})
    assert effective_bounds(policy, parse_time(at)).floor == floor


def test_a_cap_equal_to_the_floor_holds_at_the_ceiling_or_the_floor_not_over_the_cap():
    policy = make_policy(fleet={"floor_groups": 2}, schedules={"windows": [{**BUSINESS, "ceiling_groups": 2}]})
    two = fleet("ready", "ready", "off")
    # demand 12 wants ceil(12 / 4.2) = 3 groups: at the ceiling of 2 (the cap), not floor_over_cap
    d, _ = decide(signals(g1=(6, 0, 0.5), g2=(6, 0, 0.5)), two, policy, Memory(), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.AT_CEILING), d.detail
    assert d.detail.endswith("but already at ceiling 2 (window business)")
    # idle: at the floor of 2
    d, _ = decide(signals(g1=(0, 0, 0.1), g2=(0, 0, 0.1)), two, policy, SETTLED, T0)
    assert (d.action, d.reason, d.inputs["floor_over_cap"]) == (Action.HOLD, Reason.AT_FLOOR, False), d.detail


# --------------------------------------------------------------------- the victim above the cap
@pytest.mark.parametrize(
    "loads, sinces, victim",
    [
        # least KV, whatever the policy order: g2 (0.1) before g3 (0.5)
        ({"g1": (1, 0, 0.3), "g2": (1, 0, 0.1), "g3": (1, 0, 0.5)}, {}, "g2"),
        # ... even a group ready for 60 s: the minimum uptime protects from surplus drains, not the cap
        ({"g1": (1, 0, 0.3), "g2": (1, 0, 0.1), "g3": (1, 0, 0.5)}, {"g2": T0 - 60}, "g2"),
        # a KV tie -> fewest running + queued (g1: 0 + 0)
        ({"g1": (0, 0, 0.3), "g2": (2, 1, 0.3), "g3": (1, 0, 0.3)}, {}, "g1"),
        # busy and full: still one group goes (the cap is an invariant), the least-KV one
        ({"g1": (6, 9, 0.9), "g2": (6, 9, 0.95), "g3": (6, 9, 0.85)}, {}, "g3"),
    ],
)
def test_the_victim_above_the_ceiling(loads, sinces, victim):
    policy = make_policy(schedules={"windows": [{**BUSINESS, "ceiling_groups": 2}]})
    d, _ = decide(signals(**loads), fleet("ready", "ready", "ready", sinces=sinces), policy, Memory(), T0)
    assert (d.action, d.reason, d.group, d.target_groups) == (Action.SCALE_DOWN, Reason.ABOVE_CEILING, victim, 2)


# ----------------------------------------------------------- the core's minute (forecast.minute_s)
def test_a_compressed_minute_measures_rises_at_its_own_scale():
    # forecast.minute_s 2 (the demo): lead 9 s is ceil(9 / 2) = 5 minutes of 2 s. Minute 0 (2 s) at
    # 3, minutes 1-4 at 3, minute 5 at 7: when minute 5 closes (at 12 s), minute 0's rise is
    # (7 - 3) / sqrt(4) = 2.0. At the default 60 s minute the same 12 s are one minute: no rise.
    assert lead_minutes(9, 2) == 5 and lead_minutes(9) == 1
    fast, slow = Memory(), Memory()
    for second in range(0, 14):
        demand = 7.0 if 10 <= second < 12 else 3.0
        fast = record_minute(fast, T0 + second, demand, 9, 2)
        slow = record_minute(slow, T0 + second, demand, 9)
    assert fast.rise_log == ((int(T0 // 2), 2.0, 3.0, 7.0),) and fast.rises_sorted == (2.0,)
    assert slow.rise_log == () and slow.minute_now[0] == MINUTE


def test_a_longer_minute_starts_the_minute_history_afresh():
    # minute_s 2 -> 60 (a policy edit): the minute index falls from T0 // 2 to T0 // 60; the rises
    # measured in the old unit are dropped, and the new minute starts with this sample.
    mem = Memory(minute_max=((int(T0 // 2) - 1, 3.0),), minute_now=(int(T0 // 2), 3.0, 1),
                 rise_log=((int(T0 // 2) - 6, 1.0),), rises_sorted=(1.0,))
    mem = record_minute(mem, T0 + 1, 5.0, 615)
    assert (mem.minute_now, mem.minute_max, mem.rise_log, mem.rises_sorted) == ((MINUTE, 5.0, 1, 5.0), (), (), ())


def test_the_burn_half_life_is_360_of_the_cores_minutes():
    # minute_s 2: 360 x 2 = 720 s halves 100 misses in 10,000 arrivals (at 60 s it takes six hours).
    policy = make_policy(forecast={"minute_s": 2}, scaling={"tick_interval_s": 1})
    mem = Memory(budget_burn=(100.0, 10_000.0, T0), budget_burn_long=(100.0, 10_000.0, T0))
    out = burn_changes(mem, policy, T0 + 720, 0.0, 0.0, None)
    assert out["budget_burn"] == (50.0, 5000.0, T0 + 720)
    # and the three days' 4,320 x 2 = 8,640 s: 720 s of it is 1/12 of a half-life
    assert out["budget_burn_long"][:2] == pytest.approx((100.0 * 0.5 ** (1 / 12), 10_000.0 * 0.5 ** (1 / 12)))


def test_a_minute_shorter_than_a_tick_is_refused():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"forecast.minute_s.10 s is shorter than scaling.tick_interval_s \(15 s\)"):
        make_policy(forecast={"minute_s": 10})
    assert make_policy(forecast={"minute_s": 15}).forecast.minute_s == 15


# ------------------------------------------------------- the cold start: no drain on the prior alone
@pytest.mark.parametrize("measured, drains", [(0, False), (29, False), (30, True)])
def test_a_drain_waits_for_thirty_measured_rises(measured, drains):
    # Demand 3 on 3 ready groups, any risk allowed: 2 groups carry it (3 / 12 = 0.25 < 0.55). With the
    # default scale_down.min_measured_rises 30, 29 measured rises of z = 0 (and the prior for the
    # rest) hold; the 30th lets the drain through.
    policy = make_policy(slo=ANY_RISK, scaling={"scale_down": {"min_measured_rises": 30}})
    mem = SETTLED.with_(**_rises(*([0.0] * measured))) if measured else SETTLED
    d, _ = decide(signals(g1=(1, 0, 0.2), g2=(1, 0, 0.2), g3=(1, 0, 0.2)), THREE_READY, policy, mem, T0)
    assert (d.action is Action.SCALE_DOWN) is drains, d.detail
    if not drains:
        assert d.reason is Reason.STEADY
        assert d.detail.startswith(f"only {measured} of 30 minutes of rises measured: no drain on the prior alone; ")
    assert Policy.model_validate({"fleet": P.fleet.model_dump()}).scaling.scale_down.min_measured_rises == 30


# ------------------------------------------------------------------ a burning budget buys headroom
def _burning(burn: float) -> Memory:
    """SETTLED with a burn of ``burn`` at budget 1%: (m + 10) / (99,000 + 1,000) / 1% = burn."""
    return SETTLED.with_(budget_burn=(burn * 1000.0 - 10.0, 99_000.0, T0))


def test_the_long_burn_halves_in_three_days_and_counts_the_same_misses():
    # 100 misses in 10,000 arrivals in both memories; three days (4,320 minutes of 60 s) later,
    # with nothing arriving, the long one is halved and the six hours' one is 2^-12 of itself.
    # A tick's misses and arrivals go into both: queued 3 at 2 requests/s is a 1.5 s wait against
    # the 3 s target, half the tick's 30 arrivals.
    assert BURN_LONG_HALF_LIFE_MINUTES == 4320.0
    mem = Memory(budget_burn=(100.0, 10_000.0, T0), budget_burn_long=(100.0, 10_000.0, T0))
    out = burn_changes(mem, P, T0 + 3 * 86400, 0.0, 0.0, None)
    assert out["budget_burn_long"] == (50.0, 5000.0, T0 + 3 * 86400)
    assert out["budget_burn"][:2] == pytest.approx((100.0 / 4096, 10_000.0 / 4096))
    tick = burn_changes(Memory(), P, T0, 2.0, 3.0, 4.0)
    assert tick["budget_burn"] == tick["budget_burn_long"] == (15.0, 30.0, T0)
    # Memory saved before the long burn was kept: it starts from this tick, the short one goes on.
    old = burn_changes(Memory(budget_burn=(100.0, 10_000.0, T0)), P, T0 + 15, 2.0, 3.0, 4.0)
    assert old["budget_burn_long"] == (15.0, 30.0, T0 + 15)


def test_the_burn_is_the_higher_of_six_hours_and_three_days():
    # Budget 1% (prior 10 misses in 1,000 arrivals). Six hours: 0 misses in 9,000 arrivals ->
    # 10 / 10,000 / 1% = 0.1. Three days: 1,190 misses in 79,000 -> 1,200 / 80,000 / 1% = 1.5.
    mem = Memory(budget_burn=(0.0, 9_000.0, T0), budget_burn_long=(1190.0, 79_000.0, T0))
    assert burn_rates(mem, P) == (pytest.approx(0.1), pytest.approx(1.5))
    assert burn_rate(mem, P) == pytest.approx(1.5)
    assert burn_rate(mem.with_(budget_burn_long=None), P) == pytest.approx(0.1)
    assert burn_rate(mem.with_(budget_burn=None), P) == pytest.approx(1.5)
    # the other way round, the six hours' counts
    assert burn_rate(Memory(budget_burn=(1190.0, 79_000.0, T0), budget_burn_long=(0.0, 9_000.0, T0)),
                     P) == pytest.approx(1.5)


def test_a_budget_overspent_over_days_starts_a_group_the_six_hours_would_not():
    # The worked example of a burning budget (demand 6 on 2 ready groups at 4.2 a group), with the
    # six hours unspent (burn 0.1) and the three days burning 1.5x: a group counts for 2.8 and
    # ceil(6 / 2.8) = 3 start g3 before anything queues; with the six hours alone, 2 are enough.
    load = signals(g1=(3, 0, 0.5), g2=(3, 0, 0.5))
    two = fleet("ready", "ready", "off")
    calm = SETTLED.with_(budget_burn=(0.0, 9_000.0, T0))
    d, _ = decide(load, two, P, calm, T0)
    assert (d.action, d.inputs["headroom"], d.inputs["budget_burn_long"]) == (Action.HOLD, 1.0, None), d.detail
    d, _ = decide(load, two, P, calm.with_(budget_burn_long=(1190.0, 79_000.0, T0)), T0)
    assert (d.action, d.reason, d.target_groups) == (Action.SCALE_UP, Reason.UTILIZATION_HIGH, 3), d.detail
    assert (d.inputs["budget_burn"], d.inputs["budget_burn_long"], d.inputs["headroom"]) == (1.5, 1.5, 1.5)


def test_a_drain_charges_its_session_moves_to_both_burns():
    from autoscaler.core.risk import charged_burn

    mem = Memory(budget_burn=(10.0, 1000.0, T0), budget_burn_long=(40.0, 9000.0, T0 - 60))
    assert charged_burn(mem, 50.0, T0 + 15) == {"budget_burn": (60.0, 1000.0, T0), "budget_burn_long": (90.0, 9000.0, T0 - 60)}
    assert charged_burn(Memory(), 50.0, T0) == {"budget_burn": (50.0, 0.0, T0), "budget_burn_long": (50.0, 0.0, T0)}


def test_headroom_is_the_burn_between_one_and_twice():
    from autoscaler.core.risk import headroom

    assert [headroom(b) for b in (None, 0.3, 1.0, 1.5, 2.0, 6.0)] == [1.0, 1.0, 1.0, 1.5, 2.0, 2.0]
    assert burn_rate(_burning(1.5), P) == pytest.approx(1.5)


def test_a_burning_budget_starts_a_group_before_requests_queue():
    # Demand 6 on 2 ready groups at 4.2 a group: ceil(6 / 4.2) = 2, enough. Burning 1.5x, a group
    # counts for 4.2 / 1.5 = 2.8: ceil(6 / 2.8) = ceil(2.14) = 3 -> start g3 before anything queues.
    load = signals(g1=(3, 0, 0.5), g2=(3, 0, 0.5))
    two = fleet("ready", "ready", "off")
    d, _ = decide(load, two, P, _burning(0.5), T0)
    assert (d.action, d.inputs["headroom"]) == (Action.HOLD, 1.0), d.detail
    d, _ = decide(load, two, P, _burning(1.5), T0)
    assert (d.action, d.reason, d.target_groups) == (Action.SCALE_UP, Reason.UTILIZATION_HIGH, 3), d.detail
    assert d.inputs["headroom"] == 1.5 and d.inputs["requests_per_group_at_target"] == 2.8
    assert "2 groups x 2.80 = 5.60 (the budget burns 1.50x: 4.20 / 1.50 a group" in d.detail


def test_a_burning_budget_needs_more_room_for_a_drain():
    # Demand 4 on 3 groups, the measured rises all flat (P = 0 at any capacity above today's level):
    # on 2 groups 4 / 12 = 0.33 < the cap 0.55 -> drain. Burning 2x: 0.33 x 2 = 0.67 >= 0.55 -> keep
    # 3 groups (the scale-up point moved by the same factor: the two never cross).
    flat = {"rises_sorted": (0.0,) * 40, "rise_reach": ((0.0, 4.0, 4.0),) * 40}
    load = signals(g1=(2, 0, 0.2), g2=(1, 0, 0.2), g3=(1, 0, 0.2))
    d, _ = decide(load, THREE_READY, P, _burning(0.5).with_(**flat), T0)
    assert (d.action, d.inputs["utilization_after_scale_down"]) == (Action.SCALE_DOWN, 0.3333), d.detail
    d, _ = decide(load, THREE_READY, P, _burning(2.0).with_(**flat), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.STEADY), d.detail
    assert "(cap 0.55 / 2.00: the budget burns 2.00x)" in d.detail


def test_a_drain_leaves_the_headroom_the_burn_after_it_asks_for():
    # Burning 0.5x, with the previous drain's watch still open: 1,502 of 2,000 first tokens over the
    # target against a baseline of 0 -> 1,502 - 0 - 2 x 1 = 1,500 session-move misses, which this
    # drain would charge: (490 + 1,500 + 10) / 100,000 / 1% = 2.0. Demand 5 on 3 groups: 5 / 12 =
    # 0.42 fits the cap 0.55 at headroom 1, but not at the 2 the drain leaves (0.83): judged on the
    # burn before it, the next tick's scale-up (5 > 2 x 2.1) would undo the drain at the same demand.
    flat = {"rises_sorted": (0.0,) * 40, "rise_reach": ((0.0, 5.0, 5.0),) * 40}
    load = signals(g1=(2, 0, 0.2), g2=(2, 0, 0.2), g3=(1, 0, 0.2))
    d, _ = decide(load, THREE_READY, P, _burning(0.5).with_(**flat), T0)
    assert d.action is Action.SCALE_DOWN, d.detail
    watching = _burning(0.5).with_(drain_watch=(T0 - 300, 0.0, 1502.0, 2000.0), **flat)
    d, _ = decide(load, THREE_READY, P, watching, T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.STEADY), d.detail
    assert "(cap 0.55 / 2.00: the budget burns 2.00x)" in d.detail
