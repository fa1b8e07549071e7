"""bench/reactive_bound.py's reactor: the oracle's per-minute need without the oracle's foreknowledge.
A group starts at the first minute of a stretch that needs it (the oracle starts it a start-up
earlier), and drains only after ``hold`` minutes without need."""

from __future__ import annotations

import importlib.util
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from autoscaler.policy.loader import load_policy
from tests.support.procs import REPO

sys.path.insert(0, str(REPO / "bench"))
spec = importlib.util.spec_from_file_location("reactive_bound", REPO / "bench" / "reactive_bound.py")
assert spec is not None and spec.loader is not None
reactive_bound = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reactive_bound)

NEEDED = np.array([1, 1, 2, 2, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1])  # groups needed per minute (ceiling 3)


@pytest.fixture
def reactor(monkeypatch):
    policy = load_policy(str(REPO / "policies" / "default.yaml")).policy
    monkeypatch.setattr(reactive_bound, "oracle_schedule", lambda trace, pol: (NEEDED * 6.0, NEEDED.copy()))
    trace = SimpleNamespace(span_s=(1000.0, 1000.0 + 60.0 * len(NEEDED)))
    return lambda hold, spare=0: reactive_bound.ReactiveController(trace, policy, hold, spare)


def test_a_group_starts_when_its_stretch_begins_and_drains_a_hold_after_it_ends(reactor) -> None:
    # g3 is needed only at minute 0 (every schedule starts with the ceiling ready): drained 2 minutes
    # after it. g2: minutes 0, 2-3 and 7; the one-minute gap after minute 0 is within the hold and
    # merges, the three minutes before minute 7 are not: drained at 4 + 2, started again at minute 7
    # itself (the oracle would have started it a start-up before), drained at 8 + 2.
    c = reactor(2)
    assert c.actions == [(1000.0 + 180.0, "drain", "g3"), (1000.0 + 360.0, "drain", "g2"),
                         (1000.0 + 420.0, "start", "g2"), (1000.0 + 600.0, "drain", "g2")]
    # a hold of 3 minutes bridges the gap: g2 stays on from minute 0 to 8, drained at 8 + 3
    assert reactor(3).actions == [(1000.0 + 240.0, "drain", "g3"), (1000.0 + 660.0, "drain", "g2")]


def test_a_spare_group_is_kept_above_the_need(reactor) -> None:
    # one spare: g2 is always on, g3 follows what g2 did without it
    assert reactor(2, spare=1).actions == [(1000.0 + 360.0, "drain", "g3"), (1000.0 + 420.0, "start", "g3"),
                                           (1000.0 + 600.0, "drain", "g3")]


def test_the_reactor_hands_out_its_actions_on_time(reactor) -> None:
    c = reactor(2)
    assert c.tick(1000.0 + 179.0, None, None) == ([], [])
    assert c.tick(1000.0 + 180.0, None, None) == ([], ["g3"])
    assert c.tick(1000.0 + 420.0, None, None) == (["g2"], ["g2"])  # the drain at 360 and the start at 420


def test_a_drain_in_the_last_minute_is_kept_and_a_spare_beyond_the_ceiling_changes_nothing(reactor) -> None:
    # a hold of 5 merges g2's stretches into minutes 0-7: drained at 8 + 5 = 13, the trace's last minute
    assert reactor(5).actions == [(1000.0 + 360.0, "drain", "g3"), (1000.0 + 780.0, "drain", "g2")]
    # two spares: every minute needs at least 3 groups, the ceiling: all stay on, nothing is started or drained
    assert reactor(2, spare=2).actions == []


def test_a_given_need_is_followed_instead_of_the_oracles(monkeypatch) -> None:
    # --need rate hands the reactor the rate oracle's need: the per-minute oracle is not read
    policy = load_policy(str(REPO / "policies" / "default.yaml")).policy

    def no_oracle(trace, pol):
        raise AssertionError("the oracle's need was read")

    monkeypatch.setattr(reactive_bound, "oracle_schedule", no_oracle)
    trace = SimpleNamespace(span_s=(1000.0, 1000.0 + 60.0 * len(NEEDED)))
    c = reactive_bound.ReactiveController(trace, policy, 2, 0, needed=NEEDED.copy())
    assert c.actions == [(1000.0 + 180.0, "drain", "g3"), (1000.0 + 360.0, "drain", "g2"),
                         (1000.0 + 420.0, "start", "g2"), (1000.0 + 600.0, "drain", "g2")]


def test_the_rate_need_is_the_rate_oracles_and_its_bar_the_rate_oracles_node_hours() -> None:
    from autoscaler.sim.backtest import prepare_trace, request_columns, run_one
    from autoscaler.sim.controllers import OracleController, RateOracleController, groups_needed, rate_oracle_demand

    policy = load_policy(str(REPO / "policies" / "default.yaml")).policy
    path = REPO / "tests" / "data" / "traces" / "servegen_small"
    out = reactive_bound.bound_cell((policy, path, "servegen_small", 0, 0.5, [(0, 0), (10, 1)], "rate"))
    trace, factor, _ = prepare_trace(str(path), "auto", policy, 0.5, 0)
    cols = request_columns(trace, policy)

    def node_hours(ctl) -> float:
        return run_one("x", trace, policy, ctl, factor, 0, None, cols, 0.0).summary["node_hours"]

    draws = rate_oracle_demand(trace, policy)
    assert out["need"] == "rate"
    assert out["oracle_node_hours"] == node_hours(RateOracleController(trace, policy, draws))
    assert out["oracle_node_hours"] != node_hours(OracleController(trace, policy))  # (the bar is not the oracle's)
    needed = groups_needed(draws.max(axis=0), policy)
    reactor = node_hours(reactive_bound.ReactiveController(trace, policy, 0, 0, needed))
    assert out["reactive"][0]["node_hours"] == reactor
    best = out["best"]
    assert out["meets"] == (best is not None and best["x_oracle"] <= 1.0 + 1e-9)
