"""Signals read straight from workers' /metrics (no Prometheus): parsing, the windowed rate and
percentiles, and problems for an unreachable expected group."""

from __future__ import annotations

import math

import pytest

from autoscaler.adapters.direct_signals import DirectSignals, _quantile, parse_exposition
from autoscaler.adapters.worker_probe import parse_gauge_sum
from tests.support.live import write_policy
from tests.support.procs import free_port

TEXT = """# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{tp_rank="0"} 3.0
sglang:num_running_reqs{tp_rank="1"} 2.0
sglang:num_running_reqs_total 99
sglang:time_to_first_token_seconds_bucket{le="0.5"} 2
sglang:time_to_first_token_seconds_bucket{le="1"} 6
sglang:time_to_first_token_seconds_bucket{le="+Inf"} 10
"""


def test_gauges_sum_over_series_and_kin_metrics_are_kept_apart():
    assert parse_gauge_sum(TEXT, "sglang:num_running_reqs") == 5.0
    assert parse_gauge_sum(TEXT, "sglang:num_queue_reqs") is None  # absent, not 0
    assert parse_gauge_sum("sglang:num_running_reqs NaN\n", "sglang:num_running_reqs") is None
    values, buckets = parse_exposition(TEXT, "sglang:")
    assert buckets["sglang:time_to_first_token_seconds_bucket"] == {0.5: 2.0, 1.0: 6.0, math.inf: 10.0}


def test_quantile_interpolates_inside_a_bucket_like_histogram_quantile():
    b = {0.5: 2.0, 1.0: 6.0, math.inf: 10.0}
    # rank 0.5 x 10 = 5, inside (0.5, 1]: 0.5 + 0.5 x (5 - 2) / (6 - 2) = 0.875
    assert _quantile(0.5, b) == 0.875
    # rank 0.99 x 10 = 9.9 falls in +Inf: the highest finite bound, as PromQL does
    assert _quantile(0.99, b) == 1.0
    assert _quantile(0.5, {0.5: 0.0, math.inf: 0.0}) is None  # no observations: unknown


def test_an_expected_group_that_cannot_be_read_is_a_problem_not_a_zero(tmp_path):
    from autoscaler.policy.loader import load_policy

    policy = load_policy(write_policy(tmp_path / "p.yaml", ports=[free_port() for _ in range(3)])).policy
    source = DirectSignals(policy, timeout_s=0.5)
    try:
        snap = source.read(expected_groups=["g1"])
    finally:
        source.close()
    assert snap.groups["g1"].running is None and snap.fleet.running is None
    assert {(p.signal, p.group, p.kind) for p in snap.problems} == {
        ("running", "g1", "unreachable"), ("queued", "g1", "unreachable"), ("kv_usage", "g1", "unreachable")}


def test_a_value_out_of_its_physical_range_is_a_named_problem_read_directly_too(tmp_path):
    """The same ranges as the Prometheus path: KV use 1e308 and -3 running are problems, not readings."""
    from autoscaler.policy.loader import load_policy
    from tests.support.exporter import Exporter

    exporter = Exporter().start()
    try:
        exporter.set(running=-3, queued=1, kv_usage=1e308)
        port = int(exporter.address.rsplit(":", 1)[1])
        policy = load_policy(write_policy(tmp_path / "p.yaml", ports=[port, free_port(), free_port()])).policy
        source = DirectSignals(policy, timeout_s=2.0)
        try:
            snap = source.read(expected_groups=["g1"])
        finally:
            source.close()
    finally:
        exporter.stop()
    kinds = {(p.signal, p.group, p.kind) for p in snap.problems}
    assert {("running", "g1", "out_of_range"), ("kv_usage", "g1", "out_of_range")} <= kinds
    assert snap.groups["g1"].running is None and snap.groups["g1"].kv_usage is None
    assert snap.groups["g1"].queued == 1 and snap.fleet.running is None


def test_the_share_of_first_tokens_over_the_target_is_read_directly_too(tmp_path):
    """Two reads a second apart of a worker whose first tokens all take 5 s (over the 3 s target):
    in the (2.5, 5] bucket, interpolated as histogram_quantile does, 1 - 0.5 / 2.5 = 0.8 of them are
    over; then 7 s (the (5, 10] bucket): all of them. One read: unknown."""
    import time

    from autoscaler.policy.loader import load_policy
    from tests.support.exporter import Exporter

    exporter = Exporter().start()
    try:
        exporter.set(running=1, queued=0, kv_usage=0.1)
        exporter.set_ttft(5.0, 20.0)
        port = int(exporter.address.rsplit(":", 1)[1])
        policy = load_policy(write_policy(tmp_path / "p.yaml", ports=[port, free_port(), free_port()])).policy
        assert policy.slo.ttft_target_s == 3.0
        source = DirectSignals(policy, timeout_s=2.0)
        try:
            first = source.read(expected_groups=["g1"])
            time.sleep(1.0)
            second = source.read(expected_groups=["g1"])
            exporter.set_ttft(7.0, 20.0)
            time.sleep(1.0)
            third = source.read(expected_groups=["g1"])
            exporter.set_ttft(1.0, 20.0)  # now every first token within the target
            time.sleep(1.0)
            fourth = source.read(expected_groups=["g1"])
        finally:
            source.close()
    finally:
        exporter.stop()
    assert first.ttft_over_target is None  # one read: no window yet
    assert second.ttft_over_target == pytest.approx(0.8)
    assert 0.8 < third.ttft_over_target < 1.0  # the window holds both
    assert 0.0 < fourth.ttft_over_target < third.ttft_over_target
