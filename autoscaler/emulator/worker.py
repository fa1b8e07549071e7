"""An HTTP server that behaves like one SGLang TP=2 group to the gateway and to Prometheus.

Endpoints (docs/emulator.md has examples):
- ``GET /health`` 503 until ``startup_s`` has passed, then 200; 503 again once draining.
- ``GET /server_info`` ``/get_server_info`` ``/model_info`` ``/get_model_info`` ``/v1/models``.
- ``POST /generate`` (SGLang native), ``/v1/chat/completions``, ``/v1/completions`` (OpenAI,
  with SSE streaming).
- ``GET /metrics``: Prometheus text format 0.0.4 with SGLang's names.
- ``POST /_emulator/fault`` and ``GET /_emulator/state``: fault injection and introspection.

SIGTERM: new requests get 503, in-flight and queued ones finish (streams complete), then the
process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass, replace

from aiohttp import web

from autoscaler.emulator.engine import (
    Chunk,
    Draining,
    Engine,
    EngineConfig,
    Prompt,
    output_text,
)
from autoscaler.emulator.exposition import CONTENT_TYPE

log = logging.getLogger(__name__)

METRICS_FAULTS = ("ok", "garbage", "nan", "http_500", "frozen", "empty", "slow")
HEALTH_FAULTS = ("ok", "fail")
# SGLang's default max_new_tokens; OpenAI's default for /v1/completions is 16.
DEFAULT_MAX_NEW_TOKENS = 128
DEFAULT_COMPLETION_TOKENS = 16


@dataclass(frozen=True)
class WorkerConfig:
    host: str = "127.0.0.1"
    port: int = 0
    startup_s: float = 0.0
    explicit_timestamps: bool = False  # stamp every /metrics sample with the time it was served
    engine: EngineConfig = EngineConfig()
    owner: str = ""  # who started it (the local actuator's fleet), reported by /_emulator/state


class BadRequest(Exception):
    pass


class Worker:
    """The aiohttp application around one Engine, plus start-up, drain and fault state."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.engine = Engine(config.engine)
        self.started_at = time.monotonic()
        self.health_fault = "ok"
        self.metrics_fault = "ok"
        self.metrics_delay_s = 0.0
        self._frozen: tuple[str, int] | None = None  # stamped text, and its time (ms)
        self._last_served: tuple[str, int] | None = None  # last /metrics text and when (ms)
        self._handlers = 0  # inference handlers still answering (a stream's last bytes included)
        self._handlers_done = asyncio.Event()
        self._handlers_done.set()
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        r = self.app.router
        r.add_get("/health", self.health)
        r.add_get("/health_generate", self.health)
        for path in ("/server_info", "/get_server_info"):
            r.add_get(path, self.server_info)
        for path in ("/model_info", "/get_model_info"):
            r.add_get(path, self.model_info)
        r.add_get("/v1/models", self.models)
        r.add_get("/metrics", self.metrics)
        r.add_post("/generate", self.generate)
        r.add_post("/v1/chat/completions", self.chat)
        r.add_post("/v1/completions", self.completions)
        r.add_post("/_emulator/fault", self.fault)
        r.add_get("/_emulator/state", self.state)

    # ----- health and info -----------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return time.monotonic() - self.started_at >= self.config.startup_s

    async def health(self, request: web.Request) -> web.Response:
        if self.engine.draining:
            return web.Response(status=503, text="draining")
        if not self.ready:
            left = self.config.startup_s - (time.monotonic() - self.started_at)
            return web.Response(status=503, text=f"starting: {left:.1f} s left")
        if self.health_fault == "fail":
            return web.Response(status=503, text="unhealthy (injected fault)")
        return web.Response(status=200, text="")

    def _server_info(self) -> dict:
        cfg = self.config.engine
        return {
            "model_path": cfg.model_name,
            "tokenizer_path": cfg.model_name,
            "served_model_name": cfg.model_name,
            "host": self.config.host,
            "port": self.config.port,
            "tp_size": 2,
            "dp_size": 1,
            "pp_size": 1,
            "nnodes": 2,
            "max_running_requests": cfg.max_running,
            "max_total_num_tokens": cfg.kv_capacity_tokens,
            "chunked_prefill_size": 8192,
            "mem_fraction_static": 0.8,
            "kv_cache_dtype": "bf16",
            "enable_metrics": True,
            "version": "0.5.0-emulated",
            "internal_states": [{"last_gen_throughput": self.engine.m_gen.value}],
            "emulator": {
                "prefill_tokens_per_s": cfg.prefill_tokens_per_s,
                "decode_tokens_per_s": cfg.decode_tokens_per_s,
                "startup_s": self.config.startup_s,
            },
        }

    async def server_info(self, request: web.Request) -> web.Response:
        return web.json_response(self._server_info())

    async def model_info(self, request: web.Request) -> web.Response:
        name = self.config.engine.model_name
        return web.json_response({
            "model_path": name, "tokenizer_path": name, "is_generation": True,
            "preferred_sampling_params": None, "weight_version": "default",
            "has_image_understanding": False, "has_audio_understanding": False,
            "model_type": "minimax_m2", "architectures": ["MiniMaxM2ForCausalLM"],
        })

    async def models(self, request: web.Request) -> web.Response:
        name = self.config.engine.model_name
        return web.json_response({"object": "list", "data": [{
            "id": name, "object": "model", "created": int(self.started_at), "owned_by": "sglang",
            "root": name, "max_model_len": self.config.engine.kv_capacity_tokens}]})

    # ----- metrics and faults --------------------------------------------------------------
    async def metrics(self, request: web.Request) -> web.Response:
        mode = self.metrics_fault
        if mode == "http_500":
            return web.Response(status=500, text="internal error (injected fault)\n")
        if mode == "garbage":
            return web.Response(text="<html>this is { not prometheus text\n", content_type="text/plain")
        if mode == "empty":
            return web.Response(body=b"", headers={"Content-Type": CONTENT_TYPE})
        if mode == "slow":
            await asyncio.sleep(self.metrics_delay_s)
        if mode == "frozen":
            assert self._frozen is not None
            text, at_ms = self._frozen
            return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})
        self.engine.refresh_gauges()
        now_ms = int(time.time() * 1000)
        text = self.engine.registry.render(nan_values=mode == "nan",
                                           timestamp_ms=now_ms if self.config.explicit_timestamps else None)
        self._last_served = (text, now_ms)
        return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})

    def _freeze(self) -> tuple[str, int]:
        """The last text a scraper got, every sample stamped with the time it was served.

        What Prometheus 2.42 makes of it (measured, scraping every second):
        - with ``--explicit-timestamps`` (every sample stamped from the first scrape on), the
          frozen samples repeat the last ones exactly; Prometheus writes no staleness marker for
          explicitly stamped series, so every series keeps answering instant queries with its
          last value for the 5-minute lookback while ``time() - timestamp(series)`` grows:
          a stale series, with ``up`` 1.
        - without it, the first frozen scrape adds one sample, the repeats are dropped ("Error
          on ingesting out-of-order samples") and, as the series switched from scrape-time to
          explicit stamps, Prometheus marks it stale at once: within about 2 scrapes an instant
          query returns nothing for every sglang series while ``up`` stays 1.
        """
        if self._last_served is None:  # never scraped: freeze the values of now
            self.engine.refresh_gauges()
            now_ms = int(time.time() * 1000)
            self._last_served = (self.engine.registry.render(
                timestamp_ms=now_ms if self.config.explicit_timestamps else None), now_ms)
        text, at_ms = self._last_served
        if not self.config.explicit_timestamps:
            text = "\n".join(line if not line or line.startswith("#") else f"{line} {at_ms}"
                              for line in text.split("\n"))
        return text, at_ms

    async def fault(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "body must be JSON")
        if not isinstance(body, dict) or not set(body) <= {"metrics", "health", "delay_s"}:
            return _error(400, 'expected {"metrics": MODE} and/or {"health": "ok"|"fail"}')
        metrics, health = body.get("metrics"), body.get("health")
        if metrics is not None and metrics not in METRICS_FAULTS:
            return _error(400, f"metrics: {metrics!r} is not one of {', '.join(METRICS_FAULTS)}")
        if health is not None and health not in HEALTH_FAULTS:
            return _error(400, f"health: {health!r} is not one of {', '.join(HEALTH_FAULTS)}")
        if metrics is not None:
            if metrics == "frozen" and self.metrics_fault != "frozen":
                self._frozen = self._freeze()
            self.metrics_fault = metrics
            self.metrics_delay_s = float(body.get("delay_s", 10.0))
        if health is not None:
            self.health_fault = health
        return await self.state(request)

    async def state(self, request: web.Request) -> web.Response:
        return web.json_response({
            **self.engine.state(), "pid": os.getpid(), "owner": self.config.owner, "ready": self.ready,
            "health_fault": self.health_fault,
            "metrics_fault": self.metrics_fault,
            "frozen_at_ms": self._frozen[1] if self.metrics_fault == "frozen" and self._frozen else None,
        })

    # ----- inference -----------------------------------------------------------------------
    async def generate(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await _json_body(request)
            if isinstance(body.get("input_ids"), list) and body["input_ids"]:
                ids = body["input_ids"]
                if isinstance(ids[0], list):
                    raise BadRequest("batched input_ids are not supported by the emulator")
                prompt = Prompt.from_ids([int(i) for i in ids])
            elif isinstance(body.get("text"), str):
                prompt = Prompt.from_text(body["text"])
            else:
                raise BadRequest("one of text (a string) or input_ids (a list) is required")
            params = body.get("sampling_params") or {}
            n_out = _positive_int(params.get("max_new_tokens"), DEFAULT_MAX_NEW_TOKENS, "max_new_tokens")
        except BadRequest as exc:
            return _error(400, str(exc))
        rid = uuid.uuid4().hex

        def payload(text: str, done: int, finished: bool, stats) -> dict:
            return {"text": text, "meta_info": {
                "id": rid, "prompt_tokens": stats.prompt_tokens, "completion_tokens": done,
                "cached_tokens": stats.cached_tokens,
                "finish_reason": {"type": "length", "length": done} if finished else None,
                "e2e_latency": stats.e2e_s if finished else None}}

        if body.get("stream"):
            # SGLang's native stream sends the text so far in every event.
            return await self._stream(request, prompt, n_out,
                                      lambda c, st: payload(output_text(0, c.stop), c.stop, c.last, st))
        return await self._whole(request, prompt, n_out,
                                 lambda st: payload(output_text(0, st.output_tokens), st.output_tokens, True, st))

    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await _json_body(request)
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest("messages must be a non-empty list")
            prompt = Prompt.from_text(_chat_prompt_text(messages))
            # The gateway renames max_tokens to max_completion_tokens; accept both.
            raw = body.get("max_completion_tokens", body.get("max_tokens"))
            n_out = _positive_int(raw, DEFAULT_MAX_NEW_TOKENS, "max_tokens")
        except BadRequest as exc:
            return _error(400, str(exc))
        model = body.get("model") or self.config.engine.model_name
        cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        if body.get("stream"):
            def event(c: Chunk, st) -> dict:
                delta = {"role": "assistant", "content": output_text(c.start, c.stop)} if c.first \
                    else {"content": output_text(c.start, c.stop)}
                return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                        "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": "length" if c.last else None}]}

            def usage_event(st) -> dict:
                return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                        "choices": [], "usage": _usage(st)}

            return await self._stream(request, prompt, n_out, event, usage_event if include_usage else None)

        def whole(st) -> dict:
            return {"id": cid, "object": "chat.completion", "created": created, "model": model,
                    "choices": [{"index": 0, "message": {"role": "assistant",
                                                         "content": output_text(0, st.output_tokens)},
                                 "logprobs": None, "finish_reason": "length"}],
                    "usage": _usage(st)}

        return await self._whole(request, prompt, n_out, whole)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await _json_body(request)
            p = body.get("prompt")
            if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
                p = p[0]
            if isinstance(p, str):
                prompt = Prompt.from_text(p)
            elif isinstance(p, list) and p and all(isinstance(i, int) for i in p):
                prompt = Prompt.from_ids(p)
            else:
                raise BadRequest("prompt must be a string or a list of token ids")
            n_out = _positive_int(body.get("max_tokens"), DEFAULT_COMPLETION_TOKENS, "max_tokens")
        except BadRequest as exc:
            return _error(400, str(exc))
        model = body.get("model") or self.config.engine.model_name
        cid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        if body.get("stream"):
            def event(c: Chunk, st) -> dict:
                return {"id": cid, "object": "text_completion", "created": created, "model": model,
                        "choices": [{"index": 0, "text": output_text(c.start, c.stop), "logprobs": None,
                                     "finish_reason": "length" if c.last else None}]}

            def usage_event(st) -> dict:
                return {"id": cid, "object": "text_completion", "created": created, "model": model,
                        "choices": [], "usage": _usage(st)}

            return await self._stream(request, prompt, n_out, event, usage_event if include_usage else None)

        def whole(st) -> dict:
            return {"id": cid, "object": "text_completion", "created": created, "model": model,
                    "choices": [{"index": 0, "text": output_text(0, st.output_tokens), "logprobs": None,
                                 "finish_reason": "length"}], "usage": _usage(st)}

        return await self._whole(request, prompt, n_out, whole)

    # ----- running a request ---------------------------------------------------------------
    def _admit(self, prompt: Prompt, n_out: int):
        if not self.ready:
            raise Draining("the server is still starting")
        return self.engine.admit(prompt, n_out)

    @contextlib.contextmanager
    def _answering(self, adm):
        self._handlers += 1
        self._handlers_done.clear()
        try:
            yield
        finally:
            adm.close()
            self._handlers -= 1
            if self._handlers == 0:
                self._handlers_done.set()

    async def drained(self) -> None:
        """Returns once every admitted request has finished and its answer has been written."""
        await self.engine.wait_idle()
        await self._handlers_done.wait()

    async def _whole(self, request, prompt, n_out, build) -> web.Response:
        try:
            adm = self._admit(prompt, n_out)
        except Draining as exc:
            return _error(503, str(exc) or "the server is shutting down")
        with self._answering(adm):
            async with contextlib.aclosing(adm.__aiter__()) as chunks:
                async for _ in chunks:
                    pass
            return web.json_response(build(adm.stats))

    async def _stream(self, request, prompt, n_out, event, usage_event=None) -> web.StreamResponse:
        try:
            adm = self._admit(prompt, n_out)
        except Draining as exc:
            return _error(503, str(exc) or "the server is shutting down")
        with self._answering(adm):
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
            async with contextlib.aclosing(adm.__aiter__()) as chunks:
                # Headers go out at once, as SGLang's StreamingResponse does.
                await resp.prepare(request)
                async for chunk in chunks:
                    await resp.write(b"data: " + json.dumps(event(chunk, adm.stats)).encode() + b"\n\n")
            if usage_event is not None:
                await resp.write(b"data: " + json.dumps(usage_event(adm.stats)).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp


def _usage(st) -> dict:
    return {"prompt_tokens": st.prompt_tokens, "completion_tokens": st.output_tokens,
            "total_tokens": st.prompt_tokens + st.output_tokens,
            "prompt_tokens_details": {"cached_tokens": st.cached_tokens}}


def _chat_prompt_text(messages: list) -> str:
    """The prompt text of a chat: every message's role and content, in order. A later turn of
    the same conversation starts with the same text, so it hits the prefix cache."""
    parts = []
    for m in messages:
        if not isinstance(m, dict):
            raise BadRequest("each message must be an object")
        content = m.get("content")
        if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"<{m.get('role', 'user')}>{content or ''}")
    return "".join(parts)


def _positive_int(value, default: int, name: str) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 1:
        raise BadRequest(f"{name} must be a positive integer, got {value!r}")
    return int(value)


async def _json_body(request: web.Request) -> dict:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    return body


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"object": "error", "message": message, "code": status}, status=status)


async def serve(config: WorkerConfig, *, ready_line=None) -> int:
    """Run until SIGTERM/SIGINT; on either, drain (finish every admitted request), then return 0."""
    worker = Worker(config)
    # handler_cancellation: a client that goes away aborts its request and frees its slot.
    runner = web.AppRunner(worker.app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    port = runner.addresses[0][1]
    worker.config = replace(config, port=port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    msg = f"emulate worker: listening on http://{config.host}:{port} (ready after {config.startup_s:g} s)"
    (ready_line or (lambda m: log.info(m)))(msg)
    await stop.wait()
    worker.engine.draining = True
    log.info("emulate worker: draining %d request(s) before exit", worker.engine.in_flight)  # normal: INFO
    await worker.drained()
    await runner.cleanup()
    log.info("emulate worker: drained, exiting")
    return 0
