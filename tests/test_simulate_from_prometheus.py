"""``autoscaler simulate --from-prometheus``: recorded counters replayed through the backtest.

One Prometheus holds recorded history (TSDB blocks made by ``promtool tsdb create-blocks-from
openmetrics`` before it starts) of four "fleets", told apart by their ``instance`` labels the
way policies tell groups apart:

- A: two workers over 6 hours at 15 s, request rate 0.3 + 0.2 sin(2 pi t / 2 h) per second
  (60% / 40%), prompt and generated token counters with 800 / 150 tokens per request in the
  first 3 hours and 2,000 / 250 after; worker A2 restarts at 4 h (its counters reset to 0);
- B: one worker, 0.2 requests/s, no token counters, scraped 7 s off the step grid;
- C: one worker, 0.5 requests/s, with a 20-minute hole in the samples (Prometheus down);
- E: one worker sampled every second for 22,400 s at 0.25 requests/s, read at a 2 s step:
  11,200 points, more than the 11,000 a range query may return.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autoscaler.adapters.prom_history import fleet_selector, history_queries, prepare_prometheus_trace
from autoscaler.adapters.prometheus import PrometheusError, query_range_split
from autoscaler.core.types import parse_time
from autoscaler.policy.loader import load_policy
from autoscaler.sim.backtest import backtest, results_json
from autoscaler.sim.loadscale import length_table
from tests.support.procs import REPO, free_port
from tests.support.prometheus import Series, prepare, write_signal_policy

START = parse_time("2026-01-05T00:00:00Z")
SCRAPE_S = 15
HOURS = 6
END = START + HOURS * 3600
POINTS = HOURS * 3600 // SCRAPE_S + 1  # 1,441 samples per series
HALF = START + 3 * 3600
RESET_AT = START + 4 * 3600
A1, A2, B1, C1, E1 = (f"127.0.0.1:{port}" for port in (31001, 31002, 31003, 31004, 31005))
A_INPUT, A_OUTPUT = (800, 2000), (150, 250)  # tokens per request before / after HALF
B_RATE, C_RATE, E_RATE = 0.2, 0.5, 0.25
C_GAP = (START + 2 * 3600, START + 2 * 3600 + 1200)  # no samples strictly inside
E_SECONDS, E_STEP = 22_400, 2

KEYS = {"requests", "load_scale", "node_hours", "baseline_node_hours", "savings_pct", "slo_attainment",
        "ttft_p50_s", "ttft_p99_s", "scale_ups", "scale_downs", "requests_cut_by_drain", "wall_s", "trace", "model"}
TRACE_KEYS = {"format", "requests_read", "bad_rows", "gap_windows"}
MODEL_KEYS = {"prefill_tokens_per_s", "decode_tokens_per_s", "startup_s", "requests_per_group", "slo_ttft_s"}


def iso(t: float) -> str:
    return np.datetime_as_string(np.datetime64(int(t), "s")) + "Z"


def cumulative_a(t: float) -> float:
    """Fleet A's requests from START to t: the integral of 0.3 + 0.2 sin(2 pi s / 7200)."""
    s = t - START
    return 0.3 * s + 0.2 * 7200 / (2 * math.pi) * (1 - math.cos(2 * math.pi * s / 7200))


def fleet_a() -> tuple[list[Series], dict]:
    """Counters of A1 (60% of the requests) and A2 (40%, reset at RESET_AT) and the truth."""
    times = [START + i * SCRAPE_S for i in range(POINTS)]
    series, truth = [], {"requests": 0, "input": [0, 0], "output": [0, 0], "requests_half": [0, 0]}
    for instance, share in ((A1, 0.6), (A2, 0.4)):
        total = [math.floor(share * cumulative_a(t)) for t in times]  # whole requests, never falling
        req = prompt = gen = 0.0
        samples: dict[str, list] = {"req": [], "prompt": [], "gen": []}
        for i, t in enumerate(times):
            if i:
                d = total[i] - total[i - 1]
                half = 0 if t <= HALF else 1  # requests counted at t happened in (t - 15 s, t]
                req, prompt, gen = req + d, prompt + d * A_INPUT[half], gen + d * A_OUTPUT[half]
                truth["requests"] += d
                truth["requests_half"][half] += d
                truth["input"][half] += d * A_INPUT[half]
                truth["output"][half] += d * A_OUTPUT[half]
            if instance == A2 and t == RESET_AT:  # the worker restarted: counters from 0
                req = prompt = gen = 0.0
            samples["req"].append((t, req))
            samples["prompt"].append((t, prompt))
            samples["gen"].append((t, gen))
        labels = {"instance": instance, "job": "sglang", "model_name": "m"}
        series += [
            Series("sglang:num_requests_total", labels, samples["req"], kind="counter"),
            Series("sglang:prompt_tokens_total", labels, samples["prompt"], kind="counter"),
            Series("sglang:generation_tokens_total", labels, samples["gen"], kind="counter"),
        ]
    return series, truth


