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


def test_traffic_is_smoothed_over_ten_minutes_and_kept_through_a_silence():
    first = traffic_changes(Memory(), T0, 2.0, 8.0)
    assert first == {"traffic": (T0, 2.0, 8.0)}
    mem = Memory(traffic=first["traffic"])
    # Ten minutes later at 4/s and demand 2: a = 1 - e^-1 = 0.632: 2 + 0.632 x 2, 8 - 0.632 x 6.
    a = 1.0 - math.exp(-1.0)
    assert TRAFFIC_SMOOTHING_S == 600.0
    later = traffic_changes(mem, T0 + 600, 4.0, 2.0)["traffic"]
    assert later == pytest.approx((T0 + 600, 2.0 + 2.0 * a, 8.0 - 6.0 * a))
    assert later[1] == pytest.approx(3.2642, abs=1e-4)
    # No arrival (or no rate at all): nothing changes; the traffic before the silence is kept.
    assert traffic_changes(mem, T0 + 600, 0.0, 0.0) == {}
    assert traffic_changes(mem, T0 + 600, None, 3.0) == {}


def _silent_memory(misses_long: float, silent_s: float = 400.0) -> Memory:
    """A silent minute (level 0) after traffic at 4/3 requests/s and demand 5. Of the 360 moments
    measured, 12 are a past return: demand from 0 to 14 within a lead time (z = 14); the others rose
    by nothing. Three days of the long burn: 40,000 arrivals, ``misses_long`` misses."""
    ordered = tuple(sorted([(0.0, 0.0, 0.0)] * 348 + [(14.0, 0.0, 14.0)] * 12))
    return Memory(minute_now=(MINUTE, 0.0, 1, 0.0), rises_sorted=tuple(r[0] for r in ordered), rise_reach=ordered,
                  rise_log=tuple((MINUTE - 400 + i, *r) for i, r in enumerate(ordered)),
                  traffic=(T0 - silent_s, 4.0 / 3.0, 5.0), budget_burn_long=(misses_long, 40_000.0, T0),
                  surplus_since=T0 - 3600)


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


def _decide(memory: Memory, policy=None, rate: float | None = 0.0, running: float = 0.0):
    sig = signals(g1=(running, 0, 0.0), g2=(0, 0, 0.0), g3=(0, 0, 0.0), request_rate=rate)
    return decide(sig, fleet("ready", "ready", "ready"), policy or _policy(), memory, T0)


def test_a_silent_fleet_drains_on_the_return_risk_where_the_chance_of_an_excess_holds():
    # Silent for 400 s (>= 300): 20.5 misses staked of 170 allowed -> drain 3 -> 2.
    d, mem = _decide(_silent_memory(60.0))
    assert d.action is Action.SCALE_DOWN and d.reason is Reason.SURPLUS, d.detail
    assert d.inputs["return_risk"]["misses"] == pytest.approx(20.5, abs=1e-3)
    assert "no request for 400 s" in d.detail and "170 allowed" in d.detail
    assert mem.traffic == (T0 - 400, 4.0 / 3.0, 5.0)  # a silent tick keeps the traffic before it
    # The silence drain off: the chance of an excess decides, 12 of 360 past returns (3.3%) > 2%: hold.
    d, _ = _decide(_silent_memory(60.0), _policy(None))
    assert d.action is Action.HOLD and d.reason is Reason.STEADY, d.detail


@pytest.mark.parametrize(("memory", "rate", "running", "why"), [
    (_silent_memory(60.0, silent_s=200.0), 0.0, 0.0, "silent 200 s of the 300"),
    (_silent_memory(390.0), 0.0, 0.0, "free 10 misses: 5 may be staked, 20.5 asked"),
    (_silent_memory(60.0), None, 0.0, "no request rate: not known to be silent"),
    (_silent_memory(60.0), 0.0, 1.0, "a request still running"),
])
def test_no_silence_drain_when(memory, rate, running, why):
    d, _ = _decide(memory, rate=rate, running=running)
    assert d.action is Action.HOLD, (why, d.detail)


def test_the_traffic_round_trips_through_a_snapshot_and_rejects_a_bad_one():
    policy = make_policy()
    mem = Memory(traffic=(T0 - 400, 1.25, 5.5))
    data = {"at": "2026-01-05T09:00:00Z", "fleet": {"groups": {}}, "memory": mem.to_dict(),
            "signals": {"groups": {}, "fleet": {}, "problems": []}}
    _, _, back, _ = snapshot_from_dict(data, policy)
    assert back.traffic == mem.traffic
    old = {k: v for k, v in mem.to_dict().items() if k != "traffic"}  # memory saved before it was kept
    assert snapshot_from_dict({**data, "memory": old}, policy)[2].traffic is None
    with pytest.raises(BadInput, match="memory.traffic"):
        snapshot_from_dict({**data, "memory": {**mem.to_dict(), "traffic": [1, 2]}}, policy)


def test_a_silence_drain_waits_for_the_measured_history():
    # As any drain: no drain on the prior alone (scale_down.min_measured_rises, 30 by default; the
    # memory holds 360 minutes of rises, so 400 asks for more than there are).
    policy = make_policy(scaling={"target_utilization": 1.0, "scale_down": {
        "min_measured_rises": 360, "excess_minutes": 3.0, "utilization_below": 0.9, "stabilization_s": 0,
        "cooldown_after_scale_up_s": 0, "min_group_uptime_s": 0}})
    d, _ = _decide(_silent_memory(60.0), policy)
    assert d.action is Action.SCALE_DOWN, d.detail
    fewer = Memory(**{**{f: getattr(_silent_memory(60.0), f) for f in ("minute_now", "traffic", "budget_burn_long",
                                                                      "surplus_since")},
                      "rises_sorted": (0.0,) * 359, "rise_reach": ((0.0, 0.0, 0.0),) * 359})
    d, _ = _decide(fewer, policy)
    assert d.action is Action.HOLD and "no drain on the prior alone" in d.detail, d.detail
