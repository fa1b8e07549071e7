"""The cold start's evidence at tick resolution, and the mean reversion of a rise (issue 18), with
the worked examples of core/risk.py as exact numbers."""

from __future__ import annotations

import math

import pytest
from core_helpers import T0, decide, fleet, make_policy, signals

from autoscaler.core import Action, Memory, Reason
from autoscaler.core.risk import PRIOR_RISES, exceed_probability, record_minute, tick_rise_changes

P = make_policy(scaling={"scale_down": {"tick_rises": True}})
MINUTE = int(T0 // 60)


def _ticks(demands: dict[int, float], count: int, default: float = 3.0):
    """(time, demand) of ``count`` ticks 15 s apart from T0; tick k has demands.get(k, default)."""
    return [(T0 + 15 * k, demands.get(k, default)) for k in range(count)]


def _fold(samples, memory: Memory | None = None) -> Memory:
    mem = memory or Memory()
    for t, d in samples:
        mem = mem.with_(**tick_rise_changes(mem, t, d, 615))
    return mem


# ------------------------------------------------------------------- rises at tick resolution
def test_a_rise_comes_every_tick_measured_as_the_minutes_measure_it():
    # Lead 615 s = 11 minutes. Ticks at 3, one at 11 (tick 46, T0 + 690 s). The first rise is measured
    # at T0 + 720 s: base (T0, T0 + 60] = 3, 3, 3, 3; the minute (T0 + 660, T0 + 720] holds 3, 11, 3,
    # 3: mean 5, busiest 11, reached 5 + 0.5 x (11 - 5) = 8: (8 - 3) / sqrt(4) = 2.5.
    mem = _fold(_ticks({46: 11.0}, 48))
    assert mem.tick_rises == ()  # T0 + 705 s: the ticks do not reach back a lead time and a minute yet
    mem = _fold(_ticks({46: 11.0}, 49)[48:], mem)
    assert mem.tick_rises == ((2.5, 3.0, 8.0),)
    # A tick later the minutes start 15 s later: (T0 + 675, T0 + 735] holds 11, 3, 3, 3 -> 2.5 again.
    mem = _fold(_ticks({46: 11.0}, 50)[49:], mem)
    assert mem.tick_rises == ((2.5, 3.0, 8.0), (2.5, 3.0, 8.0))
    # The minute history measures the same rise from minute 0, when minute 11 has closed: 2.5.
    minutes = Memory()
    for t, d in _ticks({46: 11.0}, 50):
        minutes = record_minute(minutes, t, d, 615)
    assert minutes.rise_log == ((MINUTE, 2.5, 3.0, 8.0),)



def test_thirty_tick_rises_come_in_under_twenty_minutes():
    # One rise a tick from T0 + 720 s: the 30th at T0 + 720 + 29 x 15 = T0 + 1155 s (tick 77, 19.25
    # minutes), where the minutes' 30th comes at 41 minutes.
    assert len(_fold(_ticks({}, 77)).tick_rises) == 29
    assert len(_fold(_ticks({}, 78)).tick_rises) == PRIOR_RISES


def test_the_tick_rises_are_dropped_once_the_minutes_hold_thirty():
    mem = _fold(_ticks({}, 60))
    assert mem.tick_rises and mem.tick_window
    full = mem.with_(rises_sorted=(0.0,) * PRIOR_RISES)
    assert tick_rise_changes(full, T0 + 15 * 60, 3.0, 615) == {"tick_window": (), "tick_rises": ()}
    assert tick_rise_changes(full.with_(tick_window=(), tick_rises=()), T0 + 15 * 60, 3.0, 615) == {}
    # 29 minutes measured: the ticks still count
    assert tick_rise_changes(mem.with_(rises_sorted=(0.0,) * (PRIOR_RISES - 1)), T0 + 15 * 60, 3.0, 615)["tick_rises"]


def test_the_clock_going_back_starts_the_tick_rises_afresh():
    mem = _fold(_ticks({}, 60))
    back = mem.with_(**tick_rise_changes(mem, T0, 3.0, 615))
    assert back.tick_window == ((T0, 3.0),) and back.tick_rises == ()


def test_the_risk_stands_on_the_tick_rises_before_thirty_minutes_are_measured():
    # Level 3 (this minute so far), capacity 6: exceeds when z > (6 - 3) / 2 = 1.5. 30 tick rises,
    # 3 of them z = 2 (from base 3 to 7: 7 + 0 > 6, the reversion agrees): P = 3 / 30 = 10%.
    ticks = tuple(sorted([(0.0, 3.0, 3.0)] * 27 + [(2.0, 3.0, 7.0)] * 3))
    mem = Memory(minute_now=(MINUTE, 3.0, 1, 3.0), tick_rises=ticks)
    r = exceed_probability(mem, P, T0, 6.0, 615)
    assert (r.resolution, r.samples, r.p_recent) == ("tick", 30, pytest.approx(0.1))
    assert r.to_dict()["rise_resolution"] == "tick"
    # Ten minute rises are fewer than the thirty tick rises: the ticks stand in for them.
    mem = mem.with_(rises_sorted=(0.0,) * 10, rise_reach=((0.0, 3.0, 3.0),) * 10)
    assert exceed_probability(mem, P, T0, 6.0, 615).resolution == "tick"
    # Thirty minute rises: the minutes alone (all z = 0), though forty tick rises are kept: P = 0.
    mem = mem.with_(rises_sorted=(0.0,) * 30, rise_reach=((0.0, 3.0, 3.0),) * 30,
                    tick_rises=tuple(sorted(ticks + ((2.0, 3.0, 7.0),) * 10)))
    r = exceed_probability(mem, P, T0, 6.0, 615)
    assert (r.resolution, r.samples, r.p_recent) == ("minute", 30, 0.0)


def test_a_fresh_controller_drains_on_tick_rises_after_nineteen_minutes_not_forty_one():
    # Demand 3 on 3 ready groups, any risk allowed, scale_down.min_measured_rises 30, stabilisation 0:
    # the hold says "only N of 30 rises at tick resolution measured" until T0 + 1155 s, when the 30th
    # rise comes (the minutes alone would hold until minute 41).
    policy = make_policy(slo={"capacity_miss_budget_pct": 100},
                         scaling={"scale_down": {"min_measured_rises": 30, "stabilization_s": 0, "tick_rises": True,
                                                 "cooldown_after_scale_up_s": 0, "min_group_uptime_s": 0}})
    state = fleet("ready", "ready", "ready")
    mem = Memory()
    first = None
    for k in range(120):
        now = T0 + 15 * k
        d, mem = decide(signals(at=now, g1=(1, 0, 0.2), g2=(1, 0, 0.2), g3=(1, 0, 0.2)), state, policy, mem, now)
        if d.action is Action.SCALE_DOWN:
            first = now - T0
            assert "over 30 rises at tick resolution" in d.detail
            break
        assert d.reason is Reason.STEADY
        if k == 48:  # T0 + 720 s: the first minute rise and the first tick rise; the minutes say so
            assert "only 1 of 30 minutes of rises measured" in d.detail, d.detail
        elif k > 48:
            assert f"only {k - 47} of 30 rises at tick resolution measured" in d.detail, d.detail
    assert first == 1155


# ------------------------------------------------------------------- the mean reversion of a rise
def test_a_rise_from_a_base_below_todays_level_is_not_scaled_up():
    # From a base of 2, demand reached 8: z = 6 / sqrt(3) = 3.46. Today's level 5, capacity 12: the
    # scaled rise says 5 + 3.46 x sqrt(6) = 13.5 > 12; the same rise of 6 requests from today's level
    # says 5 + 6 = 11 <= 12: it does not exceed. Capacity 10.5: 11 > 10.5 (the level reached alone,
    # 8, would not).
    z = 6 / math.sqrt(3)
    rises = ((z, 2.0, 8.0),) * 40
    mem = Memory(minute_now=(MINUTE, 5.0, 1, 5.0), rises_sorted=(z,) * 40, rise_reach=rises)
    assert exceed_probability(mem, P, T0, 12.0, 615).probability == 0.0
    assert exceed_probability(mem, P, T0, 10.5, 615).probability == 1.0
    # Memory without the bases (saved before they were kept): the scaled rise alone decides.
    assert exceed_probability(mem.with_(rise_reach=()), P, T0, 12.0, 615).probability == 1.0


def test_from_a_base_above_todays_level_the_scaled_rise_decides():
    # Today's level 1 is below the base 2: the scaled rise says 1 + 3.46 x sqrt(2) = 5.9, the same
    # rise in requests 1 + 6 = 7: a moment exceeds only when both do (capacity 5.5: both; 6.5: only
    # the unscaled one, so it does not).
    z = 6 / math.sqrt(3)
    mem = Memory(minute_now=(MINUTE, 1.0, 1, 1.0), rises_sorted=(z,) * 40, rise_reach=((z, 2.0, 8.0),) * 40)
    assert exceed_probability(mem, P, T0, 6.5, 615).probability == 0.0
    assert exceed_probability(mem, P, T0, 5.5, 615).probability == 1.0


def test_tick_rises_are_off_by_default():
    # scaling.scale_down.tick_rises defaults to false: the same fresh controller holds on the minutes,
    # and the tick rises are not even kept.
    policy = make_policy(slo={"capacity_miss_budget_pct": 100},
                         scaling={"scale_down": {"min_measured_rises": 30, "stabilization_s": 0,
                                                 "cooldown_after_scale_up_s": 0, "min_group_uptime_s": 0}})
    assert policy.scaling.scale_down.tick_rises is False
    state = fleet("ready", "ready", "ready")
    mem = Memory()
    for k in range(90):
        now = T0 + 15 * k
        d, mem = decide(signals(at=now, g1=(1, 0, 0.2), g2=(1, 0, 0.2), g3=(1, 0, 0.2)), state, policy, mem, now)
        assert d.action is Action.HOLD and mem.tick_rises == ()
    assert "minutes of rises measured" in d.detail
    ticks = tuple(sorted([(0.0, 3.0, 3.0)] * 27 + [(2.0, 3.0, 7.0)] * 3))
    mem = Memory(minute_now=(MINUTE, 3.0, 1, 3.0), tick_rises=ticks)
    assert exceed_probability(mem, policy, T0, 6.0, 615).resolution == "minute"


# ------------------------------------------------------------ what the measured rises can show
def test_a_drain_waits_until_the_rises_can_show_the_risk_within_budget():
    """Zero exceeding rises of n can show no risk below 1 / (n + 2) (core/risk.py, evidence_floor):
    at a budget of 1% and no burn measured (allowed 1%), 0 of 32 rises (3.1%) holds, 0 of 98
    (1 / 100 = 1%) drains. The hold says what it waits for."""
    from autoscaler.core.risk import evidence_floor

    policy = make_policy(scaling={"scale_down": {"min_measured_rises": 30, "stabilization_s": 0}})
    state = fleet("ready", "ready", "ready")
    demand = signals(g1=(1, 0, 0.2), g2=(1, 0, 0.2), g3=(1, 0, 0.2))
    for n, action in ((32, Action.HOLD), (97, Action.HOLD), (98, Action.SCALE_DOWN)):
        mem = Memory(minute_now=(MINUTE, 3.0, 1, 3.0), rises_sorted=(0.0,) * n, rise_reach=((0.0, 3.0, 3.0),) * n)
        d, _ = decide(demand, state, policy, mem, T0)
        assert d.action is action, (n, d.detail)
        assert d.inputs["risk"]["probability"] == 0.0 and d.inputs["risk_allowed"] == 0.01
        assert d.inputs["risk_evidence_floor"] == round(1 / (n + 2), 5)
    mem = Memory(minute_now=(MINUTE, 3.0, 1, 3.0), rises_sorted=(0.0,) * 32, rise_reach=((0.0, 3.0, 3.0),) * 32)
    d, _ = decide(demand, state, policy, mem, T0)
    assert (d.reason, d.action) == (Reason.STEADY, Action.HOLD)
    assert "32 minutes of rises cannot show a risk below 2.9% (1 / (32 + 2)), above the 1% allowed" in d.detail
    # With the week's tail, the week's minutes are the evidence: 0 of 10,000 shows 0.01%.
    r = exceed_probability(mem.with_(rise_tail=((0, 9968, ()),), tail_minutes=9968), policy, T0, 8.4, 615)
    assert r.week_minutes == 10_000 and evidence_floor(r) == pytest.approx(1 / 10_002)
    # Off with the cold start's hold (scale_down.min_measured_rises 0): 32 rises drain.
    off = make_policy(scaling={"scale_down": {"min_measured_rises": 0, "stabilization_s": 0}})
    assert decide(demand, state, off, mem, T0)[0].action is Action.SCALE_DOWN
