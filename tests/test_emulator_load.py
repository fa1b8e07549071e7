"""``autoscaler emulate load``: planning a replay, and replaying against the real gateway."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import numpy as np

from autoscaler.emulator.engine import count_text_tokens
from autoscaler.emulator.loadgen import build_prompts, plan_requests
from tests.support.procs import PYTHON, REPO, emulated_worker, gateway, start_worker, wait_until

MOONCAKE = REPO / "examples/traces/mooncake-fast25-conversation/conversation_trace.jsonl"
SUMMARY_KEYS = {"sent", "ok", "failed", "ttft_p50_s", "ttft_p99_s", "failures"}


def write_trace(path: Path, n: int, *, rate_per_s: float, sessions: int, out_tokens=(20, 60), seed=1) -> Path:
    """A csv trace (timestamp_s,input_tokens,output_tokens,session_id) of ``n`` Poisson arrivals."""
    rng = random.Random(seed)
    t = 0.0
    lines = ["timestamp_s,input_tokens,output_tokens,session_id"]
    for i in range(n):
        t += rng.expovariate(rate_per_s)
        lines.append(f"{t:.3f},{rng.randint(200, 1500)},{rng.randint(*out_tokens)},s{i % sessions}")
    path.write_text("\n".join(lines) + "\n")
    return path


def run_load(*args: str, timeout: float = 60, full_cli: bool = True) -> subprocess.CompletedProcess:
    """``autoscaler emulate load ARGS``; ``full_cli=False`` runs ``python -m autoscaler.emulator
    load``, the same command without importing every other subcommand (1.5 s less a run)."""
    cmd = ["-m", "autoscaler", "emulate", "load"] if full_cli else ["-m", "autoscaler.emulator", "load"]
    return subprocess.run([PYTHON, *cmd, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def test_plan_is_bounded_by_count_and_by_replay_time():
    t = np.arange(100, dtype=float) + 5.0  # one request a second, from t = 5 s
    inp, out = np.full(100, 100), np.full(100, 10)
    # 10x faster: request i is sent at i / 10 s; 2 s of replay hold requests 0..20.
    assert len(plan_requests(t, inp, out, speedup=10, max_requests=1000, max_seconds=2.0)) == 21
    assert len(plan_requests(t, inp, out, speedup=10, max_requests=7, max_seconds=2.0)) == 7
    plan = plan_requests(t, inp, out, speedup=2, max_requests=3, max_seconds=60)
    assert [p.at_s for p in plan] == [0.0, 0.5, 1.0]


def test_prompts_have_the_trace_length_and_share_prefixes_as_the_trace_says():
    # Sessions: a later turn starts with the whole earlier prompt of its session.
    prompts = build_prompts([300, 500, 400, 800], session=[0, 1, 0, 0])
    for n, p in zip([300, 500, 400, 800], prompts):
        assert count_text_tokens("<user>" + p) == n  # what the emulator will count
    assert prompts[2].startswith(prompts[0]) and prompts[3].startswith(prompts[2])
    assert prompts[1][:10] != prompts[0][:10]
    # A turn shorter than the earlier one keeps as much of it as fits.
    short = build_prompts([300, 100], session=[4, 4])
    assert short[0].startswith(short[1])
    # Without sessions every prompt differs from its first characters.
    alone = build_prompts([300, 300], session=[-1, -1])
    assert alone[0][:12] != alone[1][:12]
    # Mooncake blocks of 512 tokens: the same leading ids give the same leading text.
    mc = build_prompts([1500, 1500, 1500], prefix_blocks=[(0, 1, 2), (0, 1, 9), (5, 1, 2)])
    assert mc[0][:2048 * 2] == mc[1][:2048 * 2] and mc[0][2048 * 2:] != mc[1][2048 * 2:]
    assert mc[2][:20] != mc[0][:20]


def test_load_through_gateway_counts_every_request_and_keeps_sessions_on_their_worker(tmp_path):
    trace = write_trace(tmp_path / "t.csv", 40, rate_per_s=40, sessions=5)
    fast = dict(decode_tokens_per_s=2000, prefill_tokens_per_s=50000)
    with emulated_worker(tmp_path, name="w1", **fast) as w1, emulated_worker(tmp_path, name="w2", **fast) as w2, \
            gateway(tmp_path, worker_urls=[w1.url, w2.url],
                    extra_args=["--cache-threshold", "0.5", "--balance-abs-threshold", "4"]) as gw:
        gw.wait_healthy(w2.url)
        outcomes = tmp_path / "outcomes.jsonl"
        r = run_load("--target", gw.url, "--trace", str(trace), "--max-requests", "30", "--max-seconds", "20",
                     "--outcomes", str(outcomes), "--json")
        assert r.returncode == 0, r.stderr
        summary = json.loads(r.stdout)  # stdout is exactly one JSON object
        assert set(summary) == SUMMARY_KEYS
        assert summary["sent"] == 30  # --max-requests, of 40 in the trace
        assert summary["ok"] == 30 and summary["failed"] == 0 and summary["failures"] == {}
        assert 0 < summary["ttft_p50_s"] <= summary["ttft_p99_s"] < 5
        rows = [json.loads(x) for x in outcomes.read_text().splitlines()]
        assert len(rows) == 30 and all(x["reason"] == "ok" for x in rows)
        done = [w1.state()["requests_done"], w2.state()["requests_done"]]
        assert sum(done) == 30
        # Later turns extend earlier prompts: with cache_aware most of their prefill is cached.
        cached = [float(_metric(w.url, "sglang:cached_tokens_total")) for w in (w1, w2)]
        prompt = [float(_metric(w.url, "sglang:prompt_tokens_total")) for w in (w1, w2)]
        assert sum(cached) / sum(prompt) > 0.3


def test_load_classifies_failures_when_a_worker_is_killed(tmp_path):
    # 24 requests over about 0.6 s, 50 output tokens at 50 tokens/s (1 s each), 2 workers.
    trace = write_trace(tmp_path / "t.csv", 24, rate_per_s=40, sessions=24, out_tokens=(50, 50))
    slow = dict(decode_tokens_per_s=50, prefill_tokens_per_s=50000)
    with emulated_worker(tmp_path, name="w1", **slow) as w1:
        w2 = start_worker(tmp_path, name="w2", **slow)
        try:
            with gateway(tmp_path, worker_urls=[w1.url, w2.url], extra_args=["--balance-abs-threshold", "2"]) as gw:
                gw.wait_healthy(w2.url)
                outcomes = tmp_path / "outcomes.jsonl"
                load = subprocess.Popen(
                    [PYTHON, "-m", "autoscaler", "emulate", "load", "--target", gw.url, "--trace", str(trace),
                     "--max-requests", "24", "--max-seconds", "20", "--request-timeout-s", "20",
                     "--outcomes", str(outcomes), "--json"],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
                try:
                    wait_until(lambda: w2.state()["in_flight"] >= 2, 15.0, what="w2 busy", proc=w2.proc)
                    w2.proc.kill()  # SIGKILL: its open streams are cut
                    out, err = load.communicate(timeout=45)
                finally:
                    if load.poll() is None:
                        load.kill()
                        load.wait()
        finally:
            w2.proc.kill()
    assert load.returncode == 0, err
    summary = json.loads(out)
    assert summary["sent"] == 24 and summary["sent"] == summary["ok"] + summary["failed"]
    assert summary["failed"] >= 1
    assert sum(summary["failures"].values()) == summary["failed"]
    # w2 had 2 or more requests open when it died; they had their 200 and were cut mid-stream.
    assert summary["failures"].get("stream_cut", 0) >= 1, summary
    rows = [json.loads(x) for x in outcomes.read_text().splitlines()]
    cut = [x for x in rows if x["reason"] == "stream_cut"]
    assert all(x["status"] == 200 and not x["ok"] for x in cut)


def test_peak_utilization_scales_a_real_trace_with_the_policy(tmp_path):
    with emulated_worker(tmp_path, decode_tokens_per_s=5000, prefill_tokens_per_s=500000) as w:
        r = run_load("--target", w.url, "--trace", str(MOONCAKE), "--peak-utilization", "0.5",
                     "--policy", str(REPO / "policies/default.yaml"), "--speedup", "20",
                     "--max-seconds", "3", "--max-requests", "500", "--json")
        assert r.returncode == 0, r.stderr
        summary = json.loads(r.stdout)
        # The first 60 s of the trace hold 185 requests; at 0.5 x 18 slots Mooncake is thinned
        # (factor below 1), so fewer arrive in the same 3 s x 20 = 60 s of trace time.
        factor = float(next(x for x in r.stderr.splitlines() if "load scale" in x).split("load scale ")[1].split()[0])
        assert 0 < factor < 1
        assert 0 < summary["sent"] < 185
        assert summary["sent"] == summary["ok"] and summary["failures"] == {}


def test_bad_input_exits_2_and_an_unreachable_target_exits_1(tmp_path):
    trace = write_trace(tmp_path / "t.csv", 5, rate_per_s=10, sessions=1)
    r = run_load("--target", "http://127.0.0.1:9", "--trace", str(tmp_path / "missing.csv"), full_cli=False)
    assert r.returncode == 2 and "missing.csv" in r.stderr
    r = run_load("--target", "http://127.0.0.1:9", "--trace", str(trace), "--max-requests", "0", full_cli=False)
    assert r.returncode == 2 and "--max-requests" in r.stderr
    # Nothing listens on a port we just freed: a runtime failure, not 5 failed requests.
    from tests.support.procs import free_port

    r = run_load("--target", f"http://127.0.0.1:{free_port()}", "--trace", str(trace), "--json", full_cli=False)
    assert r.returncode == 1 and r.stdout == "" and "unreachable" in r.stderr


def _metric(url: str, name: str) -> str:
    import httpx

    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith(name + "{"):
            return line.rsplit(" ", 1)[1]
    raise AssertionError(f"{name} not in {url}/metrics")


def test_peak_utilization_with_a_speedup_offers_that_share_of_the_slots_not_speedup_times_it():
    """Issue 35 #14: ``--peak-utilization 1.1 --speedup 20`` offered 20 x 1.1 = 22 times the fleet's
    slots (the queue reached 494). The replay divides times by the speed-up; the workers serve at
    their own speed, so the busiest 300 s of trace time (300 / 20 = 15 s of replay) must offer
    1.1 x 18 = 19.8 requests at once: arrivals in it / 15 s x the mean service time."""
    import argparse

    from autoscaler.emulator.loadgen import load_plan
    from autoscaler.policy.loader import load_policy
    from autoscaler.sim.loadscale import busiest_window, service_times_s

    policy = load_policy(REPO / "policies/default.yaml").policy
    slots = policy.fleet.ceiling_groups * policy.fleet.requests_per_group  # 3 x 6 = 18
    prefill, decode = policy.simulation.prefill_tokens_per_s, policy.simulation.decode_tokens_per_s
    for speedup in (1.0, 20.0):
        args = argparse.Namespace(trace=str(MOONCAKE), trace_format="auto", start_at=None, peak_utilization=1.1,
                                  policy=str(REPO / "policies/default.yaml"), speedup=speedup,
                                  max_requests=10**7, max_seconds=10**7, seed=0)
        plan = load_plan(args, lambda _msg: None)
        at = np.array([p.at_s for p in plan])
        mean_service = float(np.mean(service_times_s(np.array([p.input_tokens for p in plan]),
                                                     np.array([p.output_tokens for p in plan]), prefill, decode)))
        width = 300.0 / speedup
        arrivals, _start = busiest_window(at, width)
        offered = arrivals / width * mean_service
        # The thinning is a seeded draw: within 15% of 19.8 (20 x 19.8 = 396 before the fix).
        assert abs(offered - 1.1 * slots) <= 0.15 * 1.1 * slots, (speedup, offered, arrivals, len(plan))
