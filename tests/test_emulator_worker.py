"""The SGLang worker emulator on its own, as a real process over HTTP.

Speeds are fast (thousands of tokens/s) so that the whole file takes seconds; the arithmetic of
each expected latency is in a comment next to it.
"""

from __future__ import annotations

import asyncio
import math
import signal
import subprocess
import time

import httpx
import pytest

from tests.support.procs import (
    PYTHON,
    chat_body,
    emulated_worker,
    start_worker,
    stream_post,
    wait_http,
    wait_until,
)

LABELS = {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}
# SGLang 0.5.x's default TTFT buckets (python/sglang/srt/metrics/collector.py).
SGLANG_TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]


def metric_values(text: str) -> dict[str, float]:
    """``name -> value`` of the unlabelled-by-le samples of a 0.0.4 exposition (strict enough:
    every sample line must be NAME{LABELS} VALUE)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, value = line.rsplit(" ", 1) if line.count(" ") == 1 else line.split(" ")[:2]
        name = name_labels.split("{", 1)[0]
        if "le=" not in name_labels:
            out[name] = float(value)
    return out


def scrape(url: str) -> dict[str, float]:
    r = httpx.get(url + "/metrics", timeout=5)
    assert r.status_code == 200
    return metric_values(r.text)


def test_health_fails_during_startup_then_passes(tmp_path):
    w = start_worker(tmp_path, wait_ready=False, startup_s=4)
    try:
        # The port listens at once, but /health and inference wait for the start-up (4 s: a loaded CI
        # machine can take over a second between two requests).
        assert httpx.get(w.url + "/health", timeout=2).status_code == 503
        assert httpx.post(w.url + "/v1/chat/completions", json=chat_body("hi", 2, stream=False),
                          timeout=2).status_code == 503
        assert w.state()["ready"] is False
        t0 = time.monotonic()
        wait_http(w.url + "/health", 10.0, proc=w.proc)
        assert time.monotonic() - t0 > 0.3  # it really was still starting when we first asked
        r = httpx.post(w.url + "/v1/chat/completions", json=chat_body("hi", 2, stream=False), timeout=5)
        assert r.status_code == 200
        assert r.json()["usage"]["completion_tokens"] == 2
    finally:
        w.proc.kill()


def test_info_endpoints_look_like_sglang(tmp_path):
    with emulated_worker(tmp_path, max_running=6, model_name="test/model") as w:
        for path in ("/server_info", "/get_server_info"):
            info = httpx.get(w.url + path, timeout=5).json()
            assert info["model_path"] == "test/model"
            assert info["tp_size"] == 2 and info["max_running_requests"] == 6
        for path in ("/model_info", "/get_model_info"):
            assert httpx.get(w.url + path, timeout=5).json()["model_path"] == "test/model"
        models = httpx.get(w.url + "/v1/models", timeout=5).json()
        assert [m["id"] for m in models["data"]] == ["test/model"]


def test_at_most_max_running_the_rest_queue_and_aborts_free_slots(tmp_path):
    # 2 slots, 5 requests of 100 tokens at 50 tokens/s (2 s each): 2 run, 3 wait.
    with emulated_worker(tmp_path, max_running=2, decode_tokens_per_s=50) as w:

        async def scenario():
            tasks = [asyncio.create_task(stream_post(w.url + "/v1/chat/completions",
                                                     chat_body(f"request {i}", 100), timeout_s=20))
                     for i in range(5)]
            seen = []

            def loaded():
                m = scrape(w.url)
                seen.append((m["sglang:num_running_reqs"], m["sglang:num_queue_reqs"]))
                return seen[-1] == (2.0, 3.0)

            await asyncio.to_thread(wait_until, loaded, 10.0, what="2 running and 3 queued")
            assert max(r for r, _ in seen) <= 2
            m = scrape(w.url)
            # token_usage = tokens held by the 2 running requests / 160,000: above 0, far below 1.
            assert 0 < m["sglang:token_usage"] < 0.01
            for t in tasks:  # clients go away: their requests are aborted, slots and queue freed
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run(scenario())
        wait_until(lambda: w.state()["in_flight"] == 0, 10.0, what="aborted requests released")
        m = scrape(w.url)
        assert m["sglang:num_running_reqs"] == 0 and m["sglang:num_queue_reqs"] == 0
        assert m["sglang:num_aborted_requests_total"] == 5
        assert m["sglang:num_requests_total"] == 0


def test_ttft_grows_with_prompt_length_and_with_queueing(tmp_path):
    # 1 slot; prefill 10,000 tokens/s, decode 1,000 tokens/s.
    with emulated_worker(tmp_path, max_running=1, prefill_tokens_per_s=10000, decode_tokens_per_s=1000) as w:
        url = w.url + "/v1/chat/completions"

        async def scenario():
            # 4,000 tokens of prompt: 4000 / 10000 = 0.4 s to the first token; 40 tokens: 4 ms.
            long = await stream_post(url, chat_body("x" * (4000 * 4 - 6), 5))
            short = await stream_post(url, chat_body("y" * (40 * 4 - 6), 5))
            # Two at once through 1 slot: the second waits for the first's 300 output tokens
            # (0.3 s) plus its own 1,000-token prefill (0.1 s): TTFT about 0.1 + 0.3 + 0.1 = 0.5 s.
            first, second = await asyncio.gather(
                stream_post(url, chat_body("a" * (1000 * 4 - 6), 300)),
                stream_post(url, chat_body("b" * (1000 * 4 - 6), 300)),
            )
            return long, short, first, second

        long, short, first, second = asyncio.run(scenario())
        assert long.done and short.done and first.done and second.done
        assert 0.38 <= long.ttft_s < 1.0, long.ttft_s
        assert short.ttft_s < 0.3, short.ttft_s  # 4 ms of prefill; 0.4 s would be the long one's
        a, b = sorted([first.ttft_s, second.ttft_s])
        assert 0.09 <= a < 0.3, a
        assert 0.45 <= b < 1.2, b
        m = scrape(w.url)
        # queue_time histogram: one of the four requests waited about 0.4 s.
        assert m["sglang:queue_time_seconds_sum"] >= 0.35
        assert m["sglang:time_to_first_token_seconds_count"] == 4


def test_prefix_cache_hits_skip_the_prefill(tmp_path):
    # 20,000 prompt tokens at 40,000 tokens/s: 0.5 s without a hit.
    with emulated_worker(tmp_path, prefill_tokens_per_s=40000, decode_tokens_per_s=1000) as w:
        url = w.url + "/v1/chat/completions"
        base = "".join(f"turn {i}: some words of a long conversation. " for i in range(2000))[: 20000 * 4 - 6]

        async def scenario():
            cold = await stream_post(url, chat_body(base, 3, stream_options={"include_usage": True}))
            warm = await stream_post(url, chat_body(base + " and one more question?", 3,
                                                    stream_options={"include_usage": True}))
            other = await stream_post(url, chat_body("Z" + base[1:], 3, stream_options={"include_usage": True}))
            return cold, warm, other

        cold, warm, other = asyncio.run(scenario())
        usage = [r.events[-1]["usage"] for r in (cold, warm, other)]
        assert usage[0]["prompt_tokens_details"]["cached_tokens"] == 0
        # Every 64-character block of the earlier prompt text hits: "<user>" + 79,994 characters
        # = 80,000 = 1,250 blocks of 16 tokens = 20,000 tokens; only the new question is prefilled.
        assert usage[1]["prompt_tokens_details"]["cached_tokens"] == 20000
        assert usage[2]["prompt_tokens_details"]["cached_tokens"] == 0  # differs at character 0
        assert cold.ttft_s >= 0.45 and other.ttft_s >= 0.45
        assert warm.ttft_s < 0.3, warm.ttft_s  # (a miss would prefill for 0.5 s; slack for a loaded machine)
        m = scrape(w.url)
        # hit rate = cached / prompt tokens over the recent requests: 20000 / 60006 = 0.333
        assert m["sglang:cache_hit_rate"] == pytest.approx(20000 / (20000 + 20006 + 20000), rel=1e-6)
        assert m["sglang:cached_tokens_total"] == 20000


def test_streaming_formats(tmp_path):
    with emulated_worker(tmp_path, decode_tokens_per_s=400) as w:

        async def scenario():
            chat = await stream_post(w.url + "/v1/chat/completions",
                                     chat_body("hello", 50, stream_options={"include_usage": True}))
            # The gateway sends max_completion_tokens instead of max_tokens.
            renamed = await stream_post(w.url + "/v1/chat/completions",
                                        {"messages": [{"role": "user", "content": "hi"}],
                                         "max_completion_tokens": 7, "stream": True})
            comp = await stream_post(w.url + "/v1/completions", {"prompt": "hello", "max_tokens": 9, "stream": True})
            gen = await stream_post(w.url + "/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 11},
                                                           "stream": True})
            return chat, renamed, comp, gen

        chat, renamed, comp, gen = asyncio.run(scenario())
        # SSE framing: every event is "data: <json>\n\n" and the last is "data: [DONE]\n\n".
        assert chat.status == 200 and chat.done
        blocks = chat.raw.decode().split("\n\n")
        assert blocks[-1] == "" and blocks[-2] == "data: [DONE]"
        assert all(b.startswith("data: {") for b in blocks[:-2])
        # 50 tokens at 400/s in chunks at least 0.05 s apart (20 tokens each): 1 + ceil(49 / 20) = 4.
        content_events = [e for e in chat.events if e["choices"]]
        assert len(content_events) == 4
        assert content_events[0]["choices"][0]["delta"]["role"] == "assistant"
        assert all(e["object"] == "chat.completion.chunk" for e in chat.events)
        assert [e["choices"][0]["finish_reason"] for e in content_events] == [None, None, None, "length"]
        assert len(chat.content) == 50 * 4  # one 4-character word per token
        assert chat.events[-1]["usage"]["completion_tokens"] == 50
        assert renamed.done and len(renamed.content) == 7 * 4
        assert comp.done and comp.events[0]["object"] == "text_completion" and len(comp.content) == 9 * 4
        # SGLang's native stream carries the text so far in each event.
        assert gen.done and len(gen.events[-1]["text"]) == 11 * 4
        assert gen.events[-1]["meta_info"]["completion_tokens"] == 11
        assert gen.events[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 11}


def test_non_streaming_answers(tmp_path):
    with emulated_worker(tmp_path, decode_tokens_per_s=1000) as w:
        chat = httpx.post(w.url + "/v1/chat/completions", json=chat_body("hello " * 20, 12, stream=False), timeout=10)
        assert chat.status_code == 200
        body = chat.json()
        assert body["object"] == "chat.completion"
        assert body["usage"] == {"prompt_tokens": math.ceil((6 + 120) / 4), "completion_tokens": 12,
                                 "total_tokens": 32 + 12, "prompt_tokens_details": {"cached_tokens": 0}}
        ids = httpx.post(w.url + "/generate", json={"input_ids": list(range(300)),
                                                     "sampling_params": {"max_new_tokens": 4}}, timeout=10).json()
        assert ids["meta_info"]["prompt_tokens"] == 300 and ids["meta_info"]["completion_tokens"] == 4
        bad = httpx.post(w.url + "/v1/chat/completions", json={"messages": "nope"}, timeout=10)
        assert bad.status_code == 400


def test_metrics_text_format_keeps_colon_names_and_labels(tmp_path):
    prometheus_client_parser = pytest.importorskip("prometheus_client.parser")
    with emulated_worker(tmp_path, decode_tokens_per_s=1000, metric_prefix="sglang:") as w:
        httpx.post(w.url + "/v1/chat/completions", json=chat_body("hello", 5, stream=False), timeout=10)
        # Ask the way Prometheus does: OpenMetrics first. The answer must stay 0.0.4 text.
        r = httpx.get(w.url + "/metrics", timeout=5, headers={
            "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"})
        assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
        families = {f.name: f for f in prometheus_client_parser.text_string_to_metric_families(r.text)}
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
                 "sglang:cache_hit_rate", "sglang:gen_throughput"):
        assert families[name].type == "gauge"
        assert set(families[name].samples[0].labels) == LABELS
    for name in ("sglang:num_requests", "sglang:prompt_tokens", "sglang:generation_tokens"):
        assert families[name].type == "counter"  # the parser strips _total from the family name
    assert families["sglang:num_requests"].samples[0].value == 1
    assert families["sglang:generation_tokens"].samples[0].value == 5
    for name in ("sglang:time_to_first_token_seconds", "sglang:e2e_request_latency_seconds",
                 "sglang:queue_time_seconds", "sglang:inter_token_latency_seconds"):
        assert families[name].type == "histogram"
    ttft = families["sglang:time_to_first_token_seconds"]
    bounds = [float(s.labels["le"]) for s in ttft.samples if s.name.endswith("_bucket")]
    assert bounds == SGLANG_TTFT_BUCKETS + [math.inf]
    assert [s.value for s in ttft.samples if s.name.endswith("_count")] == [1]


def test_metrics_pass_promtool_and_the_prefix_is_configurable(tmp_path):
    # promtool (Debian's prometheus package) parses with Prometheus's own text parser; it exits 0,
    # or 3 for lint-only remarks (it dislikes colons in names), and 1 on a parse error.
    with emulated_worker(tmp_path, metric_prefix="emu:") as w:
        text = httpx.get(w.url + "/metrics", timeout=5).text
    assert "emu:num_running_reqs{" in text and "sglang:" not in text
    assert promtool_parses(text)
    assert not promtool_parses(text.replace("emu:token_usage{", "emu:token_usage{{"))


def samples_with_time(text: str) -> dict[str, tuple[float, int | None]]:
    """``name -> (value, timestamp ms or None)`` for the samples without an ``le`` label."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "le=" not in line:
            name_labels, _, rest = line.partition("} ")
            parts = rest.split(" ")
            out[name_labels.split("{", 1)[0]] = (float(parts[0]), int(parts[1]) if len(parts) > 1 else None)
    return out


