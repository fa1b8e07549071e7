"""Signals from real worker emulators under real load, checked against the emulators' own /metrics.

Three ``autoscaler emulate worker`` processes, a Prometheus scraping them every second, and two
``autoscaler emulate load`` processes: 8 long requests to w1 (6 run, 2 queue: --max-running 6),
4 to w2, none to w3. While they run, the snapshot shows each worker's gauges within one scrape;
after they finish, its percentiles equal histogram_quantile computed from the workers' buckets.
"""

from __future__ import annotations

import math
import re
import subprocess
import time

import httpx
import pytest

from autoscaler.adapters.histogram import share_above
from autoscaler.adapters.prometheus import read_signals
from autoscaler.policy.loader import load_policy
from tests.support.procs import PYTHON, REPO, start_worker, wait_until
from tests.support.prometheus import running_prometheus, write_signal_policy

# At 20 tokens/s each request holds its slot for about 10 s: the window in which every request of
# both load processes is in flight at once, however far apart a loaded machine starts them.
OUT_TOKENS = 200
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')


def scrape(url: str) -> list[tuple[str, dict[str, str], float]]:
    """The worker's own /metrics: (name, labels, value) per sample."""
    out = []
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            out.append((m.group(1), labels, float(m.group(3))))
    return out


def gauge(samples, name: str) -> float:
    (value,) = [v for n, _, v in samples if n == name]
    return value


def buckets(samples, name: str) -> dict[float, float]:
    return {float(lb["le"]): v for n, lb, v in samples if n == name + "_bucket"}


def histogram_quantile(q: float, cumulative: dict[float, float]) -> float | None:
    """Prometheus 2.42's bucketQuantile over cumulative counts (None where it gives NaN)."""
    les = sorted(cumulative)
    total = cumulative[math.inf]
    if total == 0:
        return None
    rank = q * total
    b = next(i for i, le in enumerate(les[:-1] + [math.inf]) if i == len(les) - 1 or cumulative[le] >= rank)
    if b == len(les) - 1:
        return les[-2]
    start, before = (0.0, 0.0) if b == 0 else (les[b - 1], cumulative[les[b - 1]])
    return start + (les[b] - start) * (rank - before) / (cumulative[les[b]] - before)


