"""Recorded history: blocks made by promtool, read back by query_range_split and read_signals.

Three days of two workers' samples every 15 s (17,281 points per series) are loaded with
``promtool tsdb create-blocks-from openmetrics`` before Prometheus starts: more than the 11,000
points per series Prometheus allows in one range query.
"""

from __future__ import annotations

import pytest

from autoscaler.adapters.prometheus import PrometheusError, query_range_split, range_chunks, read_signals
from autoscaler.core.types import parse_time
from autoscaler.policy.loader import load_policy
from tests.support.procs import free_port
from tests.support.prometheus import Series, openmetrics_text, prepare, write_signal_policy

START = parse_time("2026-01-05T00:00:00Z")  # the traces' Monday
STEP_S = 15
POINTS = 3 * 86400 // STEP_S + 1  # 17,281
A, B = "127.0.0.1:30001", "127.0.0.1:30002"


def running_a(i: int) -> float:
    return float(i % 7)  # 0..6 requests, changing every sample


def history() -> list[Series]:
    times = [START + i * STEP_S for i in range(POINTS)]
    return [
        Series("sglang:num_running_reqs", {"instance": A, "job": "sglang"}, [(t, running_a(i)) for i, t in enumerate(times)]),
        Series("sglang:num_running_reqs", {"instance": B, "job": "sglang"}, [(t, 2.0) for t in times]),
        Series("sglang:num_queue_reqs", {"instance": A, "job": "sglang"}, [(t, 1.0) for t in times]),
        Series("sglang:num_queue_reqs", {"instance": B, "job": "sglang"}, [(t, 0.0) for t in times]),
        # One request every 15 s on A: rate 1/15 per second.
        Series("sglang:num_requests_total", {"instance": A, "job": "sglang"},
               [(t, float(i)) for i, t in enumerate(times)], kind="counter"),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    prom = prepare(tmp_path_factory.mktemp("history"), [], history=history())
    prom.start()
    yield prom
    prom.close()


def test_openmetrics_text_is_what_promtool_needs():
    text = openmetrics_text([
        Series("x", {"instance": "i"}, [(20.0, 2.0), (10.0, 1.0)]),
        Series("y_total", {}, [(10.0, 5.0)], kind="counter"),
    ])  # fmt: skip
    assert text.splitlines() == [
        "# TYPE x gauge",
        'x{instance="i"} 1.0 10.000',  # seconds, ascending within the series
        'x{instance="i"} 2.0 20.000',
        "# TYPE y counter",
        "y_total 5.0 10.000",
        "# EOF",  # the very last line
    ]


def test_range_chunks_stay_under_the_limit_without_overlap():
    chunks = range_chunks(0, 7 * 86400, 15)  # a week at 15 s: 40,321 points
    assert chunks == [(0, 164985), (165000, 329985), (330000, 494985), (495000, 604800)]
    assert range_chunks(0, 30, 15, max_points=2) == [(0, 15), (30, 30)]


def test_query_range_split_reads_more_than_11000_points_exactly(recorded):
    end = START + (POINTS - 1) * STEP_S
    # One range query for all of it is refused by Prometheus: the reason for splitting.
    with pytest.raises(PrometheusError) as refused:
        query_range_split(recorded.url, "sglang:num_running_reqs", START, end, STEP_S, max_points=POINTS)
    assert refused.value.kind == "http_error" and "11,000 points" in refused.value.detail
    series = query_range_split(recorded.url, "sglang:num_running_reqs", START, end, STEP_S)
    by_instance = {s.labels["instance"]: s.samples for s in series}
    assert set(by_instance) == {A, B}
    assert by_instance[A] == tuple((START + i * STEP_S, running_a(i)) for i in range(POINTS))
    assert by_instance[B] == tuple((START + i * STEP_S, 2.0) for i in range(POINTS))
    # Small chunks (18 of them) give the same samples: merged by label set, none twice.
    small = query_range_split(recorded.url, "sglang:num_running_reqs", START, end, STEP_S, max_points=1000)
    assert {s.labels["instance"]: s.samples for s in small} == by_instance


def test_query_range_split_errors_are_typed(recorded):
    with pytest.raises(PrometheusError) as dead:
        query_range_split(f"http://127.0.0.1:{free_port()}", "up", START, START + 60, 15, timeout_s=2)
    assert dead.value.kind == "unreachable" and dead.value.exit_code == 1
    with pytest.raises(PrometheusError) as bad:
        query_range_split(recorded.url, "rate(sglang:num_running_reqs)", START, START + 60, 15)
    assert bad.value.kind == "http_error" and "bad_data" in bad.value.detail


def test_read_signals_at_a_past_instant_and_staleness_against_that_instant(recorded, tmp_path):
    policy = load_policy(
        write_signal_policy(tmp_path / "p.yaml", [A, B], signals={"window_s": 60, "staleness_s": 60})
    ).policy
    at = START + 1000 * STEP_S  # a sample time: A runs 1000 % 7 = 6
    snap = read_signals(policy, recorded.url, now=at, expected_groups=["g1", "g2"])
    assert (snap.groups["g1"].running, snap.groups["g2"].running, snap.fleet.running) == (6, 2, 8)
    assert (snap.groups["g1"].queued, snap.fleet.queued) == (1, 1)
    assert snap.groups["g1"].request_rate == pytest.approx(1 / 15)
    assert snap.at == at
    # No recorded KV use, TTFT or queue time: those queries find no series at all.
    assert {(p.signal, p.group, p.kind) for p in snap.problems} == {
        ("kv_usage", None, "empty"), ("ttft_p99_s", None, "empty"), ("queue_wait_p99_s", None, "empty"),
        ("request_rate", "g2", "absent"),  # only A recorded a request counter
    }  # fmt: skip
    # Two minutes after the last sample: within Prometheus's 5-minute lookback the gauges still
    # answer (no staleness marker in recorded blocks), but their samples are 120 s old > 60 s.
    end = START + (POINTS - 1) * STEP_S
    late = read_signals(policy, recorded.url, now=end + 120)
    assert {(p.signal, p.group, p.kind) for p in late.problems if p.signal in ("running", "queued")} == {
        ("running", "g1", "stale"), ("running", "g2", "stale"), ("queued", "g1", "stale"), ("queued", "g2", "stale")
    }
    assert "120.0 s old (limit 60 s)" in late.problems[0].detail
    assert late.groups["g1"].running is None and late.fleet.running is None