def promtool_parses(text: str) -> bool:
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=20)
    return check.returncode in (0, 3) and "error while linting" not in check.stdout + check.stderr


def test_fault_modes(tmp_path):
    with emulated_worker(tmp_path, decode_tokens_per_s=1000) as w:
        metrics = w.url + "/metrics"

        def parse(text):
            assert promtool_parses(text)
            return samples_with_time(text)

        w.fault(metrics="http_500")
        assert httpx.get(metrics, timeout=5).status_code == 500

        w.fault(metrics="garbage")
        r = httpx.get(metrics, timeout=5)
        assert r.status_code == 200
        assert not promtool_parses(r.text)

        w.fault(metrics="nan")
        samples = parse(httpx.get(metrics, timeout=5).text)
        assert math.isnan(samples["sglang:num_running_reqs"][0])
        assert math.isnan(samples["sglang:token_usage"][0])

        w.fault(metrics="empty")
        r = httpx.get(metrics, timeout=5)
        assert r.status_code == 200 and r.text == ""

        w.fault(metrics="slow", delay_s=0.6)
        t0 = time.monotonic()
        assert httpx.get(metrics, timeout=5).status_code == 200
        assert time.monotonic() - t0 >= 0.55

        # frozen: the same old samples, each stamped with the freeze time, whatever happens next.
        w.fault(metrics="ok")
        frozen_at = w.fault(metrics="frozen")["frozen_at_ms"]
        httpx.post(w.url + "/v1/chat/completions", json=chat_body("hello", 3, stream=False), timeout=10)
        samples = parse(httpx.get(metrics, timeout=5).text)
        assert samples["sglang:num_requests_total"] == (0, frozen_at)  # the later request is not seen
        assert abs(frozen_at / 1000 - time.time()) < 60

        w.fault(metrics="ok")
        samples = parse(httpx.get(metrics, timeout=5).text)
        assert samples["sglang:num_requests_total"] == (1, None)

        w.fault(health="fail")
        assert httpx.get(w.url + "/health", timeout=5).status_code == 503
        w.fault(health="ok")
        assert httpx.get(w.url + "/health", timeout=5).status_code == 200

        bad = httpx.post(w.url + "/_emulator/fault", json={"metrics": "sideways"}, timeout=5)
        assert bad.status_code == 400 and "sideways" in bad.text


