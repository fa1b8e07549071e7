"""The parallel backtest gives the serial one's results, and the engine's shortcuts change nothing.

On the Azure conversation trace (2,008 requests over an hour at the default peak utilisation 0.5):
- ``backtest(workers=2)`` replays the seven references in forked workers while ours runs in this
  process; every summary, every SimResult array and event, and every decision of ours must equal
  those of ``backtest(workers=1)``, which replays all eight here one after another;
- without fork (or from inside a worker) it falls back to the serial path;
- always-on and the oracle read no signals (``uses_signals = False``) and HPA reads no fleet rate
  or latency percentiles (``uses_fleet_signals = False``): the engine skips building what they do not read,
  and the replay must be the one it gives when it builds everything.
"""

from __future__ import annotations

import gc
import math
import os
import weakref
from pathlib import Path

import numpy as np
import pytest

from autoscaler.core.types import GroupSignals, Phase, SignalSnapshot
from autoscaler.core.victim import choose_victim, groups_to_start
from autoscaler.policy import load_policy
from autoscaler.sim import backtest as bt
from autoscaler.sim import engine
from autoscaler.sim.controllers import CoreController, HpaController, OracleController, StaticController
from autoscaler.sim.engine import SimResult, simulate
from autoscaler.sim.peers import (
    ApaController,
    DynamoPlannerController,
    KpaController,
    RayServeController,
)

ROOT = Path(__file__).resolve().parent.parent
AZURE = ROOT / "examples/traces/azure-2023-conv/AzureLLMInferenceTrace_conv.csv"


@pytest.fixture(scope="module")
def setup():
    policy = load_policy(ROOT / "policies/default.yaml").policy
    trace, factor, info = bt.prepare_trace(str(AZURE), "auto", policy, 0.5, 0)
    return policy, trace, factor, info


def without_wall(o):
    if isinstance(o, dict):
        return {k: without_wall(v) for k, v in o.items() if k != "wall_s"}
    if isinstance(o, list):
        return [without_wall(v) for v in o]
    return o


