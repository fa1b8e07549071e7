"""Drains that move sessions (issue 18): the misses a drain causes by moving conversations off their
cache are estimated from the share of first tokens over the TTFT target and charged to the error
budget (core/risk.py, ``session_move_changes``). Worked examples as exact numbers."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from core_helpers import T0, decide, fleet, make_policy, signals

from autoscaler.adapters.snapshot_file import snapshot_from_dict
from autoscaler.core import Action, Memory, Reason
from autoscaler.core.risk import (
    OVER_SHARE_HALF_LIFE_MINUTES,
    SESSION_WATCH_MINUTES,
    allowed_risk,
    burn_changes,
    open_drain_watch,
    session_move_changes,
    watch_misses,
)
from autoscaler.errors import BadInput
from autoscaler.sim.engine import simulate
from autoscaler.sim.traces import Trace

P = make_policy()
WATCH_S = SESSION_WATCH_MINUTES * 60
SETTLED = Memory(surplus_since=T0 - 3600)


def _snap(at: float, rate: float, over: float | None, **groups):
    s = signals(at=at, **groups)
    return replace(s, fleet=replace(s.fleet, request_rate=rate), ttft_over_target=over)


def test_the_worked_example_charges_the_excess_beyond_two_standard_deviations():
    # 600 first tokens after a drain, 48 over target against a baseline of 5%: expected 30, sd
    # sqrt(600 x 0.05 x 0.95) = 5.34; 48 - 30 - 2 x 5.34 = 7.32 misses.
    assert watch_misses((T0, 0.05, 48.0, 600.0)) == pytest.approx(48 - 30 - 2 * math.sqrt(28.5))
    assert watch_misses((T0, 0.05, 40.0, 600.0)) == 0.0  # within the noise: nothing
    # No misses before (baseline 0): the noise allowed is two misses' worth, at least.
    assert watch_misses((T0, 0.0, 5.0, 600.0)) == 3.0


def test_the_baseline_is_weighted_by_arrivals_and_halves_in_an_hour():
    c = session_move_changes(Memory(), P, T0, 30.0, 0.1, slow=False)
    assert c == {"over_share": (3.0, 30.0, T0)}
    later = T0 + OVER_SHARE_HALF_LIFE_MINUTES * 60
    c = session_move_changes(Memory(**c), P, later, 30.0, 0.5, slow=False)
    assert c["over_share"] == pytest.approx((1.5 + 15.0, 15.0 + 30.0, later))
    # An unknown share (no first token in the window) changes nothing.
    assert session_move_changes(Memory(**c), P, later + 15, 30.0, None, slow=False) == {}


def test_a_watch_counts_its_ticks_but_not_the_queued_ones_and_charges_when_it_closes():
    mem = Memory(drain_watch=(T0, 0.05, 0.0, 0.0))
    c = session_move_changes(mem, P, T0 + 15, 150.0, 0.2, slow=False)
    assert c["drain_watch"] == (T0, 0.05, 30.0, 150.0)
    # A tick whose queue wait is the cause: its misses are capacity misses, counted apart.
    queued = session_move_changes(Memory(**c), P, T0 + 30, 150.0, 0.9, slow=True)
    assert "drain_watch" not in queued
    mem = Memory(drain_watch=(T0, 0.05, 48.0, 600.0))
    closed = session_move_changes(mem, P, T0 + WATCH_S, 150.0, 0.05, slow=False)
    assert closed["drain_watch"] is None and closed["session_moves"] == pytest.approx((7.32, T0), abs=0.01)
    assert closed["_charged"] == pytest.approx(7.32, abs=0.01)
    # The burn adds the charge to its misses (the tick's arrivals once, not the watch's again).
    b = burn_changes(mem.with_(budget_burn=(0.0, 1000.0, T0 + WATCH_S)), P, T0 + WATCH_S, 10.0, 0.0, 0.0,
                     over_target=0.05)
    assert b["budget_burn"] == pytest.approx((7.32, 1150.0, T0 + WATCH_S), abs=0.01)
    assert b["session_moves"][0] == pytest.approx(7.32, abs=0.01) and b["drain_watch"] is None


def test_a_drain_opens_a_watch_at_the_baseline_and_closes_the_last_one():
    mem = Memory(over_share=(2.0, 100.0, T0))
    assert open_drain_watch(mem, T0) == {"drain_watch": (T0, 0.02, 0.0, 0.0)}
    c = open_drain_watch(mem.with_(drain_watch=(T0 - 60, 0.05, 48.0, 600.0)), T0)
    assert c["drain_watch"] == (T0, 0.02, 0.0, 0.0) and c["_charged"] == pytest.approx(7.32, abs=0.01)
    assert c["session_moves"][1] == T0 - 60


def _drain_then(over_after: float):
    """A fleet at 2% of first tokens over target drains g3; then the share is ``over_after`` for the
    watch's 15 minutes at 2 requests/s. Returns the drain, the memory after the watch, and the decision then."""
    loads = {"g1": (2, 0, 0.5), "g2": (1, 0, 0.3), "g3": (0, 0, 0.3)}
    mem = SETTLED.with_(over_share=(2.0, 100.0, T0 - 15))
    d, mem = decide(_snap(T0, 2.0, 0.02, **loads), fleet("ready", "ready", "ready"), P, mem, T0)
    assert d.action == Action.SCALE_DOWN and mem.drain_watch == (T0, pytest.approx(0.02), 0.0, 0.0)
    now = T0
    two = {"g1": (2, 0, 0.5), "g2": (1, 0, 0.3)}
    while now < T0 + WATCH_S:
        now += 15
        d, mem = decide(_snap(now, 2.0, over_after, **two), fleet("ready", "ready", "draining"), P, mem, now)
    return mem, d