def test_sigterm_finishes_in_flight_and_queued_streams_then_exits_0(tmp_path):
    # 2 slots, 3 streams of 100 tokens at 100 tokens/s (1 s each): the third waits in the queue.
    w = start_worker(tmp_path, max_running=2, decode_tokens_per_s=100)
    try:
        url = w.url + "/v1/chat/completions"

        async def scenario():
            tasks = [asyncio.create_task(stream_post(url, chat_body(f"request {i}", 100), timeout_s=20))
                     for i in range(3)]
            await asyncio.to_thread(wait_until, lambda: w.state()["in_flight"] == 3, 10.0, what="3 in flight")
            w.proc.signal(signal.SIGTERM)
            await asyncio.to_thread(wait_until, lambda: w.state()["draining"], 5.0, what="draining")
            async with httpx.AsyncClient() as c:
                refused = await c.post(url, json=chat_body("late", 5, stream=False), timeout=5)
                health = await c.get(w.url + "/health", timeout=5)
                metrics = await c.get(w.url + "/metrics", timeout=5)  # the drain is read from here
            return await asyncio.gather(*tasks), refused, health, metrics

        results, refused, health, metrics = asyncio.run(scenario())
        assert refused.status_code == 503
        assert health.status_code == 503
        assert metrics.status_code == 200
        assert metric_values(metrics.text)["sglang:num_running_reqs"] + \
            metric_values(metrics.text)["sglang:num_queue_reqs"] >= 1
        for r in results:
            assert r.error is None and r.done, r
            assert len(r.content) == 100 * 4
        assert w.proc.wait(timeout=10) == 0
    finally:
        w.proc.kill()


