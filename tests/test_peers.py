"""The peers (autoscaler/sim/peers.py) replay their own repositories' unit tests, and run in the replay.

Each table below is a unit test of the peer's repository, with its inputs and expected outputs
unchanged (the source file is named above each); the excess burst capacity Knative's tests also
check steers its activator, not the pod count, and is not ported. Then scenario tests of the
controllers on the fleet (windows, panic, delays, cooldowns) and of the backtest's peer columns,
sweeps and dominance.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from core_helpers import make_policy

from autoscaler.core.types import FleetState, GroupSignals, GroupState, Phase, SignalSnapshot
from autoscaler.policy import load_policy
from autoscaler.sim import backtest as bt
from autoscaler.sim.peers import (
    ApaController,
    ConstantPredictor,
    DynamoPlannerController,
    KpaController,
    KpaSpec,
    MovingAveragePredictor,
    RayDelayState,
    RayServeController,
    apa_target_replicas,
    erlang_c_wait_tail,
    kpa_new_state,
    kpa_scale,
    ray_apply_delay,
    ray_apply_scaling_factors,
    ray_core_policy,
    sla_throughput_per_group,
)
from autoscaler.sim.traces import Trace

ROOT = Path(__file__).resolve().parent.parent
AZURE = ROOT / "examples/traces/azure-2023-conv/AzureLLMInferenceTrace_conv.csv"


# ---------------------------------------------------------------- Knative: autoscaler_test.go
def _knative_spec(target: float, **kw) -> KpaSpec:
    # newTestAutoscalerWithScalingMetric: PanicThreshold 2, MaxScaleUpRate 10, MaxScaleDownRate 10,
    # StableWindow 60 s, Reachable.
    base = {"max_scale_up_rate": 10.0, "max_scale_down_rate": 10.0, "panic_threshold": 2.0,
            "stable_window_s": 60.0, "reachable": True}
    base.update(kw)
    return KpaSpec(target_value=target, **base)


# TestAutoscalerScale: (label, target, stable, panic, ready pods, spec changes, prior panic, want)
KNATIVE_SCALE = [
    ("AutoscalerNoDataAtZeroNoAutoscale", 10, 0, 0, 1, {}, None, 0),
    ("AutoscalerStableModeUnlimitedTBC", 181, 21, 26, 1, {}, None, 1),
    ("Autoscaler0TBC", 10, 50, 49, 1, {}, None, 5),
    ("AutoscalerStableModeNoChange", 10, 50, 50, 1, {}, None, 5),
    ("AutoscalerPanicStableLargerThanPanic", 1, 50, 30, 5, {}, 5, 50),
    ("AutoscalerPanicStableLessThanPanic", 1, 20, 30, 5, {}, 5, 30),
    ("AutoscalerStableModeNoChangeAlreadyScaled", 10, 50, 50, 5, {}, None, 5),
    ("AutoscalerStableModeIncreaseWithSmallScaleUpRate", 1, 3, 3.1, 2, {"max_scale_up_rate": 1.1}, None, 3),
    ("AutoscalerStableModeDecreaseWithSmallScaleDownRate", 10, 1, 1, 100, {"max_scale_down_rate": 1.1}, None, 90),
    ("AutoscalerStableModeDecreaseNonReachable", 10, 1, 1, 100,
     {"max_scale_down_rate": 1.1, "reachable": False}, None, 1),
    ("AutoscalerPanicModeDoublePodCount", 10, 50, 100, 1, {}, None, 10),
]


@pytest.mark.parametrize("label, target, stable, panic, ready, changes, prior_panic_pods, want", KNATIVE_SCALE,
                         ids=[c[0] for c in KNATIVE_SCALE])
def test_knative_autoscaler_scale_table(label, target, stable, panic, ready, changes, prior_panic_pods, want):
    now = 1000.0
    state = kpa_new_state(1, now)  # the tests' autoscaler is built over one ready pod: not panicking
    if prior_panic_pods is not None:  # prepFunc: panicking since 5 s, at most 5 pods so far
        state.panic_time, state.max_panic_pods = now - 5, prior_panic_pods
    assert kpa_scale(_knative_spec(target, **changes), state, now, ready, stable, panic) == want


def test_knative_rate_limits_and_unpanic():
    spec = _knative_spec(10)
    # TestAutoscalerRateLimitScaleUp: need 100 pods but only scale x10, then x10 again
    state = kpa_new_state(1, 0.0)
    assert kpa_scale(spec, state, 0.0, 1, 1000, 1001) == 10
    assert kpa_scale(spec, state, 0.0, 10, 1000, 1001) == 100
    # TestAutoscalerRateLimitScaleDown: need 1 pod but can only scale down ten times, to 10, then 1
    state = kpa_new_state(1, 0.0)
    assert kpa_scale(spec, state, 0.0, 100, 1, 1) == 10
    assert kpa_scale(spec, state, 0.0, 10, 1, 1) == 1
    # TestAutoscalerPanicThenUnPanicScaleDown
    state = kpa_new_state(1, 0.0)
    assert kpa_scale(spec, state, 0.0, 1, 100, 100) == 10
    assert kpa_scale(spec, state, 0.0, 10, 100, 1000) == 100  # panicking
    assert kpa_scale(spec, state, 30.0, 10, 1, 1) == 100  # traffic dropped off, still in panic
    assert kpa_scale(spec, state, 61.0, 10, 1, 1) == 1  # scale down after the stable window
    # TestAutoscalerStableModeNoTrafficScaleToZero
    state = kpa_new_state(1, 0.0)
    assert kpa_scale(spec, state, 0.0, 1, 1, 0) == 1
    assert kpa_scale(spec, state, 0.0, 1, 0, 0) == 0


def test_knative_scale_down_delay():
    # TestAutoscalerScaleDownDelay: target 10, rates 10, panic threshold 100, delay 5 minutes, no pods
    spec = _knative_spec(10, panic_threshold=100.0, scale_down_delay_s=300.0)
    state = kpa_new_state(0, 0.0)
    assert kpa_scale(spec, state, 2.0, 0, 40, 40) == 4  # scale up
    assert kpa_scale(spec, state, 300.0, 0, 0, 0) == 4  # five minutes at reduced concurrency: not yet
    assert kpa_scale(spec, state, 302.0, 0, 0, 0) == 0  # five minutes and 2 s: now
    # "gradual"
    assert kpa_scale(spec, state, 540.0, 0, 40, 40) == 4
    assert kpa_scale(spec, state, 600.0, 0, 30, 30) == 4  # 4 still dominates
    assert kpa_scale(spec, state, 660.0, 0, 0, 0) == 4
    assert kpa_scale(spec, state, 840.0, 0, 0, 0) == 3  # 4 scrolls out, drop to 3
    assert kpa_scale(spec, state, 900.0, 0, 0, 0) == 0  # everything scrolled out


def test_knative_starts_in_panic_over_more_than_one_pod():
    # TestStartInPanicMode: built over 0 or 1 pods no panic; over 2, panic with 2 max panic pods
    assert kpa_new_state(0, 0.0).panic_time is None and kpa_new_state(1, 0.0).max_panic_pods == 1
    state = kpa_new_state(2, 0.0)
    assert state.panic_time == 0.0 and state.max_panic_pods == 2


# ---------------------------------------------------------------- AIBrix: algorithm/apa_test.go
# TestAPAAlgorithm_ComputeTargetReplicas: (name, pods, target, use per pod, up rate, down rate, want);
# tolerances 0.1 / 0.1 throughout.
AIBRIX_APA = [
    ("basic_scale_up", 2, 30, 45, 2, 2, 3),
    ("scale_up_upto_ceiling", 2, 30, 35, 2, 2, 3),
    ("scale_up_upto_max_scale_up", 2, 30, 90, 2, 2, 4),
    ("scale_up_upto_max_scale_up_ceiling", 2, 30, 90, 2.5, 2, 5),
    ("basic_scale_down", 6, 30, 20, 2, 2, 4),
    ("scale_down_upto_ceiling", 6, 30, 18, 2, 2, 4),
    ("scale_down_upto_max_scale_down", 6, 30, 10, 2, 2, 3),
    ("scale_down_upto_max_scale_down_floor", 6, 30, 5, 2, 2.5, 2),
    ("no_scaling_as_within_up_tolerance", 2, 30, 33, 2, 2, 2),
    ("no_scaling_as_within_down_tolerance", 2, 30, 27, 2, 2, 2),
]


@pytest.mark.parametrize("name, pods, target, use, up_rate, down_rate, want", AIBRIX_APA, ids=[c[0] for c in AIBRIX_APA])
def test_aibrix_apa_table(name, pods, target, use, up_rate, down_rate, want):
    assert apa_target_replicas(float(pods), target, use, 0.1, 0.1, up_rate, down_rate) == want


# ---------------------------------------------------------------- Ray: tests/unit/test_autoscaling_policy.py
def _ray(total: float, current: int, curr_target: int, now: float, state: RayDelayState, target: float,
         up_delay: float, down_delay: float, lo: int, hi: int) -> int:
    """The wrapped default policy: core policy, scaling factors 1, bounds, delay."""
    desired = ray_apply_scaling_factors(ray_core_policy(total, current, target), current)
    desired = max(lo, min(hi, desired))
    return ray_apply_delay(desired, curr_target, now, state, up_delay, down_delay)


@pytest.mark.parametrize("ongoing, want", [(20, 4), (100, 20), (10, 2)])
def test_ray_single_replica_receives_all_requests(ongoing, want):
    # 4 replicas, target 5 ongoing requests, no delays: ongoing / 5
    assert _ray(ongoing, 4, 4, 0.0, RayDelayState(), 5, 0.0, 0.0, 1, 50) == want


def test_ray_replicas_delayed_startup():
    state = RayDelayState()
    args = (1, 0.0, 100000.0, 1, 200)  # target 1, no upscale delay, a downscale delay of 100,000 s
    assert _ray(100, 1, 1, 0.0, state, *args) == 100
    assert _ray(100, 1, 100, 0.1, state, *args) == 100  # no new replica finished starting
    assert _ray(123, 3, 100, 0.2, state, *args) == 123  # two did
    assert _ray(10, 4, 123, 0.3, state, *args) == 123  # drained, but the downscale delay holds


@pytest.mark.parametrize("delay_s", [30.0, 0.0])
def test_ray_fluctuating_ongoing_requests(delay_s):
    # target 50; 100 requests on 1 replica, then 40 on 2, alternately, one control loop (0.1 s) apart
    state = RayDelayState()
    for trial in range(1000):
        now = trial / 10
        if trial % 2 == 0:
            assert _ray(100, 1, 1, now, state, 50, delay_s, delay_s, 1, 10) == (1 if delay_s else 2), trial
        else:
            assert _ray(40, 2, 2, now, state, 50, delay_s, delay_s, 1, 10) == (2 if delay_s else 1), trial


def test_ray_scaling_factor_never_sticks_on_the_way_down():
    # _apply_scaling_factors: 4 replicas, desired 2, factor 0.3: ceil(4 - 0.6) = 4 is the current
    # count, so one fewer; upward, ceil(4 + 0.3 x 6) = 6
    assert ray_apply_scaling_factors(2.0, 4, downscaling_factor=0.3) == 3
    assert ray_apply_scaling_factors(10.0, 4, upscaling_factor=0.3) == 6


# ---------------------------------------------------------------- Dynamo: predictors and sizing
def test_dynamo_predictors():
    c = ConstantPredictor()
    assert c.predict_next() == 0.0
    for v in (3.0, math.nan):
        c.add_data_point(v)
    assert c.predict_next() == 0.0  # NaN recorded as 0, as BasePredictor.add_data_point
    m = MovingAveragePredictor(window_size=3)
    for v in (1.0, 2.0, 3.0, 10.0):
        m.add_data_point(v)
    assert m.predict_next() == pytest.approx(5.0)  # (2 + 3 + 10) / 3


def test_erlang_c_and_sla_throughput():
    # M/M/1: P(wait > t) = rho e^{-(mu - lambda) t}: 0.5 e^{-0.5 x 2} = 0.18394
    assert erlang_c_wait_tail(1, 0.5, 1.0, 2.0) == pytest.approx(0.5 * math.exp(-1.0))
    # M/M/2 at a = 1: C(2, 1) = (1/2 / (1 - 1/2)) / (1 + 1 + 1) = 1/3
    assert erlang_c_wait_tail(2, 1.0, 1.0, 0.0) == pytest.approx(1 / 3)
    # The throughput at the SLA meets it at the quantile, and a little more does not.
    lam = sla_throughput_per_group(6, 8.0, 0.5, 3.0, 0.99)
    assert 0 < lam < 6 / 8.0
    assert erlang_c_wait_tail(6, lam, 8.0, 2.5) <= 0.01 < erlang_c_wait_tail(6, lam * 1.01, 8.0, 2.5)
    assert sla_throughput_per_group(6, 8.0, 3.5, 3.0, 0.99) == 0.0  # the prefill alone misses the target


def _trace(times, inp=1000, out=100) -> Trace:
    t = np.asarray(times, dtype=float)
    n = len(t)
    return Trace(format="csv", path="-", start_epoch_s=0.0, t_s=t, input_tokens=np.full(n, inp, dtype=np.int64),
                 output_tokens=np.full(n, out, dtype=np.int64), session=np.full(n, -1, dtype=np.int64),
                 prefix_blocks=None, span_s=(0.0, float(t[-1])), requests_read=n, bad_rows=0, gap_windows=[])


def _fleet(phases, per_group_load):
    names = ("g1", "g2", "g3")
    fleet = FleetState({n: GroupState(n, Phase(p), 0.0) for n, p in zip(names, phases)})
    groups = {n: GroupSignals(running=min(per_group_load, 6), queued=max(per_group_load - 6, 0), kv_usage=0.1)
              for n, p in zip(names, phases) if p == "ready"}
    return fleet, groups


def _tick(ctl, now, phases, per_group_load):
    fleet, groups = _fleet(phases, per_group_load)
    return ctl.tick(now, SignalSnapshot(now, groups, GroupSignals()), fleet)


def test_dynamo_planner_sizes_for_the_predicted_interval():
    policy = make_policy()  # 6 slots, prefill 2,500/s, decode 20/s, TTFT 3 s at p99
    # 360 requests in the 180 s before 200 s (2 a second), 1,000 in / 100 out tokens each
    trace = _trace(np.arange(0, 400, 0.5))
    ctl = DynamoPlannerController(policy, trace)
    n, isl, osl = ctl.observe(200.0 + policy.simulation.scrape_interval_s)
    assert (n, isl, osl) == (360.0, 1000.0, 100.0)
    # service 0.4 + 5 = 5.4 s, wait budget 3 - 0.4 = 2.6 s: one group takes lam requests/s at p99
    lam = sla_throughput_per_group(6, 5.4, 0.4, 3.0, 0.99)
    want = max(1, math.ceil(2.0 / lam))  # 2 a second is 10.8 slots busy on average: more than one group
    assert lam < 6 / 5.4 and ctl.replicas(360.0, 1000.0, 100.0) == want > 1
    # A looser TTFT target sizes for more per group: fewer groups for the same load.
    loose = DynamoPlannerController(policy, trace, ttft_target_s=9.0)
    assert loose.replicas(360.0, 1000.0, 100.0) < want or want == 1
    # An interval without requests: no adjustment (its metrics are NaN)
    empty = DynamoPlannerController(policy, _trace([0.0, 5000.0]))
    assert _tick(empty, 1000.0, ("ready", "ready", "ready"), 0.0) == ([], [])


# ---------------------------------------------------------------- the controllers on the fleet
def test_kpa_holds_in_its_start_panic_then_scales_on_the_stable_window():
    policy = make_policy()
    kpa = KpaController(policy, 0.0)  # target 0.7 x 6 = 4.2 per group; starts at the ceiling in panic
    ready3 = ("ready", "ready", "ready")
    # Total load 3 (1 a group): ceil(3 / 4.2) = 1, but the start panic (3 pods) holds for 60 s.
    for now in range(0, 62, 2):
        assert _tick(kpa, float(now), ready3, 1.0) == ([], []), now
    # 62 s: un-panicked; max scale-down rate 2 allows floor(3 / 2) = 1: both others drain at once
    assert _tick(kpa, 62.0, ready3, 1.0) == ([], ["g3", "g2"])
    # A surge on the one group left: panic value 9 / 4.2 -> 3 >= 2 x 1 ready: panic, start two
    kpa2 = KpaController(policy, 0.0)
    kpa2.state.panic_time = None
    assert _tick(kpa2, 0.0, ("ready", "off", "off"), 9.0) == (["g2", "g3"], [])


def test_kpa_windows_after_a_gap_in_its_samples():
    # Samples every 2 s from 0 to 10 s (load 6, all within the 6 s panic window at 10 s: 6, 8, 10),
    # then none for 100 s (no ready group was read), then one at 110 s (load 12). Every older sample
    # is out of both windows: stable = panic = 12 / 1. (The running panic count once kept the
    # samples the stable window had dropped, and the next window read raised IndexError.)
    kpa = KpaController(make_policy(), 0.0)
    for now in range(0, 12, 2):
        kpa._windows(float(now), 6.0)
    assert kpa._windows(110.0, 12.0) == (12.0, 12.0)
    assert kpa._windows(112.0, 0.0) == (6.0, 6.0)  # (12 + 0) / 2 in both
    assert kpa._windows(117.0, 3.0) == (5.0, 1.5)  # stable (12 + 0 + 3) / 3; panic (0 + 3) / 2


def test_apa_tolerance_and_scale_down_cooldown():
    policy = make_policy()
    apa = ApaController(policy, 0.0)  # expected 4.2 per group, cooldown 300 s
    # 4.5 a group: 4.5 / 4.2 = 1.07 within the 10% tolerance
    assert _tick(apa, 15.0, ("ready", "ready", "off"), 4.5) == ([], [])
    # 6 a group: 1.43 -> ceil(2 x 1.43) = 3
    assert _tick(apa, 30.0, ("ready", "ready", "off"), 6.0) == (["g3"], [])
    apa = ApaController(policy, 0.0)
    # 1 a group on 3: ceil(3 x 0.24) = 1, and floor(3 / 2) = 1; held for the 300 s cooldown
    for now in range(15, 300, 15):
        assert _tick(apa, float(now), ("ready", "ready", "ready"), 1.0) == ([], []), now
    assert _tick(apa, 300.0, ("ready", "ready", "ready"), 1.0) == ([], ["g3", "g2"])


def test_ray_serve_delays_on_timestamps():
    policy = make_policy()
    ray = RayServeController(policy, 0.0)  # target 2 ongoing requests a replica; 30 s up, 600 s down
    # 6 requests on 1 ready group: desired 3, first wanted at 0 s, applied at 30 s (4th sample)
    for now in (0.0, 10.0, 20.0):
        assert _tick(ray, now, ("ready", "off", "off"), 6.0) == ([], []), now
    assert _tick(ray, 30.0, ("ready", "off", "off"), 6.0) == (["g2", "g3"], [])
    # 3 ready at 0.5 a group (mean over 30 s of 1.5): desired ceil(0.75) = 1 after 600 s
    ray = RayServeController(policy, 0.0)
    for now in range(0, 600, 10):
        assert _tick(ray, float(now), ("ready", "ready", "ready"), 0.5) == ([], []), now
    assert _tick(ray, 600.0, ("ready", "ready", "ready"), 0.5) == ([], ["g3", "g2"])


# ---------------------------------------------------------------- the backtest's peers
@pytest.fixture(scope="module")
def azure():
    policy = load_policy(ROOT / "policies/default.yaml").policy
    trace, factor, info = bt.prepare_trace(str(AZURE), "auto", policy, 0.5, 0)
    return policy, trace, factor, info


def test_compare_sweep_reports_every_peer_with_its_source_and_sweep(azure):
    policy, trace, factor, info = azure
    runs = bt.backtest(trace, factor, policy, compare=True, sweep=True, workers=1)
    out = bt.results_json(runs, policy, info, 0.0)
    ref = out["reference"]
    for peer in bt.PEER_NAMES:
        assert ref[peer]["source"] and set(out) - {"trace", "model", "reference", "verdict", "warmup_hours", "scored_from"} <= set(ref[peer])
        sweep = ref[f"{peer}_sweep"]
        knob = bt.peer_knob(peer)
        assert [p[knob] for p in sweep] == sorted(bt.peer_sweep(peer, policy)) and {p["knob"] for p in sweep} == {knob}
        default = next(p for p in sweep if p[knob] == bt.peer_default(peer, policy))
        assert {k: v for k, v in default.items() if k not in ("knob", knob)} == \
            {k: v for k, v in ref[peer].items() if k != "source"}
    v = out["verdict"]
    # dominated_by names exactly the controllers with a dominating point
    assert v["dominated_by"] == (["hpa"] if v["hpa_dominating"] else []) + \
        [p for p in bt.PEER_NAMES if v["peer_dominating"][p]]
    assert v["meets_targets"] == (v["slo_within_0_5pp_of_static"] and v["within_10pct_of_oracle"]
                                  and not v["dominated_by"])


def test_a_peer_point_that_dominates_fails_the_cell():
    ours = {"slo_attainment": 0.99, "node_hours": 100.0}
    static = {"slo_attainment": 0.99, "node_hours": 120.0}
    oracle = {"slo_attainment": 0.99, "node_hours": 95.0}
    hpa = [{"slo_attainment": 0.90, "node_hours": 80.0 + i, "target_utilization": t} for i, t in enumerate(bt.HPA_TARGETS)]
    beaten = {"kpa": [{"slo_attainment": 0.995, "node_hours": 99.0, "knob": "target_utilization", "target_utilization": 0.8}]}
    tie = {"kpa": [{"slo_attainment": 0.995, "node_hours": 99.6, "knob": "target_utilization", "target_utilization": 0.8}]}
    assert bt.verdict(ours, static, oracle, hpa, tie)["meets_targets"]  # 99.6 is not < 0.995 x 100
    v = bt.verdict(ours, static, oracle, hpa, beaten)
    assert v["dominated_by"] == ["kpa"] and v["peer_dominating"]["kpa"]["target_utilization"] == 0.8
    assert not v["meets_targets"]


def test_simulate_reference_cache_replays_nothing_the_second_time(tmp_path):
    cache = tmp_path / "cache"

    def run():
        p = subprocess.run([sys.executable, "-m", "autoscaler", "simulate", "--policy", "policies/default.yaml",
                            "--trace", str(AZURE), "--compare", "--json", "--reference-cache", str(cache)],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    first = run()
    entries = sorted(cache.iterdir())
    # one file per reference run (the rate oracle is not defined for Azure's recorded arrivals)
    assert len(entries) == len(bt.reference_names()) - 1
    second = run()
    assert second["reference"] == first["reference"] and second["verdict"] == first["verdict"]
    for f in entries:  # a cached summary is what is reported: change one, see it
        data = json.loads(f.read_text())
        if data["name"] == "kpa":
            data["summary"]["node_hours"] = 1.0
            f.write_text(json.dumps(data))
    assert run()["reference"]["kpa"]["node_hours"] == 1.0
