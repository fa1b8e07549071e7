"""The silence drain (core/risk.py, ``traffic_changes`` and ``return_risk``; core/decide.py,
``_silent_surplus``; docs/core.md, "Silence"): once no request has arrived and none runs or waits for
``scale_down.silence_s``, a drain is judged on what a return of the traffic would cost against the
budget's free misses, not on the chance of an excess per arrival. Worked examples with exact values."""

from __future__ import annotations

import math

import pytest
from core_helpers import T0, decide, fleet, make_policy, signals

from autoscaler.adapters.snapshot_file import snapshot_from_dict
from autoscaler.core import Action, Memory, Reason
from autoscaler.core.risk import SILENCE_BUDGET_SHARE, TRAFFIC_SMOOTHING_S, return_risk, traffic_changes
from autoscaler.errors import BadInput

MINUTE = int(T0 // 60)


def test_traffic_is_smoothed_over_ten_minutes_of_ticks_and_kept_through_a_silence():
    first = traffic_changes(Memory(), T0, 2.0, 8.0, 15.0)
    assert first == {"traffic": (T0, 2.0, 8.0)}
    mem = Memory(traffic=first["traffic"])
    # The next tick, 15 s later, at 4/s and demand 2: a = 1 - e^(-15/600) = 0.0247: 2 + 0.0247 x 2,
    # 8 - 0.0247 x 6.
    a = 1.0 - math.exp(-15.0 / 600.0)
    assert TRAFFIC_SMOOTHING_S == 600.0
    later = traffic_changes(mem, T0 + 15, 4.0, 2.0, 15.0)["traffic"]
    assert later == pytest.approx((T0 + 15, 2.0 + 2.0 * a, 8.0 - 6.0 * a))
    assert later[1] == pytest.approx(2.0494, abs=1e-4)
    # After an hour without arrivals one tick counts as one tick, not as the hour: the traffic
    # before the silence is not replaced by one request.
    assert traffic_changes(mem, T0 + 3600, 4.0, 2.0, 15.0)["traffic"][1:] == pytest.approx(later[1:])
    # No arrival (or no rate at all): the traffic is kept.
    assert "traffic" not in traffic_changes(mem, T0 + 600, 0.0, 0.0, 15.0)
    assert traffic_changes(mem, T0 + 600, None, 3.0, 15.0) == {}


def test_a_silence_is_observed_tick_by_tick():
    # Silent ticks at 0, 15, 30 s: (0, 30); 30 s later (two intervals) it goes on: (0, 60).
    mem = Memory()
    for t in (0.0, 15.0, 30.0, 60.0):
        mem = mem.with_(**traffic_changes(mem, T0 + t, 0.0, 0.0, 15.0))
    assert mem.silence == (T0, T0 + 60)
    # A tick 40 s later (the controller was not deciding): a new silence.
    assert traffic_changes(mem, T0 + 100, 0.0, 0.0, 15.0)["silence"] == (T0 + 100, T0 + 100)
    # A request running, a missing rate, an arrival: no silence.
    for rate, demand in ((0.0, 1.0), (None, 0.0), (0.5, 0.0)):
        assert traffic_changes(mem, T0 + 75, rate, demand, 15.0)["silence"] is None


def _silent_memory(misses_long: float, silent_s: float = 400.0) -> Memory:
    """A silent minute (level 0) after traffic at 4/3 requests/s and demand 5. Of the 360 moments
    measured, 12 are a past return: demand from 0 to 14 within a lead time (z = 14); the others rose
    by nothing. Three days of the long burn: 40,000 arrivals, ``misses_long`` misses."""
    ordered = tuple(sorted([(0.0, 0.0, 0.0)] * 348 + [(14.0, 0.0, 14.0)] * 12))
    return Memory(minute_now=(MINUTE, 0.0, 1, 0.0), rises_sorted=tuple(r[0] for r in ordered), rise_reach=ordered,
                  rise_log=tuple((MINUTE - 400 + i, *r) for i, r in enumerate(ordered)),
                  traffic=(T0 - silent_s - 60, 4.0 / 3.0, 5.0), silence=(T0 - silent_s, T0 - 15),
                  budget_burn_long=(misses_long, 40_000.0, T0), surplus_since=T0 - 3600)


def test_the_return_risk_worked_example():
    # Back at demand 5, each past return carried there: min(5 + 14 x sqrt(6), 5 + 14) = 19 on 12 slots
    # after the drain (18 always on), 4/3 x 3 s = 4 queued make every arrival miss: 1 - 0.25 = 0.75
    # added, held the whole lead (11 minutes of 11): 12 x 0.75 / 360 = 2.5% of arrivals; 4/3 x 615 =
    # 820 arrivals: 20.5 misses. Free: 1% x 40,000 - 60 = 340; half of it, 170, may be staked.
    policy = make_policy()
    ret = return_risk(_silent_memory(60.0), policy, T0, after=12.0, always_on=18.0, lead_s=615.0)
    assert ret is not None
    assert ret.misses == pytest.approx(12 * 0.75 / 360 * (4.0 / 3.0) * 615)
    assert ret.misses == pytest.approx(20.5)
    assert (ret.free, ret.allowed, ret.silent_s) == pytest.approx((340.0, 340.0 * SILENCE_BUDGET_SHARE, 400.0))
    assert SILENCE_BUDGET_SHARE == 0.5
    # No traffic seen, or no burn measured: no estimate.
    assert return_risk(Memory(minute_now=(MINUTE, 0.0, 1, 0.0)), policy, T0, 12.0, 18.0, 615.0) is None


def _policy(silence_s: float | None = 300.0):
    return make_policy(scaling={"target_utilization": 1.0, "scale_down": {
        "min_measured_rises": 0, "excess_minutes": 3.0, "utilization_below": 0.9, "silence_s": silence_s,
        "stabilization_s": 0, "cooldown_after_scale_up_s": 0, "min_group_uptime_s": 0}})


def _decide_at(memory: Memory, now: float, rate: float | None, running: float):
    sig = signals(at=now, g1=(running, 0, 0.0), g2=(0, 0, 0.0), g3=(0, 0, 0.0), request_rate=rate)
    return decide(sig, fleet("ready", "ready", "ready"), _policy(), memory, now)


def _decide(memory: Memory, policy=None, rate: float | None = 0.0, running: float = 0.0):
    sig = signals(g1=(running, 0, 0.0), g2=(0, 0, 0.0), g3=(0, 0, 0.0), request_rate=rate)
    return decide(sig, fleet("ready", "ready", "ready"), policy or _policy(), memory, T0)


def test_a_silent_fleet_drains_on_the_return_risk_where_the_chance_of_an_excess_holds():
    # Silent for 400 s (>= 300): 20.5 misses staked of 170 allowed -> drain 3 -> 2.
    d, mem = _decide(_silent_memory(60.0))
    assert d.action is Action.SCALE_DOWN and d.reason is Reason.SURPLUS, d.detail
    assert d.inputs["return_risk"]["misses"] == pytest.approx(20.5, abs=1e-3)
    assert "no request for 400 s" in d.detail and "170 allowed" in d.detail
    assert mem.traffic == (T0 - 460, 4.0 / 3.0, 5.0)  # a silent tick keeps the traffic before it
    assert mem.silence == (T0 - 400, T0)
    # The silence drain off: the chance of an excess decides, 12 of 360 past returns (3.3%) > 2%: hold.
    d, _ = _decide(_silent_memory(60.0), _policy(None))
    assert d.action is Action.HOLD and d.reason is Reason.STEADY, d.detail


@pytest.mark.parametrize(("memory", "rate", "running", "why"), [
    (_silent_memory(60.0, silent_s=200.0), 0.0, 0.0, "silent 200 s of the 300"),
    (_silent_memory(390.0), 0.0, 0.0, "free 10 misses: 5 may be staked, 20.5 asked"),
    (_silent_memory(60.0), None, 0.0, "no request rate: not known to be silent"),
    (_silent_memory(60.0), 0.0, 1.0, "a request still running"),
    (_silent_memory(60.0).with_(silence=(T0 - 400, T0 - 45)), 0.0, 0.0, "no tick for 45 s: a new silence"),
])
def test_no_silence_drain_when(memory, rate, running, why):
    d, _ = _decide(memory, rate=rate, running=running)
    assert d.action is Action.HOLD, (why, d.detail)


def test_the_traffic_round_trips_through_a_snapshot_and_rejects_a_bad_one():
    policy = make_policy()
    mem = Memory(traffic=(T0 - 400, 1.25, 5.5), silence=(T0 - 300, T0))
    data = {"at": "2026-01-05T09:00:00Z", "fleet": {"groups": {}}, "memory": mem.to_dict(),
            "signals": {"groups": {}, "fleet": {}, "problems": []}}
    _, _, back, _ = snapshot_from_dict(data, policy)
    assert (back.traffic, back.silence) == (mem.traffic, mem.silence)
    old = {k: v for k, v in mem.to_dict().items() if k not in ("traffic", "silence")}  # saved before they were kept
    assert snapshot_from_dict({**data, "memory": old}, policy)[2].traffic is None
    with pytest.raises(BadInput, match="memory.traffic"):
        snapshot_from_dict({**data, "memory": {**mem.to_dict(), "traffic": [1, 2]}}, policy)
    with pytest.raises(BadInput, match="memory.silence"):
        snapshot_from_dict({**data, "memory": {**mem.to_dict(), "silence": [1]}}, policy)


def test_a_silence_drain_waits_for_the_measured_history():
    # As any drain: no drain on the prior alone (scale_down.min_measured_rises, 30 by default): the
    # memory holds 360 minutes of rises, which 360 asks for; 359 are too few.
    policy = make_policy(scaling={"target_utilization": 1.0, "scale_down": {
        "min_measured_rises": 360, "excess_minutes": 3.0, "utilization_below": 0.9, "stabilization_s": 0,
        "cooldown_after_scale_up_s": 0, "min_group_uptime_s": 0}})
    d, _ = _decide(_silent_memory(60.0), policy)
    assert d.action is Action.SCALE_DOWN, d.detail
    fewer = Memory(**{**{f: getattr(_silent_memory(60.0), f) for f in ("minute_now", "traffic", "silence",
                                                                      "budget_burn_long", "surplus_since")},
                      "rises_sorted": (0.0,) * 359, "rise_reach": ((0.0, 0.0, 0.0),) * 359})
    d, _ = _decide(fewer, policy)
    assert d.action is Action.HOLD and "no drain on the prior alone" in d.detail, d.detail


def test_the_stake_is_against_always_on_at_the_ceiling_whatever_the_fleet_and_the_burn():
    # Two ready of a ceiling of three, a drain 2 -> 1: after 6 slots, always-on 18 (not today's 12).
    from autoscaler.core.risk import headroom

    sig = signals(g1=(0, 0, 0.0), g2=(0, 0, 0.0), request_rate=0.0)
    d, _ = decide(sig, fleet("ready", "ready", "off"), _policy(), _silent_memory(60.0), T0)
    want = return_risk(_silent_memory(60.0), make_policy(), T0, after=6.0, always_on=18.0, lead_s=615.0)
    assert want is not None and d.inputs["return_risk"]["misses"] == pytest.approx(want.misses, abs=1e-3)
    assert want.misses > return_risk(_silent_memory(60.0), make_policy(), T0, 6.0, 12.0, 615.0).misses
    # The six hours burning 1.5x: the 12 slots that stay count for 12 / 1.5 = 8; always-on stays 18.
    # ((35 + 10) / (2,000 + 10 / 1%) = 1.5%: 1.5x the 1% budget.) Always-on shrunk by the same 1.5
    # (12 slots) would miss every returning request as well and put nothing at stake.
    burning = _silent_memory(60.0).with_(budget_burn=(35.0, 2000.0, T0))
    assert headroom(1.5) == 1.5
    d2, _ = _decide(burning)
    assert d2.inputs["headroom"] == 1.5
    want2 = return_risk(burning, make_policy(), T0, after=12.0 / 1.5, always_on=18.0, lead_s=615.0)
    assert want2 is not None and d2.inputs["return_risk"]["misses"] == pytest.approx(want2.misses, abs=1e-3)
    shrunk = return_risk(burning, make_policy(), T0, after=12.0 / 1.5, always_on=12.0, lead_s=615.0)
    assert want2.misses == pytest.approx(20.5) and shrunk is not None and shrunk.misses == 0.0


def test_a_fleet_that_goes_quiet_drains_after_the_silence_s_it_observed():
    # Traffic at 4/3 per second and demand 5 at T0, then silent ticks every 15 s: the core folds both
    # itself; the drain comes once 300 s of silence were seen (at T0 + 15 + 300), not before.
    base = _silent_memory(60.0).with_(traffic=None, silence=None)
    mem, t = base, T0
    d, mem = _decide_at(mem, t, rate=4.0 / 3.0, running=5.0)
    assert mem.traffic == (t, 4.0 / 3.0, 5.0) and mem.silence is None
    actions = []
    for i in range(1, 41):
        d, mem = _decide_at(mem, t + 15 * i, rate=0.0, running=0.0)
        actions.append((15 * (i - 1), d.action))
    first_drain = next(s for s, a in actions if a is Action.SCALE_DOWN)
    assert first_drain == 300, actions


def test_unknown_demand_ends_a_silence():
    # A group whose running count is missing: demand unknown, so the fleet is not known to be silent.
    sig = signals(g1=(None, 0, 0.0), g2=(0, 0, 0.0), g3=(0, 0, 0.0), request_rate=0.0)
    d, mem = decide(sig, fleet("ready", "ready", "ready"), _policy(), _silent_memory(60.0), T0)
    assert d.action is Action.HOLD and mem.silence is None, d.detail