def history() -> tuple[list[Series], dict]:
    series, truth_a = fleet_a()
    times = [START + i * SCRAPE_S for i in range(POINTS)]
    # B is scraped 7 s off the step grid, as real scrapes are: rate() extrapolates within each window.
    series.append(Series("sglang:num_requests_total", {"instance": B1, "job": "sglang"},
                         [(t + 7, float(math.floor(B_RATE * (t + 7 - START)))) for t in times[:-1]], kind="counter"))
    series.append(Series("sglang:num_requests_total", {"instance": C1, "job": "sglang"},
                         [(t, C_RATE * (t - START)) for t in times if not C_GAP[0] < t < C_GAP[1]], kind="counter"))
    series.append(Series("sglang:num_requests_total", {"instance": E1, "job": "sglang"},
                         [(START + s, E_RATE * s) for s in range(E_SECONDS + 1)], kind="counter"))
    return series, truth_a


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    series, truth = history()
    prom = prepare(tmp_path_factory.mktemp("history"), [], history=series)
    prom.start()
    prom.truth_a = truth
    yield prom
    prom.close()


@pytest.fixture(scope="module")
def policies(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("policies")
    return {name: write_signal_policy(d / f"{name}.yaml", addrs)
            for name, addrs in (("a", [A1, A2]), ("b", [B1]), ("c", [C1]), ("e", [E1]))}


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autoscaler", "simulate", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)


def simulate_json(*args: str) -> dict:
    done = run_cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def within_poisson(count: float, expected: float, sigmas: float = 5.0) -> bool:
    return abs(count - expected) <= sigmas * math.sqrt(expected)


# ------------------------------------------------------------------------------------ fleet A
def test_replay_with_token_counters(recorded, policies):
    truth = recorded.truth_a
    out = simulate_json("--policy", str(policies["a"]), "--from-prometheus", recorded.url,
                        "--from", iso(START), "--to", iso(END))
    assert KEYS <= set(out) and TRACE_KEYS <= set(out["trace"]) and MODEL_KEYS <= set(out["model"])
    t = out["trace"]
    assert t["format"] == "prometheus" and t["tokens"] == {"input": "recorded", "output": "recorded"}
    assert (t["step_s"], t["steps"], t["requests_read"], t["gap_windows"], t["bad_rows"]) == (60, 360, 360, 0, 0)
    assert (t["replay_from"], t["replay_to"]) == ("2026-01-05T00:00:00Z", "2026-01-05T06:00:00Z")
    # Recorded: the rates summed over both workers (the reset included) give the counters' increase.
    assert t["recorded_requests"] == pytest.approx(truth["requests"], rel=0.005)
    assert t["recorded_input_tokens_per_request"] == pytest.approx(sum(truth["input"]) / truth["requests"], rel=0.005)
    assert t["recorded_output_tokens_per_request"] == pytest.approx(sum(truth["output"]) / truth["requests"], rel=0.005)
    # Replayed: Poisson arrivals at the recorded rates, as recorded (no rescaling by default).
    assert out["load_scale"] == 1.0
    assert within_poisson(out["requests"], truth["requests"]), (out["requests"], truth["requests"])
    assert out["baseline_node_hours"] == pytest.approx(2 * 2 * HOURS)  # ceiling 2 groups of 2 nodes, 6 h
    assert out["requests_cut_by_drain"] >= 0 and 0 < out["slo_attainment"] <= 1


def test_python_api_tokens_per_step_and_same_result_as_the_cli(recorded, policies):
    loaded = load_policy(policies["a"])
    trace, factor, info = prepare_prometheus_trace(recorded.url, START, END, loaded.policy, seed=0)
    assert factor == 1.0 and info["steps"] == 360 and len(trace) > 0
    assert trace.start_epoch_s == START and trace.span_s == (0.0, HOURS * 3600.0)
    assert np.all(np.diff(trace.t_s) >= 0)
    # Each minute's mean tokens per request is the recorded one (whole tokens: within 1 per step).
    step = (trace.t_s // 60).astype(int)
    n = np.bincount(step, minlength=360)
    sums_in = np.bincount(step, weights=trace.input_tokens, minlength=360)
    sums_out = np.bincount(step, weights=trace.output_tokens, minlength=360)
    first, second = slice(0, 180), slice(181, 360)  # the minute ending at HALF holds only first-half requests
    for part, (inp, outp) in ((first, (A_INPUT[0], A_OUTPUT[0])), (second, (A_INPUT[1], A_OUTPUT[1]))):
        assert np.all(np.abs(sums_in[part] - inp * n[part]) <= 1.0 + 1e-6)
        assert np.all(np.abs(sums_out[part] - outp * n[part]) <= 1.0 + 1e-6)
    # ...while requests differ from one another: the length table's spread, rescaled.
    assert trace.input_tokens[: n[:180].sum()].std() > 200
    # The same seed gives the same arrivals and the same backtest as the command.
    runs = backtest(trace, factor, loaded.policy, compare=False, seed=0)
    api = results_json(runs, loaded.policy, info, 0.0)
    cli = simulate_json("--policy", str(policies["a"]), "--from-prometheus", recorded.url,
                        "--from", iso(START), "--to", iso(END))
    for key in ("requests", "node_hours", "slo_attainment", "scale_ups", "scale_downs"):
        assert api[key] == cli[key], key
    other, _, _ = prepare_prometheus_trace(recorded.url, START, END, loaded.policy, seed=1)
    assert len(other) != len(trace) or not np.array_equal(other.t_s, trace.t_s)


def test_peak_utilization_rescales_only_when_given(recorded, policies):
    policy = load_policy(policies["a"]).policy
    plain, factor, _ = prepare_prometheus_trace(recorded.url, START, END, policy)
    scaled, scaled_factor, _ = prepare_prometheus_trace(recorded.url, START, END, policy, peak_utilization=2.0)
    assert factor == 1.0 and plain.load_scale is None
    assert scaled_factor > 1.0 and scaled.load_scale.method == "compress"
    assert scaled.load_scale.achieved_peak_offered >= 2.0 * 12  # 2 x (2 groups x 6 slots)


def test_selector_chooses_the_series(recorded, policies):
    """By default the policy's groups (instance=~"A1|A2") count; --selector replaces that."""
    policy = load_policy(policies["a"]).policy
    escaped = "127\\\\.0\\\\.0\\\\.1"  # a regex dot, its backslash doubled inside the PromQL string
    assert fleet_selector(policy.signals, [A1, A2]) == f'instance=~"{escaped}:31001|{escaped}:31002"'
    out = simulate_json("--policy", str(policies["a"]), "--from-prometheus", recorded.url,
                        "--from", iso(START), "--to", iso(END), "--selector", f'instance="{B1}"')
    b_total = math.floor(B_RATE * HOURS * 3600)
    assert out["trace"]["tokens"] == {"input": "length_table", "output": "length_table"}
    assert out["trace"]["recorded_requests"] == pytest.approx(b_total, rel=0.005)
    assert within_poisson(out["requests"], b_total)


# ------------------------------------------------------------------------------------ fleet B
def test_replay_without_token_counters_uses_the_length_table(recorded, policies):
    out = simulate_json("--policy", str(policies["b"]), "--from-prometheus", recorded.url,
                        "--from", iso(START), "--to", iso(END))
    b_total = math.floor(B_RATE * HOURS * 3600)
    t = out["trace"]
    assert t["tokens"] == {"input": "length_table", "output": "length_table"}
    assert t["recorded_input_tokens_per_request"] is None and t["recorded_output_tokens_per_request"] is None
    assert within_poisson(out["requests"], b_total) and out["load_scale"] == 1.0
    policy = load_policy(policies["b"]).policy
    trace, _, _ = prepare_prometheus_trace(recorded.url, START, END, policy)
    table = length_table()
    # Pairs drawn from the table as they are: every pair is a row of it, and the means agree.
    rows = set(map(tuple, table.tolist()))
    assert all((int(i), int(o)) in rows for i, o in zip(trace.input_tokens[:500], trace.output_tokens[:500]))
    se = table[:, 0].std() / math.sqrt(len(trace))
    assert abs(trace.input_tokens.mean() - table[:, 0].mean()) < 5 * se


def test_compare_timeline_plot_and_ledger_work_on_the_replay(recorded, policies, tmp_path):
    timeline, plot, db = tmp_path / "t.csv", tmp_path / "p.svg", tmp_path / "ledger.db"
    out = simulate_json("--policy", str(policies["b"]), "--from-prometheus", recorded.url,
                        "--from", iso(START), "--to", iso(START + 3 * 3600), "--compare",
                        "--timeline-out", str(timeline), "--plot", str(plot), "--db", f"sqlite:///{db}")
    ref = out["reference"]
    assert set(ref) == {"static", "hpa", "hpa_sweep", "oracle", "oracle_rate", "kpa", "apa", "aibrix_kpa",
                        "ray_serve", "dynamo_planner"}
    assert ref["oracle_rate"] is None  # a Prometheus history is recorded arrivals
    for summary in [ref["static"], ref["hpa"], ref["oracle"], *ref["hpa_sweep"]]:
        assert KEYS - {"trace", "model"} <= set(summary) and summary["requests"] == out["requests"]
    assert [p["target_utilization"] for p in ref["hpa_sweep"]] == [0.5, 0.6, 0.7, 0.8, 0.9]
    assert ref["static"]["node_hours"] == pytest.approx(out["baseline_node_hours"])
    with open(timeline, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 180 and rows[0]["time"].startswith("2026-01-05T00:00")
    assert sum(int(r["arrivals"]) for r in rows) == out["requests"]
    assert plot.read_text().startswith("<svg") and "prometheus" in plot.read_text()
    assert isinstance(out["ledger_run_id"], int)
    # The table (no --json) says where the trace came from.
    text = run_cli("--policy", str(policies["b"]), "--from-prometheus", recorded.url,
                   "--from", iso(START), "--to", iso(START + 3600))
    assert text.returncode == 0, text.stderr
    assert f"trace: prometheus {recorded.url}, 2026-01-05T00:00:00Z to 2026-01-05T01:00:00Z in 60 steps" in text.stdout
    assert "(length_table)" in text.stdout and "load scale x1" in text.stdout


# ------------------------------------------------------------------------------------ fleet C: gaps
def test_gaps_are_counted_filled_inside_and_cut_at_the_edges(recorded, policies):
    policy = load_policy(policies["c"]).policy
    to = END + 1800  # 30 minutes past the recorded history: nothing there
    trace, _, info = prepare_prometheus_trace(recorded.url, START, to, policy)
    # A 60 s window needs two samples; with none strictly inside (7200 s, 8400 s) the steps
    # ending at 7260..8400 s have at most one: 20 steps without data inside, 30 after the end.
    assert (info["steps"], info["gap_windows"], info["gaps_filled"], info["gaps_cut"]) == (390, 50, 20, 30)
    assert info["replay_to"] == "2026-01-05T06:00:00Z" and trace.span_s == (0.0, HOURS * 3600.0)
    assert len(trace.gap_windows) == 50 and trace.gap_windows[0] == (7200.0, 7260.0)
    # Inside the gap the recorded rate on both sides (0.5/s) goes on: not zero traffic.
    in_gap = int(((trace.t_s >= 7200) & (trace.t_s < 8400)).sum())
    assert within_poisson(in_gap, C_RATE * 1200), in_gap
    assert within_poisson(len(trace), C_RATE * HOURS * 3600)


def test_mostly_missing_data_is_warned_about(recorded, policies, caplog):
    policy = load_policy(policies["c"]).policy
    with caplog.at_level(logging.WARNING, logger="autoscaler.adapters.prom_history"):
        _, _, info = prepare_prometheus_trace(recorded.url, END - 3600, END + 2 * 3600, policy)
    assert (info["steps"], info["gap_windows"], info["gaps_cut"]) == (180, 120, 120)
    assert "120 of 180 steps have no data" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="autoscaler.adapters.prom_history"):
        prepare_prometheus_trace(recorded.url, END - 3600, END + 600, policy)  # 10 of 70: no warning
    assert "have no data" not in caplog.text


# ------------------------------------------------------------------------------------ fleet E: long
def test_a_range_over_11000_points_is_split(recorded, policies):
    policy = load_policy(policies["e"]).policy
    end = START + E_SECONDS
    steps = E_SECONDS // E_STEP  # 11,200
    query = history_queries(policy.signals, fleet_selector(policy.signals, [E1]), E_STEP)["requests"]
    with pytest.raises(PrometheusError) as refused:  # in one piece Prometheus refuses it
        query_range_split(recorded.url, query, START + E_STEP, end, E_STEP, max_points=steps)
    assert refused.value.kind == "http_error" and "11,000 points" in refused.value.detail
    out = simulate_json("--policy", str(policies["e"]), "--from-prometheus", recorded.url,
                        "--from", iso(START), "--to", iso(end), "--step", str(E_STEP))
    t = out["trace"]
    assert (t["steps"], t["requests_read"], t["gap_windows"]) == (steps, steps, 0)
    assert t["recorded_requests"] == pytest.approx(E_RATE * E_SECONDS, rel=1e-6)
    assert within_poisson(out["requests"], E_RATE * E_SECONDS)


# ------------------------------------------------------------------------------------ errors
def test_unreachable_prometheus_exits_1_with_one_line(policies):
    url = f"http://127.0.0.1:{free_port()}"
    done = run_cli("--policy", str(policies["a"]), "--from-prometheus", url,
                   "--from", iso(START), "--to", iso(END), "--json", timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "unreachable" in lines[0] and url in lines[0], done.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--from", "2026-01-05T06:00:00", "--to", "2026-01-05T00:00:00"], "--to must be after --from"),
        (["--from", "2026-01-05T06:00:00", "--to", "2026-01-05T06:00:00"], "--to must be after --from"),
        (["--from", "2026-01-05T00:00:00", "--to", "2026-01-05T00:00:30"], "shorter than one --step"),
        (["--to", "2026-01-05T06:00:00"], "--from T is required"),
        (["--from", "2026-01-05T00:00:00"], "--to T is required"),
        (["--from", "2026-01-05T00:00:00", "--to", "2026-01-05T06:00:00", "--trace", "x.csv"], "mutually exclusive"),
        (["--from", "2026-01-05T00:00:00", "--to", "2026-01-05T06:00:00", "--start-at", "2026-01-05"],
         "--start-at applies to --trace"),
        (["--from", "2026-01-05T00:00:00", "--to", "2026-01-05T06:00:00", "--trace-cache", "/tmp/x"],
         "--trace-cache applies to --trace"),
        (["--from", "2026-01-05T00:00:00", "--to", "2026-01-05T06:00:00", "--no-trace-cache"],
         "--no-trace-cache applies to --trace"),
        (["--from", "2026-01-05T00:00:00", "--to", "2026-01-05T06:00:00", "--step", "0"], "--step: 0"),
        (["--from", "2026-01-05T00:00:00", "--to", "2026-01-05T06:00:00", "--selector", "{job=\"x\"}"], "--selector"),
        (["--from", "2026-01-05T00:00:00", "--to", "2026-01-05T06:00:00", "--selector", "job=sglang"],
         "--selector 'job=sglang': HTTP 400: bad_data"),
        (["--from", "2025-01-05T00:00:00", "--to", "2025-01-05T06:00:00"], "no data at any 60 s step"),
        (["--from", "yesterday", "--to", "2026-01-05T06:00:00"], "not an ISO 8601 time"),
    ],
)
def test_bad_input_exits_2_with_one_line(recorded, policies, args, message):
    done = run_cli("--policy", str(policies["a"]), "--from-prometheus", recorded.url, *args, "--json", timeout=60)
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stderr)
    assert message in done.stderr
    if "ISO 8601" not in message:  # argparse's own errors come with a usage line
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "give --trace PATH or --from-prometheus URL"),
        (["--trace", "x.csv", "--from", "2026-01-05T00:00:00"], "--from applies to --from-prometheus"),
    ],
)
def test_trace_source_is_required_and_exclusive(policies, args, message):
    done = run_cli("--policy", str(policies["a"]), *args, timeout=60)
    assert done.returncode == 2 and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
