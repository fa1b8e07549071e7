"""Builders for decision-core tests: a policy, a fleet state and a signal snapshot in one line each."""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from autoscaler.core import decide as _decide
from autoscaler.core.types import FleetState, GroupSignals, GroupState, Memory, Phase, Problem, SignalSnapshot
from autoscaler.policy.model import Policy

# Monday 2026-01-05 09:00 UTC
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc).timestamp()
NAMES = ("g1", "g2", "g3")
_ALL_NAMES = tuple(f"g{i}" for i in range(1, 9))  # fleet() names as many groups as it is given phases


def make_policy(n_groups: int = 3, **sections: Any) -> Policy:
    """The default fleet (3 groups of 2, floor 1, ceiling 3, 6 requests/group) with section overrides.

    ``make_policy(scaling={"spare_groups": 1}, fleet={"floor_groups": 2})`` merges into the defaults;
    ``make_policy(4)`` defines a fourth group, g4, above the ceiling of 3.
    """
    data: dict[str, Any] = {
        "fleet": {
            "floor_groups": 1,
            "ceiling_groups": 3,
            "groups": [
                {
                    "name": f"g{i}",
                    "worker_url": f"http://10.0.0.{10 + i}:30000",
                    "nodes": [
                        {"name": f"n{2 * i - 1}", "address": f"10.0.1.{2 * i - 1}"},
                        {"name": f"n{2 * i}", "address": f"10.0.1.{2 * i}"},
                    ],
                }
                for i in range(1, n_groups + 1)
            ],
        },
        # The rule tests keep their arithmetic with a target of 0.7 (4.2 requests per group),
        # whatever the shipped default is; the shipped policy is backtested in test_backtest.py.
        # They also start measured: the cold start's hold (scale_down.min_measured_rises, default 30) is
        # tested on its own (test_core_numbers.py), with the default.
        # The week's tail counts every hour here (the time-of-day view, scale_down.tail_within_h, is tested
        # on its own in test_risk_in_requests.py), so the tail's worked examples keep their arithmetic.
        "scaling": {"target_utilization": 0.7, "scale_down": {"min_measured_rises": 0, "tail_within_h": None}},
        # and with a budget of 1% (the shipped 0.5% is checked against the model's default in
        # test_policy.py), so that the burn's worked examples stay in round numbers.
        "slo": {"capacity_miss_budget_pct": 1.0},
        # Most tests isolate one rule; the forecast is tested on its own and switched on there.
        "forecast": {"enabled": False, "seasonal_statistic": "rise", "seasonal_quantile": 0.5},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = _merge(data[key], value)
        else:
            data[key] = value
    return Policy.model_validate(data)


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def fleet(*phases: str, since: float = T0 - 7200, synced: bool = True, sinces: dict | None = None) -> FleetState:
    """fleet("ready", "starting", "off") -> g1 ready, g2 starting, g3 off; all since 2 h before T0.
    Four phases name g4 as well (a policy of ``make_policy(4)``)."""
    sinces = sinces or {}
    groups = {
        name: GroupState(name, Phase(phase), sinces.get(name, since)) for name, phase in zip(_ALL_NAMES, phases)
    }
    return FleetState(groups, synced)


def cordon(f: FleetState, *names: str) -> FleetState:
    """``f`` with ``names`` cordoned (as the service marks an operator's cordon)."""
    return FleetState({n: (replace(g, cordoned=True) if n in names else g) for n, g in f.groups.items()}, f.synced)


def signals(
    at: float = T0,
    problems: tuple[Problem, ...] = (),
    ttft: float | None = None,
    queue_wait: float | None = None,
    request_rate: float | None = None,
    **groups: tuple,
) -> SignalSnapshot:
    """signals(g1=(running, queued, kv), g2=(...)) -> a snapshot; fleet totals are the sums."""
    gs = {name: GroupSignals(running=r, queued=q, kv_usage=kv) for name, (r, q, kv) in groups.items()}
    known = [g for g in gs.values() if g.running is not None and g.queued is not None]
    fleet_sig = GroupSignals(
        running=sum(g.running for g in known) if known else None,
        queued=sum(g.queued for g in known) if known else None,
        ttft_p99_s=ttft,
        queue_wait_p99_s=queue_wait,
        request_rate=request_rate,
    )
    return SignalSnapshot(at, gs, fleet_sig, problems)


def fresh() -> Memory:
    return Memory()


# Every reason the real core returned while the core tests ran. With AUTOSCALER_TEST_REASONS_OUT set
# (test_core_scenarios.py's coverage test runs the core tests in a subprocess that way), each new
# reason is also appended to that file, so that the coverage check does not depend on test order.
REASONS_SEEN: set = set()
_REASONS_OUT = os.environ.get("AUTOSCALER_TEST_REASONS_OUT")


def decide(signals, fleet, policy, memory, now):
    """The real core, recording the reason of each decision it returns."""
    decision, next_memory = _decide(signals, fleet, policy, memory, now)
    if decision.reason not in REASONS_SEEN:
        REASONS_SEEN.add(decision.reason)
        if _REASONS_OUT:
            with open(_REASONS_OUT, "a", encoding="utf-8") as out:
                out.write(f"{decision.reason}\n")
    return decision, next_memory