def assert_same_replay(a: SimResult, b: SimResult) -> None:
    for name in ("ttft_s", "queue_s", "cut", "moved", "tick_t", "tick_demand", "tick_ready", "tick_starting",
                 "tick_draining"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name  # bit for bit, not approximately
    assert a.events == b.events
    assert a.group_intervals == b.group_intervals
    assert (a.span_s, a.scale_ups, a.scale_downs, a.requests_cut_by_drain) == \
        (b.span_s, b.scale_ups, b.scale_downs, b.requests_cut_by_drain)


def decisions(run: bt.Run) -> list:
    return [(t, d.to_dict(), d.groups, d.forecast_used) for t, d in run.controller.decisions]


def test_parallel_backtest_equals_serial(setup):
    policy, trace, factor, info = setup
    serial = bt.backtest(trace, factor, policy, compare=True, keep_decisions=True, workers=1)
    parallel = bt.backtest(trace, factor, policy, compare=True, keep_decisions=True, workers=2)

    # (the rate oracle is not defined for Azure's recorded arrivals)
    assert list(parallel) == list(serial) == ["ours", *(n for n in bt.reference_names() if bt.applies(n, trace))]
    for name in serial:
        assert without_wall(parallel[name].summary) == without_wall(serial[name].summary), name
        assert_same_replay(parallel[name].result, serial[name].result)
    assert without_wall(bt.results_json(parallel, policy, info, 0.0)) == \
        without_wall(bt.results_json(serial, policy, info, 0.0))
    # Ours: every decision (holds included, keep_decisions) and the count of each reason.
    assert len(serial["ours"].controller.decisions) == len(serial["ours"].result.tick_t) > 200
    assert decisions(parallel["ours"]) == decisions(serial["ours"])
    assert parallel["ours"].controller.counts == serial["ours"].controller.counts
    # The references did run elsewhere: in worker processes, not in this one.
    me = os.getpid()
    assert serial["ours"].pid == parallel["ours"].pid == me
    assert all(serial[n].pid == me for n in bt.reference_names() if bt.applies(n, trace))
    assert any(parallel[n].pid != me for n in bt.reference_names() if bt.applies(n, trace))


def test_without_fork_the_backtest_runs_serially(setup, monkeypatch):
    policy, trace, factor, _ = setup
    monkeypatch.setattr(bt, "can_fork", lambda: False)
    runs = bt.backtest(trace, factor, policy, compare=True, workers=2)
    assert {r.pid for r in runs.values()} == {os.getpid()}


class _ReadsEverything:
    """Wraps a controller and says it reads every signal, so the engine builds them all."""

    uses_signals = True
    uses_fleet_signals = True

    def __init__(self, inner):
        self.inner, self.period_s = inner, inner.period_s
        if hasattr(inner, "scrape_lag_s"):  # (a controller that scrapes itself: Knative's KPA, 1 s)
            self.scrape_lag_s = inner.scrape_lag_s
        self.seen = 0

    def tick(self, now, signals, fleet):
        assert signals is not None
        self.seen += signals.fleet.ttft_p99_s is not None and signals.fleet.request_rate is not None
        return self.inner.tick(now, signals, fleet)

    def on_ready(self, name, startup_s):
        self.inner.on_ready(name, startup_s)


_traces: dict[float, object] = {}


def azure_at(policy, peak_utilization: float):
    if peak_utilization not in _traces:
        _traces[peak_utilization] = bt.prepare_trace(str(AZURE), "auto", policy, peak_utilization, 0)[0]
    return _traces[peak_utilization]


# At peak utilisation 1.0 requests queue at some ticks (the tick demand counts them); at 0.5, HPA
# at target 0.9 starts a group and drains two.
@pytest.mark.parametrize("make, peak_utilization", [
    (lambda trace, policy: StaticController(policy), 1.0),
    (lambda trace, policy: OracleController(trace, policy), 1.0),
    (lambda trace, policy: HpaController(policy, 0.5, trace.span_s[0]), 1.0),
    (lambda trace, policy: HpaController(policy, 0.9, trace.span_s[0]), 0.5),
    (lambda trace, policy: KpaController(policy, trace.span_s[0]), 1.0),
    (lambda trace, policy: KpaController(policy, trace.span_s[0], 0.9), 0.5),
    (lambda trace, policy: ApaController(policy, trace.span_s[0], 0.9), 0.5),
    (lambda trace, policy: RayServeController(policy, trace.span_s[0], 4.0), 0.35),
    (lambda trace, policy: DynamoPlannerController(policy, trace), 0.5),
], ids=["static", "oracle", "hpa-0.5", "hpa-0.9", "kpa-0.7", "kpa-0.9", "apa-0.9", "ray-4", "dynamo"])
def test_skipping_unread_signals_changes_no_replay(setup, make, peak_utilization):
    policy = setup[0]
    trace = azure_at(policy, peak_utilization)
    lean = simulate(trace, policy, make(trace, policy))
    full_ctl = _ReadsEverything(make(trace, policy))
    full = simulate(trace, policy, full_ctl)
    assert full_ctl.seen > 0  # the full path did build the percentiles the lean one skips
    assert (full.tick_demand > policy.fleet.requests_per_group * full.tick_ready).any() \
        or full.scale_downs > 0  # something to get wrong: queued requests, or a drain
    assert_same_replay(lean, full)


def test_scrape_values_built_through_slots_equal_the_dataclasses():
    # The engine writes the scrape's values through their slots (engine._signals, _snapshot_of):
    # they must be the values the dataclasses' own constructors build, field for field.
    full = engine._signals(1.0, 2.0, 0.25, 3.5, 4.0, 0.5)
    assert full == GroupSignals(1.0, 2.0, 0.25, 3.5, 4.0, 0.5)
    assert hash(full) == hash(GroupSignals(1.0, 2.0, 0.25, 3.5, 4.0, 0.5))
    assert engine._signals(1.0, 0.0) == GroupSignals(running=1.0, queued=0.0)
    assert engine._signals(3.0, 1.0, request_rate=2.0, queue_wait_p99_s=0.1) == \
        GroupSignals(running=3.0, queued=1.0, request_rate=2.0, queue_wait_p99_s=0.1)
    per = {"g1": full}
    assert engine._snapshot_of(10.0, per, GroupSignals(1.0, 2.0)) == SignalSnapshot(10.0, per, GroupSignals(1.0, 2.0), ())


def test_shared_request_columns_change_no_replay(setup, monkeypatch):
    policy, trace, factor, _ = setup
    columns = engine.request_columns(trace, policy)
    shared = simulate(trace, policy, CoreController(policy), columns=columns)
    own = simulate(trace, policy, CoreController(policy))
    assert_same_replay(shared, own)
    # Columns of other speeds (or another trace) are refused, not silently replayed.
    slower = policy.model_copy(update={"simulation": policy.simulation.model_copy(update={"decode_tokens_per_s": 10.0})})
    with pytest.raises(ValueError, match="another trace or other speeds"):
        simulate(trace, slower, StaticController(slower), columns=columns)
    # A backtest builds them once for its eight replays.
    built = []
    monkeypatch.setattr(bt, "request_columns", lambda t, p: built.append(1) or engine.request_columns(t, p))
    bt.backtest(trace, factor, policy, compare=True, workers=1)
    assert len(built) == 1


class _TextbookHpa(HpaController):
    """HPA's tick as first written: every load checked, then summed; the 300 s window read at
    every tick that does not scale up."""

    def tick(self, now, signals, fleet):
        fleet_p = self.policy.fleet
        ready = [g for g in fleet.groups.values() if g.phase == Phase.READY]
        current = len(ready) + sum(1 for g in fleet.groups.values() if g.phase == Phase.STARTING)
        loads = [signals.groups.get(g.name) for g in ready]
        if not ready or any(s is None or s.running is None for s in loads):
            return [], []
        metric = sum([(s.running or 0.0) + (s.queued or 0.0) for s in loads]) / len(ready)
        ratio = metric / (self.target * fleet_p.requests_per_group)
        desired = current if abs(ratio - 1.0) <= self.TOLERANCE else math.ceil(current * ratio)
        desired = min(max(desired, fleet_p.floor_groups), fleet_p.ceiling_groups)
        self.history.append((now, desired))
        while len(self.history) > 1 and self.history[0][0] <= now - self.STABILIZATION_S:
            self.history.popleft()
        if desired > current:
            return groups_to_start(fleet, desired - current), []
        stabilized = max(d for _, d in self.history)
        if stabilized < current:
            victims, pool = [], list(ready)
            for _ in range(current - stabilized):
                v = choose_victim(pool, self.order, dict(signals.groups))
                if v is None or len(pool) <= 1:
                    break
                victims.append(v.name)
                pool.remove(v)
            return [], victims
        return [], []


def test_a_finished_replay_is_freed_without_the_cyclic_collector(setup):
    # A 14-day KPA replay holds 600,000 tick rows: kept alive by a reference cycle (a bound method
    # kept on the replay, say), the replays' memory would wait for the cyclic collector (170 MB more
    # at the peak of the 14-day compare). Freed by reference counting, it goes when it is dropped.
    policy, trace, _, _ = setup
    gc.disable()
    try:
        for ctl in (KpaController(policy, trace.span_s[0]), CoreController(policy), StaticController(policy)):
            replay = engine._Replay(trace, policy, ctl, 0)
            replay.run(None)
            gone = weakref.ref(replay)
            del replay
            assert gone() is None, type(ctl).__name__
    finally:
        gc.enable()


@pytest.mark.parametrize("target, peak_utilization", [(0.9, 0.5), (0.7, 0.35), (0.5, 0.35)])
def test_hpa_shortcuts_give_the_textbook_replay(setup, target, peak_utilization):
    policy = setup[0]
    trace = azure_at(policy, peak_utilization)
    fast = simulate(trace, policy, HpaController(policy, target, trace.span_s[0]))
    textbook = simulate(trace, policy, _TextbookHpa(policy, target, trace.span_s[0]))
    assert fast.scale_ups + fast.scale_downs > 0  # it did scale: something to get wrong
    assert_same_replay(fast, textbook)


@pytest.mark.parametrize("quantile", [0.99, 0.95, 0.5])
@pytest.mark.parametrize("m", [1, 7, 40, 150])
def test_latency_percentiles_are_nearest_rank(quantile, m):
    # The window's percentile is the nearest-rank one, sorted(values)[ceil(q x m) - 1]; the engine
    # takes the highest without sorting when that is the rank (p99 of fewer than 100 first tokens).
    rng = np.random.default_rng(m)
    window = engine._LatencyWindow(60.0, quantile)
    ttft, wait = rng.exponential(2.0, m).round(3).tolist(), rng.exponential(1.0, m).round(3).tolist()
    for i, (tt, qq) in enumerate(zip(ttft, wait)):
        window.pending.append((i * 0.1, tt, qq))  # in time order: already a heap
    window.advance(m * 0.1)
    k = max(0, math.ceil(quantile * m) - 1)
    assert window.percentiles() == (sorted(ttft)[k], sorted(wait)[k])