def test_a_drain_that_moves_sessions_is_charged_and_halves_the_risk_a_drain_may_take():
    calm, d_calm = _drain_then(0.02)
    hit, d_hit = _drain_then(0.20)
    assert calm.drain_watch is None and calm.session_moves == (0.0, T0)
    # 15 minutes at 2 requests/s: 1,800 first tokens; 20% over target against 2%: 360 - 36 - 2 x
    # sqrt(1,800 x 0.02 x 0.98) = 312.1 misses charged (the last tick, which closes the watch, is not in it).
    seen = 2.0 * 15 * (WATCH_S / 15 - 1)
    expected = 0.2 * seen - 0.02 * seen - 2 * math.sqrt(seen * 0.02 * 0.98)
    assert hit.session_moves[0] == pytest.approx(expected)
    assert hit.budget_burn[0] == pytest.approx(calm.budget_burn[0] + expected)
    assert allowed_risk(hit, P)[0] < allowed_risk(calm, P)[0] / 4 + 1e-12  # the boldness' floor
    assert "session-move misses of the last drain" in d_hit.detail and d_hit.inputs["session_move_misses"] > 300
    assert "session-move" not in d_calm.detail


def test_a_fleet_that_missed_alike_before_the_drain_is_charged_nothing():
    # Long prompts: 40% over target before and after (Mooncake's share): no session move is seen.
    loads = {"g1": (2, 0, 0.5), "g2": (1, 0, 0.3), "g3": (0, 0, 0.3)}
    mem = SETTLED.with_(over_share=(40.0, 100.0, T0 - 15))
    d, mem = decide(_snap(T0, 2.0, 0.4, **loads), fleet("ready", "ready", "ready"), P, mem, T0)
    now = T0
    rng = np.random.default_rng(1)
    while now < T0 + WATCH_S:
        now += 15
        share = float(rng.binomial(30, 0.4)) / 30  # the noise of 30 first tokens a tick
        d, mem = decide(_snap(now, 2.0, share, g1=(2, 0, 0.5), g2=(1, 0, 0.3)),
                        fleet("ready", "ready", "off"), P, mem, now)
    assert mem.session_moves == (0.0, T0)
    assert d.reason != Reason.SURPLUS or d.action == Action.HOLD


def test_the_replay_reads_the_share_of_first_tokens_over_the_target():
    # Four requests at 0, 1, 2, 3 s: 500 tokens (0.05 s prefill at 10,000 tokens/s) and 40,000 (4 s,
    # over the 3 s target): at the scrapes after them, half of the first tokens in the window missed
    # (a tick sees the scrape of the signals' lag before it: the 15 s tick has no first token yet).
    seen = []

    class Watch:
        period_s = 15.0

        def tick(self, now, snap, fleet_state):
            seen.append((now, snap.ttft_over_target))
            return [], []

        def on_ready(self, name, startup_s):
            pass

    policy = make_policy(simulation={"prefill_tokens_per_s": 10_000}, slo={"ttft_target_s": 3.0})
    t = np.array([0.0, 1.0, 2.0, 3.0])
    trace = Trace(format="csv", path="handmade", start_epoch_s=1_767_571_200.0, t_s=t,
                  input_tokens=np.array([500, 40_000, 500, 40_000]), output_tokens=np.array([10, 10, 10, 10]),
                  session=np.array([-1] * 4), prefix_blocks=None, span_s=(0.0, 200.0), requests_read=4,
                  bad_rows=0, gap_windows=[])
    simulate(trace, policy, Watch())
    assert (30.0, 0.5) in seen  # 4 first tokens, 2 of them over 3 s
    assert seen[0] == (0.0, None)  # no first token yet: unknown, not 0
    assert seen[-1][1] is None  # the window (60 s) has emptied again


def test_the_watch_round_trips_through_a_snapshot_and_rejects_a_bad_one():
    mem = Memory(over_share=(2.0, 100.0, T0), drain_watch=(T0, 0.02, 3.0, 40.0), session_moves=(1.5, T0 - 900))
    data = {"at": "2026-01-05T09:00:00Z", "fleet": {"groups": {}}, "memory": mem.to_dict(),
            "signals": {"groups": {}, "fleet": {}, "problems": [], "ttft_over_target": 0.25}}
    snap, _, back, _ = snapshot_from_dict(data, P)
    assert (back.over_share, back.drain_watch, back.session_moves) == (mem.over_share, mem.drain_watch,
                                                                     mem.session_moves)
    assert snap.ttft_over_target == 0.25
    with pytest.raises(BadInput, match="memory.drain_watch"):
        snapshot_from_dict({**data, "memory": {**mem.to_dict(), "drain_watch": [1, 2]}}, P)
    with pytest.raises(BadInput, match="signals.ttft_over_target"):
        snapshot_from_dict({**data, "signals": {**data["signals"], "ttft_over_target": 1.5}}, P)