def write_trace(path, n: int):
    # n requests within 0.1 s, each a new conversation: 400 prompt tokens, OUT_TOKENS out.
    rows = ["timestamp_s,input_tokens,output_tokens,session_id"]
    rows += [f"{i * 0.1 / n:.3f},400,{OUT_TOKENS},s{i}" for i in range(n)]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_snapshot_matches_the_workers_own_metrics_under_load(tmp_path):
    workers = [start_worker(tmp_path, name=f"w{i}", decode_tokens_per_s=20) for i in (1, 2, 3)]
    loads: list[subprocess.Popen] = []
    try:
        addresses = [f"127.0.0.1:{w.port}" for w in workers]
        policy = load_policy(write_signal_policy(tmp_path / "p.yaml", addresses, signals={"window_s": 60})).policy
        with running_prometheus(addresses, tmp_path / "prom") as prom:
            # From the second scrape on (rate() needs two samples): an idle fleet, and no problem.
            idle = wait_until(lambda: (s := read_signals(policy, prom.url)) and not s.problems and s, 5, what="idle")
            assert idle.fleet.running == 0 and idle.fleet.request_rate == 0 and idle.fleet.ttft_p99_s is None
            assert idle.ttft_over_target is None  # no first token in the window: unknown, not 0
            for w, n in ((workers[0], 8), (workers[1], 4)):
                loads.append(subprocess.Popen(
                    # ``autoscaler emulate load`` without importing every other subcommand.
                    [PYTHON, "-m", "autoscaler.emulator", "load", "--target", w.url,
                     "--trace", str(write_trace(tmp_path / f"{w.port}.csv", n)), "--max-requests", str(n),
                     "--max-seconds", "60", "--request-timeout-s", "60", "--json"],  # a bound on the whole run
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                ))  # fmt: skip
            # Steady: every request admitted (6 + 2 queued on w1, 4 on w2); none done for ~10 s.
            wait_until(lambda: [w.state()["in_flight"] for w in workers] == [8, 4, 0], 20, what="load admitted")  # two Python processes start on a loaded machine
            seen = time.monotonic()
            before = [scrape(w.url) for w in workers]
            want = {"g1": (6, 2), "g2": (4, 0), "g3": (0, 0)}
            assert {g: (gauge(s, "sglang:num_running_reqs"), gauge(s, "sglang:num_queue_reqs"))
                    for g, s in zip(want, before)} == want  # fmt: skip
            snap = wait_until(
                lambda: (s := read_signals(policy, prom.url))
                and {g: (s.groups[g].running, s.groups[g].queued) for g in want} == want and s,
                5, what="snapshot shows the load",
            )
            assert time.monotonic() - seen < 2.5  # one 1 s scrape, plus query time
            assert (snap.fleet.running, snap.fleet.queued) == (10, 2)
            # KV use only grows while requests decode: read it, wait until Prometheus holds a
            # scrape of every worker started after every reading, read the snapshot, read it again.
            # (A scrape stamped between two of our readings may have reached a worker before ours
            # did; and Prometheus may move a stamp by up to 2 ms to its schedule: hence the margin.)
            before = [scrape(w.url) for w in workers]
            read_at = time.time() + 0.01
            wait_until(
                lambda: all(float(r["value"][1]) > read_at
                            for r in prom.query("timestamp(sglang:token_usage)")) and True,
                3, what="a scrape after the first reading",
            )  # fmt: skip
            snap = read_signals(policy, prom.url)
            after = [scrape(w.url) for w in workers]
            for g, b, a in zip(want, before, after):
                lo, hi = gauge(b, "sglang:token_usage"), gauge(a, "sglang:token_usage")
                assert lo - 1e-9 <= snap.groups[g].kv_usage <= hi + 1e-9, (g, lo, snap.groups[g].kv_usage, hi)
            assert snap.groups["g1"].kv_usage > 0 and snap.groups["g3"].kv_usage == 0
            assert snap.problems == ()

            for load in loads:
                out, err = load.communicate(timeout=90)
                assert load.returncode == 0, err
            # All done: wait for a scrape that shows it, then compare the percentiles exactly.
            snap = wait_until(
                lambda: (s := read_signals(policy, prom.url)) and s.fleet.running == 0 and s.fleet.queued == 0 and s,
                5, what="drained",
            )
            final = [scrape(w.url) for w in workers]
            assert snap.problems == ()
            for g, s in zip(want, final):
                for signal, metric in (("ttft_p99_s", "sglang:time_to_first_token_seconds"),
                                       ("queue_wait_p99_s", "sglang:queue_time_seconds")):  # fmt: skip
                    expected = histogram_quantile(0.99, buckets(s, metric))
                    got = getattr(snap.groups[g], signal)
                    assert (got is None) == (expected is None), (g, signal, got, expected)
                    if expected is not None:
                        assert got == pytest.approx(expected, rel=1e-6), (g, signal)
            assert snap.groups["g1"].ttft_p99_s > 4.5  # the 2 queued requests waited ~10 s for a slot
            assert snap.groups["g3"].ttft_p99_s is None  # no requests: idle, not a problem
            fleet_buckets: dict[float, float] = {}
            for s in final:
                for le, count in buckets(s, "sglang:time_to_first_token_seconds").items():
                    fleet_buckets[le] = fleet_buckets.get(le, 0.0) + count
            # Each worker's rate() has its own extrapolation, so the fleet sum is close, not exact.
            assert snap.fleet.ttft_p99_s == pytest.approx(histogram_quantile(0.99, fleet_buckets), rel=0.05)
            # The share of first tokens over the 3 s target (what a drain's moved sessions cost:
            # core/risk.py): w1's 2 queued requests of the 12, ~10 s, in the 8-10 s bucket.
            assert policy.slo.ttft_target_s == 3.0
            assert share_above(fleet_buckets, 3.0) == pytest.approx(2 / 12)
            assert snap.ttft_over_target == pytest.approx(2 / 12, rel=0.05)
            done = [gauge(s, "sglang:num_requests_total") for s in final]
            assert done == [8, 4, 0]
            # rate over 60 s from a first sample of 0: about the count / 60 s (extrapolated to the end).
            assert snap.groups["g1"].request_rate == pytest.approx(8 / 60, rel=0.15)
            assert snap.groups["g3"].request_rate == 0
    finally:
        for load in loads:
            if load.poll() is None:
                load.kill()
                load.wait()
        for w in workers:
            w.proc.kill()
