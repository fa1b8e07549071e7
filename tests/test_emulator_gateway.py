"""The emulator behind the real SGLang Model Gateway (``smg`` from sglang-router 0.3.2)."""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.support.procs import (
    chat_body,
    emulated_worker,
    gateway,
    start_worker,
    stream_post,
    wait_until,
)


def test_gateway_registers_a_worker_only_after_its_health_passes(tmp_path):
    with gateway(tmp_path) as gw:
        w = start_worker(tmp_path, wait_ready=False, startup_s=2.0, decode_tokens_per_s=2000)
        try:
            worker_id = gw.add_worker(w.url)  # 202 at once; the add runs in the background
            # While the worker is starting (/health 503) the gateway must not list it healthy.
            listed_early = []

            def started():
                ready = w.state()["ready"]
                if not ready and any(x["url"] == w.url and x["is_healthy"] for x in gw.workers()):
                    listed_early.append(time.monotonic())
                return ready

            wait_until(started, 10.0, what="worker start-up over", proc=w.proc)
            assert listed_early == []
            entry = gw.wait_healthy(w.url, 15.0)
            assert entry["id"] == worker_id
            assert entry["model_id"] == "MiniMaxAI/MiniMax-M2.5"  # read from the emulator's info
            assert httpx.get(w.url + "/health", timeout=2).status_code == 200
            r = httpx.post(gw.url + "/v1/chat/completions", json=chat_body("hi", 3, stream=False), timeout=10)
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
        finally:
            w.proc.kill()


def test_gateway_routes_chat_stream_and_completions_and_merges_metrics(tmp_path):
    with emulated_worker(tmp_path, decode_tokens_per_s=2000) as w, gateway(tmp_path, worker_urls=[w.url]) as gw:
        chat = httpx.post(gw.url + "/v1/chat/completions", json=chat_body("hello " * 50, 9, stream=False), timeout=10)
        assert chat.status_code == 200
        # The gateway renamed max_tokens to max_completion_tokens; the emulator still made 9 tokens.
        assert chat.json()["usage"]["completion_tokens"] == 9
        # The prompt text passed through: "<user>" + 300 characters = 306 / 4 -> 77 tokens.
        assert chat.json()["usage"]["prompt_tokens"] == 77

        stream = asyncio.run(stream_post(gw.url + "/v1/chat/completions", chat_body("hello", 40)))
        assert stream.status == 200 and stream.done and len(stream.content) == 40 * 4

        comp = httpx.post(gw.url + "/v1/completions", json={"model": "m", "prompt": "hello", "max_tokens": 5}, timeout=10)
        assert comp.status_code == 200 and comp.json()["usage"]["completion_tokens"] == 5
        comp_stream = asyncio.run(stream_post(gw.url + "/v1/completions",
                                              {"model": "m", "prompt": "hello", "max_tokens": 6, "stream": True}))
        assert comp_stream.done and len(comp_stream.content) == 6 * 4
        gen = httpx.post(gw.url + "/generate", json={"text": "hello", "sampling_params": {"max_new_tokens": 4}}, timeout=10)
        assert gen.status_code == 200 and gen.json()["meta_info"]["completion_tokens"] == 4

        assert w.state()["requests_done"] == 5  # all five went to the emulator

        merged = httpx.get(gw.url + "/engine_metrics", timeout=10)
        assert merged.status_code == 200
        line = next(x for x in merged.text.splitlines() if x.startswith("sglang_num_requests_total{"))
        assert f'worker_addr="{w.url}"' in line and 'model_name="MiniMaxAI/MiniMax-M2.5"' in line
        assert float(line.rsplit(" ", 1)[1]) == 5
        assert "sglang:" not in merged.text  # the gateway renames sglang:x to sglang_x

        own = httpx.get(gw.metrics_url, timeout=10).text
        assert f'smg_worker_health{{worker="{w.url}"}} 1' in own


def test_in_flight_streams_survive_delete_of_their_worker(tmp_path):
    # 2 streams of 100 tokens at 100 tokens/s (1 s); the worker is removed after their first token.
    with emulated_worker(tmp_path, decode_tokens_per_s=100) as w, gateway(tmp_path, worker_urls=[w.url]) as gw:
        worker_id = gw.wait_healthy(w.url)["id"]
        removed = asyncio.Event()

        async def scenario():
            async def remove_once():
                if not removed.is_set():
                    removed.set()
                    await asyncio.to_thread(wait_until, lambda: w.state()["running"] == 2, 5.0, what="2 running")
                    await asyncio.to_thread(gw.remove_worker, worker_id)

            url = gw.url + "/v1/chat/completions"
            return await asyncio.gather(stream_post(url, chat_body("first stream", 100), on_first=remove_once),
                                        stream_post(url, chat_body("second stream", 100)))

        t0 = time.monotonic()
        results = asyncio.run(scenario())
        assert removed.is_set()
        assert not any(x["id"] == worker_id for x in gw.workers())  # it left routing at once
        for r in results:
            assert r.error is None and r.done and len(r.content) == 100 * 4, r
        assert time.monotonic() - t0 >= 0.9  # they did run the whole second
        assert w.state()["requests_done"] == 2
        # With its only worker gone, the gateway has nowhere to send a new request.
        late = httpx.post(gw.url + "/v1/chat/completions", json=chat_body("late", 3, stream=False), timeout=10)
        assert late.status_code >= 500
        assert w.state()["requests_done"] == 2