def test_sigkill_cuts_open_streams(tmp_path):
    w = start_worker(tmp_path, decode_tokens_per_s=50)
    try:
        async def scenario():
            async def kill():
                w.proc.signal(signal.SIGKILL)

            return await stream_post(w.url + "/v1/chat/completions", chat_body("x", 100), on_first=kill)

        r = asyncio.run(scenario())
        assert not r.done and r.error is not None
    finally:
        w.proc.kill()


def test_bad_flags_exit_2(tmp_path):
    r = subprocess.run([PYTHON, "-m", "autoscaler.emulator", "worker", "--port", "1", "--max-running", "0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "--max-running" in r.stderr


def test_explicit_timestamps_and_a_frozen_scrape_repeats_the_last_one_exactly(tmp_path):
    with emulated_worker(tmp_path, explicit_timestamps="") as w:
        before = time.time()
        first = httpx.get(w.url + "/metrics", timeout=5).text
        stamps = {ts for _, ts in samples_with_time(first).values()}
        assert len(stamps) == 1 and before - 1 <= stamps.pop() / 1000 <= time.time() + 1
        frozen_at = w.fault(metrics="frozen")["frozen_at_ms"]
        httpx.post(w.url + "/v1/chat/completions", json=chat_body("hello", 3, stream=False), timeout=10)
        again = httpx.get(w.url + "/metrics", timeout=5).text
        assert again == first  # the same samples with the same stamps: nothing new for Prometheus
        assert samples_with_time(again)["sglang:num_requests_total"] == (0, frozen_at)
