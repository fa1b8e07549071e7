"""The week's tail of rises and the seasonal share that only raises the risk (issue 18): a quiet three
hours do not prove that the week's bursts are gone. Worked examples of core/risk.py as exact numbers."""

from __future__ import annotations

import json

import pytest
from core_helpers import T0, decide, fleet, make_policy, signals

from autoscaler.adapters.snapshot_file import snapshot_from_dict
from autoscaler.core import Action, Memory, Reason
from autoscaler.core.risk import (
    RECENT_MINUTES,
    TAIL_HOURS,
    TAIL_PER_HOUR,
    closed_tail_rises,
    exceed_probability,
    record_minute,
    tail_changes,
)
from autoscaler.errors import BadInput

P = make_policy()
MINUTE = int(T0 // 60)
HOUR = MINUTE // 60


def _quiet(level: float = 5.0, n: int = RECENT_MINUTES) -> dict:
    """``n`` recent rises of 0 from ``level``, and today's level ``level``."""
    return {"minute_now": (MINUTE, level, 1, level), "rises_sorted": (0.0,) * n, "rise_reach": ((0.0, level, level),) * n}


def _tail(*hours: tuple[int, int, tuple]) -> dict:
    tail = tuple((h, c, tuple(sorted(tops))) for h, c, tops in hours)
    return {"rise_tail": tail, "tail_sorted": closed_tail_rises(tail), "tail_minutes": sum(c for _, c, _ in tail)}


# ------------------------------------------------------------------------- building the tail
def test_a_rise_leaving_the_three_hours_joins_its_hour():
    start = HOUR * 60  # the first minute of an hour
    aged = ((start, 1.0, 3.0, 5.0), (start + 1, 4.0, 3.0, 10.0))
    c = tail_changes(Memory(), aged, start + RECENT_MINUTES + 1)
    assert c["rise_tail"] == ((HOUR, 2, ((1.0, 3.0, 5.0), (4.0, 3.0, 10.0))),) and c["tail_minutes"] == 2
    # The hour in progress is not in the sorted rises yet (they are the closed hours': rebuilt once
    # an hour, not every minute), and they do not change while it is in progress.
    assert "tail_sorted" not in c
    # The next hour's first minute closes this one: its rises join the sorted ones.
    mem = Memory(**c)
    c = tail_changes(mem, ((start + 60, 2.0, 3.0, 7.0),), start + RECENT_MINUTES + 60)
    assert [h[:2] for h in c["rise_tail"]] == [(HOUR, 2), (HOUR + 1, 1)] and c["tail_minutes"] == 3
    assert c["tail_sorted"] == ((1.0, 3.0, 5.0), (4.0, 3.0, 10.0))


def test_an_hour_keeps_its_24_highest_rises_and_counts_every_minute():
    # 24: two bursts' worth at the default lead (a burst shows in the rise of each of the 12 minutes
    # within a lead time before it).
    start = HOUR * 60
    aged = tuple((start + i, float(i), 3.0, 3.0 + i) for i in range(30))  # rises 0 .. 29
    c = tail_changes(Memory(), aged, start + RECENT_MINUTES + 30)
    (hour, count, tops), = c["rise_tail"]
    assert TAIL_PER_HOUR == 24 and (hour, count) == (HOUR, 30)
    assert [r[0] for r in tops] == [float(z) for z in range(6, 30)]
    assert c["tail_minutes"] == 30
    # A rise lower than the hour's 24th is counted and not kept; a higher one replaces the 24th.
    c = tail_changes(Memory(**c), ((start + 30, 1.0, 3.0, 4.0), (start + 31, 8.5, 3.0, 11.5)), start + RECENT_MINUTES + 32)
    (_, count, tops), = c["rise_tail"]
    assert count == 32 and [r[0] for r in tops][:4] == [7.0, 8.0, 8.5, 9.0] and len(tops) == 24
    # Once the hour closes, its 24 are the sorted rises.
    c = tail_changes(Memory(**c), ((start + 60, 0.0, 3.0, 3.0),), start + RECENT_MINUTES + 61)
    assert [r[0] for r in c["tail_sorted"]][:4] == [7.0, 8.0, 8.5, 9.0] and len(c["tail_sorted"]) == 24


def test_a_rise_without_a_base_counts_its_minute_and_is_not_kept():
    start = HOUR * 60
    c = tail_changes(Memory(), ((start, 7.0),), start + RECENT_MINUTES + 1)
    assert c["rise_tail"] == ((HOUR, 1, ()),) and c["tail_minutes"] == 1


def test_the_tail_keeps_seven_days_with_the_three_hours():
    # An hour is kept while it is no more than TAIL_HOURS (165) hours before the hour of the rise
    # now leaving the three hours: 165 + 3 = 168 hours, a week.
    assert TAIL_HOURS + RECENT_MINUTES // 60 == 7 * 24
    old = Memory(**_tail((HOUR, 60, ((5.0, 3.0, 20.0),))))
    leaving = (HOUR + TAIL_HOURS) * 60  # a minute of the hour 165 hours later
    kept = tail_changes(old, ((leaving, 0.0, 3.0, 3.0),), leaving + RECENT_MINUTES + 1)
    assert [h[0] for h in kept["rise_tail"]] == [HOUR, HOUR + TAIL_HOURS] and kept["tail_minutes"] == 61
    assert kept["tail_sorted"] == ((5.0, 3.0, 20.0),)  # the old hour closed
    gone = tail_changes(old, ((leaving + 60, 0.0, 3.0, 3.0),), leaving + 60 + RECENT_MINUTES + 1)
    assert [h[0] for h in gone["rise_tail"]] == [HOUR + TAIL_HOURS + 1] and gone["tail_minutes"] == 1
    assert gone["tail_sorted"] == ()  # the old hour left the week; the new one is in progress
    # An hour leaving the week while the hour in progress goes on: the sorted rises lose its rises.
    three = Memory(**_tail((HOUR - TAIL_HOURS, 60, ((5.0, 3.0, 20.0),)), (HOUR, 60, ((1.0, 3.0, 5.0),)), (HOUR + 1, 5, ())))
    assert three.tail_sorted == ((1.0, 3.0, 5.0), (5.0, 3.0, 20.0))
    at = (HOUR + 1) * 60 + 10
    c = tail_changes(three, ((at, 0.0, 3.0, 3.0),), at + RECENT_MINUTES + 1)
    assert [h[:2] for h in c["rise_tail"]] == [(HOUR, 60), (HOUR + 1, 6)] and c["tail_minutes"] == 66
    assert c["tail_sorted"] == ((1.0, 3.0, 5.0),)


def test_folding_minutes_moves_the_rises_older_than_three_hours_into_the_tail():
    # One tick a minute at demand 3: minute k's rise is measured when minute k + 11 closes (lead
    # 615 s), at the tick of minute k + 12. After 12 + 180 + 5 ticks, 185 rises: 180 in the three
    # hours, 5 in the tail.
    mem = Memory()
    for i in range(12 + RECENT_MINUTES + 5):
        mem = record_minute(mem, T0 + 60 * i, 3.0, 615)
    assert len(mem.rise_log) == RECENT_MINUTES and mem.tail_minutes == 5
    assert sum(c for _, c, _ in mem.rise_tail) == 5 and sum(len(tops) for _, _, tops in mem.rise_tail) == 5


def test_the_clock_going_back_clears_the_tail_with_the_minutes():
    mem = Memory(**_tail((HOUR, 60, ((5.0, 3.0, 20.0),)))).with_(minute_now=(MINUTE + 10, 3.0, 1, 3.0))
    back = record_minute(mem, T0, 3.0, 615)
    assert (back.rise_tail, back.tail_sorted, back.tail_minutes) == ((), (), 0)


# ------------------------------------------------------------------------- the risk it sets
def test_a_quiet_three_hours_still_see_the_weeks_burst():
    # Today's level 5, capacity 12: a rise exceeds when z > (12 - 5) / sqrt(6) = 2.86 and, from a
    # base below 5, when 5 + (reached - base) > 12 as well. The three hours: 180 rises of 0 (P 0).
    # The tail: one hour of 60 minutes holding rises z 10 (5 -> 30), 5 (5 -> 20), 4 (1 -> 6: from
    # today's 5 that is 10, under 12) and 0: two exceed. P = (0 + 2) / (180 + 60) = 0.833%.
    mem = Memory(**_quiet(), **_tail((HOUR - 10, 60, ((10.0, 5.0, 30.0), (5.0, 5.0, 20.0), (4.0, 1.0, 6.0),
                                                       (0.0, 5.0, 5.0)))))
    r = exceed_probability(mem, P, T0, 12.0, 615)
    assert r.p_hours == 0.0 and r.week_minutes == 240
    assert r.p_week == pytest.approx(2 / 240) and r.probability == pytest.approx(0.0083333, abs=1e-7)
    assert r.to_dict()["p_week"] == 0.00833 and r.to_dict()["week_minutes"] == 240
    # The same hour closed, and a quiet hour in progress after it (60 minutes, no rise kept): its
    # rises are now counted from the sorted ones, the same way: 2 / (180 + 120) = 0.667%.
    closed = mem.with_(**_tail(mem.rise_tail[0], (HOUR - 9, 60, ())))
    assert closed.tail_sorted and exceed_probability(closed, P, T0, 12.0, 615).p_week == pytest.approx(2 / 300)
    # Without the tail the three hours alone: 0.
    assert exceed_probability(mem.with_(rise_tail=(), tail_sorted=(), tail_minutes=0), P, T0, 12.0, 615).probability == 0.0


def test_a_busier_three_hours_than_the_week_decide_for_themselves():
    # The three hours: 18 of 180 rises exceed (z 3 > 2.86 from base 5: 5 + 7.3 = 12.3 > 12): 10%. The
    # week: (18 + 0) / (180 + 600) = 2.31%, lower: the three hours' 10% decides.
    z = 3.0
    recent = tuple(sorted(((0.0, 5.0, 5.0),) * 162 + ((z, 5.0, 5.0 + z * 6 ** 0.5),) * 18))
    mem = Memory(minute_now=(MINUTE, 5.0, 1, 5.0), rises_sorted=tuple(r[0] for r in recent), rise_reach=recent,
                 **_tail((HOUR - 10, 600, ())))
    r = exceed_probability(mem, P, T0, 12.0, 615)
    assert (r.p_hours, r.p_week, r.p_recent) == (pytest.approx(0.1), pytest.approx(18 / 780), pytest.approx(0.1))


def test_the_weeks_burst_holds_a_drain_the_three_hours_allow():
    # Demand 3 on 3 groups (4.2 requests each at the tests' target): 2 groups carry 8.4. The three
    # hours: 180 rises of 0 from 3. The tail: 6 rises of 10 (3 -> 23) in 480 minutes. Exceeds when
    # z > (8.4 - 3) / 2 = 2.7: P = 6 / 660 = 0.91%, under the 1% budget: drain. With 9: 9 / 660 =
    # 1.36% > 1%: keep 3 groups, and the reason says what decided.
    policy = make_policy(scaling={"scale_down": {"stabilization_s": 0}})
    state = fleet("ready", "ready", "ready")
    demand = signals(g1=(1, 0, 0.2), g2=(1, 0, 0.2), g3=(1, 0, 0.2))
    burst = ((10.0, 3.0, 23.0),)
    for count, action in ((6, Action.SCALE_DOWN), (9, Action.HOLD)):
        mem = Memory(**_quiet(3.0), **_tail((HOUR - 10, 420, burst * min(count, 8)), (HOUR - 9, 60, burst * max(0, count - 8))))
        d, _ = decide(demand, state, policy, mem, T0)
        assert d.action is action, d.detail
        assert d.inputs["risk"]["p_week"] == round(count / 660, 5)
        assert f"0% over 180 minutes and {100 * count / 660:.2g}% over the week's 660 minutes" in d.detail, d.detail
    assert d.reason is Reason.STEADY


# ------------------------------------------------------------------------- memory round trip
def test_the_tail_round_trips_through_a_snapshot_and_rejects_a_bad_one():
    mem = Memory(**_tail((HOUR - 10, 60, ((10.0, 5.0, 30.0), (-1.0, 5.0, 3.0))), (HOUR - 9, 12, ())))
    data = {"at": "2026-01-05T09:00:00Z", "fleet": {"groups": {}}, "memory": json.loads(json.dumps(mem.to_dict()))}
    assert data["memory"]["rise_tail"] == [[HOUR - 10, 60, [[-1.0, 5.0, 3.0], [10.0, 5.0, 30.0]]], [HOUR - 9, 12, []]]
    _, _, back, _ = snapshot_from_dict(data, P, "snap.json")
    assert (back.rise_tail, back.tail_sorted, back.tail_minutes) == (mem.rise_tail, mem.tail_sorted, 72)
    for bad, where in (([[HOUR, -1, []]], "memory.rise_tail[0]"), ([[HOUR, 1, [[1.0, 2.0]]]], "memory.rise_tail[0][2][0]"),
                       ([[HOUR, 1, []], [HOUR, 1, []]], "memory.rise_tail[1][0]"),
                       ([[HOUR, 1, [[1.0, -2.0, 3.0]]]], "memory.rise_tail[0][2][0][1]")):
        data["memory"]["rise_tail"] = bad
        with pytest.raises(BadInput, match=where.replace("[", r"\[").replace("]", r"\]")):
            snapshot_from_dict(data, P, "snap.json")
