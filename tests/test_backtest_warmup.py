"""``simulate --warmup-hours H``: every controller replays the whole trace, and only what follows
the first H hours is scored (docs/interfaces.md, "Warm-up").

Synthetic traces keep these cheap: a handful of seconds in all.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from autoscaler.core.forecast import seasonal_statistic
from autoscaler.policy.loader import load_policy, parse_policy
from autoscaler.sim.backtest import backtest, run_one, scored_window, summarise
from autoscaler.sim.controllers import CoreController, StaticController
from autoscaler.sim.refcache import ReferenceCache
from autoscaler.sim.traces import Trace
from tests.support.procs import bad
from tests.test_backtest import AZURE, ROOT, Fixed, run_cli

HOUR = 3600.0


def trace_of(t, inp, out) -> Trace:
    t = np.asarray(t, dtype=float)
    return Trace(
        format="csv", path="handmade", start_epoch_s=1_767_571_200.0, t_s=t,  # Monday 2026-01-05 00:00 UTC
        input_tokens=np.asarray(inp, dtype=np.int64), output_tokens=np.asarray(out, dtype=np.int64),
        session=np.full(len(t), -1, dtype=np.int64), prefix_blocks=None, span_s=(float(t[0]), float(t[-1])),
        requests_read=len(t), bad_rows=0, gap_windows=[],
    )


def default_policy():
    return load_policy(str(ROOT / "policies/default.yaml")).policy


def test_the_scored_window_leaves_out_the_warm_up_and_keeps_the_fleet_it_left():
    # Three hours, one request every 10 s. In the first hour every request has 30,000 input tokens:
    # 30,000 / 2,500 = 12 s of prefill, a TTFT over the 3 s target: all 360 of them miss. After it,
    # 250 tokens: 0.1 s, all meet it. A controller drains g3 at 15 s (in the warm-up).
    policy = default_policy()
    t = np.arange(0.0, 3 * HOUR + 1, 10.0)  # 0, 10, ..., 10,800: 1,081 requests
    inp = np.where(t < HOUR, 30_000, 250)
    trace = trace_of(t, inp, np.full(len(t), 10))

    cold = run_one("fixed", trace, policy, Fixed(["g3"]), 1.0, 0)
    warm = run_one("fixed", trace, policy, Fixed(["g3"]), 1.0, 0, warmup_s=HOUR)
    # Cold: 360 misses of 1,081 requests, and the drain at 15 s counts.
    assert cold.summary["requests"] == 1081
    assert cold.summary["slo_attainment"] == pytest.approx(721 / 1081, abs=1e-6)
    assert cold.summary["scale_downs"] == 1
    # Warm: only the 721 requests from 3,600 s on (the one at exactly 3,600 s included), none missed;
    # the drain happened in the warm-up: not counted.
    assert warm.summary["requests"] == 721
    assert warm.summary["slo_attainment"] == 1.0 and warm.summary["capacity_misses"] == 0
    assert warm.summary["scale_downs"] == 0 and warm.summary["scale_ups"] == 0
    # The fleet at the boundary is what the controller left (2 groups, not the ceiling's 3): 2 groups
    # x 2 nodes x 2 h = 8 node-hours, against the baseline's 3 x 2 x 2 h = 12 over the scored span.
    assert warm.summary["node_hours"] == pytest.approx(8.0)
    assert warm.summary["baseline_node_hours"] == pytest.approx(12.0)
    assert warm.summary["savings_pct"] == pytest.approx(100 / 3, abs=1e-3)
    # The replay itself is the whole trace, the same with or without a warm-up.
    assert np.array_equal(warm.result.ttft_s, cold.result.ttft_s)
    assert scored_window(cold.result, trace, 0.0) is cold.result


def test_a_warm_up_not_shorter_than_the_replay_is_refused():
    policy = default_policy()
    trace = trace_of([0.0, 100.0, 200.0], [100, 100, 100], [10, 10, 10])
    result = run_one("static", trace, policy, StaticController(policy), 1.0, 0).result
    with pytest.raises(ValueError, match="not shorter"):
        summarise(scored_window(result, trace, 200.0), policy, 1.0, 0.0)


class _FirstScoredTick(CoreController):
    """Ours, keeping the memory the core decided its first tick at or after ``scored_from`` with."""

    def __init__(self, policy, epoch_s, scored_from):
        super().__init__(policy, True, epoch_s)
        self.scored_from = scored_from
        self.first: tuple[float, object] | None = None

    def tick(self, now, signals, fleet):
        out = super().tick(now, signals, fleet)
        if self.first is None and now >= self.scored_from:
            self.first = (now, self.memory)
        return out


def daily_trace(hours: float, seed: int = 0) -> Trace:
    """Poisson arrivals at 0.02 + 0.24 (1 + cos(2 pi t / 1 day)) requests/s: busiest at the start of
    each day (0.5/s), quiet twelve hours later; 2,000 input and 500 output tokens each (0.8 + 25 =
    25.8 s of service: about 13 requests in service at the peak, two to three groups)."""
    rng = np.random.default_rng(seed)
    t, out = 0.0, []
    peak = 0.5
    while t < hours * HOUR:  # thinning: candidates at the peak rate, kept by rate(t) / peak
        t += rng.exponential(1 / peak)
        if rng.random() < (0.02 + 0.24 * (1 + math.cos(2 * math.pi * t / 86400))) / peak:
            out.append(t)
    n = len(out)
    return trace_of(out, np.full(n, 2000), np.full(n, 500))


def test_ours_decides_with_seasonal_memory_from_the_first_scored_tick():
    policy = default_policy()
    assert policy.forecast.seasonal_days >= 1
    trace = daily_trace(27)
    start = trace.span_s[0] + 24 * HOUR
    warm = _FirstScoredTick(policy, trace.start_epoch_s, start)
    run = run_one("ours", trace, policy, warm, 1.0, 0, warmup_s=24 * HOUR)
    assert warm.first is not None
    now, memory = warm.first
    epoch_now = trace.start_epoch_s + now
    # The memory of the first scored tick holds a day of 5-minute slots: the same time of day
    # yesterday is there, and the seasonal statistic has something to say.
    slots = sorted(memory.history_by_slot())
    assert (slots[-1] - slots[0]) * 300 >= 23.9 * HOUR
    assert int((epoch_now - 86400) // 300) in memory.demand_by_slot
    assert seasonal_statistic(memory, policy, epoch_now, 600.0) is not None
    # ... and the decisions from then on weigh it: the first scored decision that measured the
    # risk of a scale-down drew on one earlier day.
    risks = [d.inputs["risk"] for t, d in warm.decisions if t >= now and d.inputs.get("risk")]
    assert risks and risks[0]["seasonal_days_used"] == 1
    assert run.summary["requests"] == int((trace.t_s >= start).sum())

    # Cold on the same hours (the trace cut at the boundary): nothing seasonal at the first tick.
    later = trace.t_s >= start
    cut = trace_of(trace.t_s[later], trace.input_tokens[later], trace.output_tokens[later])
    cold = _FirstScoredTick(policy, cut.start_epoch_s, cut.span_s[0])
    run_one("ours", cut, policy, cold, 1.0, 0)
    assert cold.first is not None and not cold.first[1].demand_by_slot


def test_every_reference_is_scored_after_the_same_warm_up():
    policy = parse_policy((ROOT / "policies/default.yaml").read_text(), "default.yaml")
    trace = daily_trace(4, seed=1)
    runs = backtest(trace, 1.0, policy, compare=True, workers=1, warmup_s=HOUR)
    scored = int((trace.t_s >= trace.span_s[0] + HOUR).sum())
    span_h = (trace.span_s[1] - trace.span_s[0]) / HOUR - 1
    for name, run in runs.items():
        assert run.summary["requests"] == scored, name
        assert run.summary["baseline_node_hours"] == pytest.approx(3 * 2 * span_h, abs=1e-3), name


def test_the_reference_cache_key_includes_the_warm_up(tmp_path):
    policy = default_policy()
    trace = trace_of([0.0, 100.0, 200.0], [100, 100, 100], [10, 10, 10])
    cold = ReferenceCache(tmp_path, trace, 1.0, 0, policy)
    assert ReferenceCache(tmp_path, trace, 1.0, 0, policy, 0.0).key("oracle") == cold.key("oracle")
    one = ReferenceCache(tmp_path, trace, 1.0, 0, policy, 3600.0)
    assert one.key("oracle") != cold.key("oracle")
    assert ReferenceCache(tmp_path, trace, 1.0, 0, policy, 7200.0).key("oracle") != one.key("oracle")


def test_the_reference_cache_key_leaves_out_the_error_budget_alone(tmp_path):
    # No reference reads the budget (a frontier's budgets share one cache); the TTFT target scores them.
    policy = default_policy()
    trace = trace_of([0.0, 100.0, 200.0], [100, 100, 100], [10, 10, 10])
    key = ReferenceCache(tmp_path, trace, 1.0, 0, policy).key("oracle")
    budget = policy.model_copy(update={"slo": policy.slo.model_copy(update={"capacity_miss_budget_pct": 4.0})})
    assert ReferenceCache(tmp_path, trace, 1.0, 0, budget).key("oracle") == key
    target = policy.model_copy(update={"slo": policy.slo.model_copy(update={"ttft_target_s": 2.0})})
    assert ReferenceCache(tmp_path, trace, 1.0, 0, target).key("oracle") != key


def _without_wall(out: dict) -> dict:
    out = {k: v for k, v in out.items() if k != "wall_s"}
    for ref in out.get("reference", {}).values():
        for point in ref if isinstance(ref, list) else [ref]:
            if point is not None:  # (the rate oracle of a trace of recorded arrivals)
                point.pop("wall_s", None)
    return out


def test_simulate_warmup_hours_zero_is_the_cold_start_and_bad_values_exit_2(tmp_path):
    common = ("simulate", "--policy", "policies/default.yaml", "--trace", str(AZURE), "--json", "--compare",
              "--no-reference-cache")
    plain = run_cli(*common)
    zero = run_cli(*common, "--warmup-hours", "0")
    assert plain.returncode == 0 and zero.returncode == 0, (plain.stderr, zero.stderr)
    a, b = json.loads(plain.stdout), json.loads(zero.stdout)
    assert a["warmup_hours"] == 0 and _without_wall(a) == _without_wall(b)

    warm = run_cli(*common, "--warmup-hours", "0.25")
    assert warm.returncode == 0, warm.stderr
    w = json.loads(warm.stdout)
    assert w["warmup_hours"] == 0.25 and w["requests"] < a["requests"]
    assert w["reference"]["static"]["requests"] == w["requests"]
    # The Azure trace spans 58 min: its baseline over the scored 43 min is 3 x 2 x (span - 0.25 h).
    assert w["baseline_node_hours"] == pytest.approx(a["baseline_node_hours"] - 3 * 2 * 0.25, abs=1e-3)

    base = ("simulate", "--policy", "policies/default.yaml", "--trace", str(AZURE))
    bad(run_cli(*base, "--warmup-hours", "-1"), "--warmup-hours", "-1", "0 or more")
    bad(run_cli(*base, "--warmup-hours", "nan"), "--warmup-hours", "nan")
    bad(run_cli(*base, "--warmup-hours", "1"), "--warmup-hours", "1 h is not shorter than the trace's span")
    bad(run_cli(*base, "--warmup-hours", "lots"), "--warmup-hours")


def test_the_table_says_what_was_warmed_up():
    p = run_cli("simulate", "--policy", "policies/default.yaml", "--trace", str(AZURE), "--warmup-hours", "0.5")
    assert p.returncode == 0, p.stderr
    assert "warm-up: the first 0.5 h replayed" in p.stdout

