"""The emulated SGLang engine: slots, a FIFO queue, a prefix cache, latency from token counts.

One engine is one TP=2 group. It runs at most ``max_running`` requests at once; the rest wait in
arrival order. A request's life, on the event loop's clock:

    arrive -> (queue wait) -> admitted: prefill uncached input tokens at prefill speed
           -> first token (TTFT) -> remaining output tokens at decode speed -> done

Prefill and decode speeds are per request, not shared between the running requests: the same
fleet model the backtest uses (docs/interfaces.md, "Fleet model"). So with 2,500 prefill tokens/s and
20 decode tokens/s, a 5,000-token prompt with no cache hit and 100 output tokens takes
5000 / 2500 = 2 s to its first token and 2 + 99 / 20 = 6.95 s in all.

Token counts: SGLang tokenizes; the emulator has no tokenizer, so text counts as
ceil(characters / 4) tokens (``CHARS_PER_TOKEN``), ``input_ids`` count one each. The load
generator builds prompts with the same rule, so a trace's input length survives the gateway,
which passes the prompt text through unchanged.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

from autoscaler.emulator.exposition import Registry

CHARS_PER_TOKEN = 4
# The prefix cache remembers prompts in blocks of 64 characters (16 tokens); SGLang's radix cache
# is token-grained, 16 tokens is fine enough for prompts of hundreds to tens of thousands.
CACHE_BLOCK_CHARS = 64
CACHE_BLOCK_IDS = 16
# Recent requests the cache_hit_rate gauge averages over (SGLang reports the last batches' rate).
HIT_RATE_WINDOW = 100

# SGLang 0.5.x's default bucket boundaries (python/sglang/srt/metrics/collector.py).
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = TTFT_BUCKETS + (600, 1200, 1800, 2400)
ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
    0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000,
)
QUEUE_BUCKETS = (
    0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300,
    400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000,
)

WORDS = (" lor", " ips", " dol", " sit", " ame", " con", " sec", " adi")  # 4 chars = 1 token


def count_text_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def output_text(start: int, stop: int) -> str:
    """The text of output tokens [start, stop): one 4-character word per token."""
    return "".join(WORDS[i % len(WORDS)] for i in range(start, stop))


@dataclass(frozen=True)
class EngineConfig:
    max_running: int = 6
    prefill_tokens_per_s: float = 2500.0
    decode_tokens_per_s: float = 20.0
    kv_capacity_tokens: int = 160_000
    prefix_cache_tokens: int = 160_000
    min_chunk_interval_s: float = 0.05
    model_name: str = "MiniMaxAI/MiniMax-M2.5"
    metric_prefix: str = "sglang:"


@dataclass
class Prompt:
    """What the engine needs from a request: its length and the keys of its prefix blocks."""

    tokens: int
    block_keys: list[bytes]
    block_tokens: list[int]

    @classmethod
    def from_text(cls, text: str) -> Prompt:
        keys, sizes = [], []
        h = hashlib.blake2b(digest_size=16)
        # Only whole blocks are cached: a partial last block is always prefilled again.
        for start in range(0, len(text) - CACHE_BLOCK_CHARS + 1, CACHE_BLOCK_CHARS):
            h.update(text[start : start + CACHE_BLOCK_CHARS].encode())
            keys.append(h.copy().digest())
            sizes.append(CACHE_BLOCK_CHARS // CHARS_PER_TOKEN)
        return cls(count_text_tokens(text), keys, sizes)

    @classmethod
    def from_ids(cls, ids: list[int]) -> Prompt:
        keys, sizes = [], []
        h = hashlib.blake2b(digest_size=16)
        h.update(b"ids:")
        for start in range(0, len(ids) - CACHE_BLOCK_IDS + 1, CACHE_BLOCK_IDS):
            h.update(",".join(str(i) for i in ids[start : start + CACHE_BLOCK_IDS]).encode() + b";")
            keys.append(h.copy().digest())
            sizes.append(CACHE_BLOCK_IDS)
        return cls(max(1, len(ids)), keys, sizes)


class PrefixCache:
    """A bounded LRU of prompt blocks; a block is a hit only if every block before it is one."""

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_tokens = capacity_tokens
        self.blocks: OrderedDict[bytes, int] = OrderedDict()
        self.tokens = 0

    def match(self, prompt: Prompt) -> int:
        """Tokens of the prompt's longest cached prefix (marks the matched blocks recently used)."""
        cached = 0
        for key, size in zip(prompt.block_keys, prompt.block_tokens):
            if key not in self.blocks:
                break
            self.blocks.move_to_end(key)
            cached += size
        return min(cached, prompt.tokens)

    def insert(self, prompt: Prompt) -> None:
        for key, size in zip(prompt.block_keys, prompt.block_tokens):
            if key in self.blocks:
                self.blocks.move_to_end(key)
                continue
            self.blocks[key] = size
            self.tokens += size
        while self.tokens > self.capacity_tokens and self.blocks:
            _, size = self.blocks.popitem(last=False)
            self.tokens -= size


class Draining(Exception):
    """The engine accepts no new requests (SIGTERM received)."""


@dataclass
class Chunk:
    """Output tokens [start, stop) became available; ``first`` on the chunk holding token 0."""

    start: int
    stop: int
    first: bool
    last: bool


@dataclass
class RequestStats:
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    queue_s: float = 0.0
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    held_tokens: int = 0  # KV tokens this request holds now (prompt + output so far)


class Engine:
    """The scheduler and the metrics of one emulated group. Runs on one asyncio loop."""

    def __init__(self, config: EngineConfig, *, clock=time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self.cache = PrefixCache(config.prefix_cache_tokens)
        self.slots_taken = 0  # held by running requests or handed to a waiter that has not woken yet
        self.waiters: deque[asyncio.Future] = deque()
        self.draining = False
        self._ids = 0
        self._active: dict[int, RequestStats] = {}
        self._recent_hits: deque[tuple[int, int]] = deque(maxlen=HIT_RATE_WINDOW)
        self._gen_samples: deque[tuple[float, float]] = deque(maxlen=64)
        self._idle = asyncio.Event()
        self._idle.set()
        p = config.metric_prefix
        self.registry = Registry(
            {"model_name": config.model_name, "engine_type": "unified", "tp_rank": "0",
             "pp_rank": "0", "moe_ep_rank": "0"}
        )
        r = self.registry
        self.m_running = r.gauge(f"{p}num_running_reqs", "The number of running requests.")
        self.m_queue = r.gauge(f"{p}num_queue_reqs", "The number of requests in the waiting queue.")
        self.m_used = r.gauge(f"{p}num_used_tokens", "The number of used tokens.")
        self.m_max_tokens = r.gauge(f"{p}max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.")
        self.m_max_tokens.value = config.kv_capacity_tokens
        self.m_usage = r.gauge(f"{p}token_usage", "The token usage.")
        self.m_hit = r.gauge(f"{p}cache_hit_rate", "The prefix cache hit rate.")
        self.m_gen = r.gauge(f"{p}gen_throughput", "The generation throughput (token/s).")
        self.m_requests = r.counter(f"{p}num_requests_total", "Number of requests processed.")
        self.m_aborted = r.counter(f"{p}num_aborted_requests_total", "Number of requests aborted.")
        self.m_prompt = r.counter(f"{p}prompt_tokens_total", "Number of prefill tokens processed.")
        self.m_generation = r.counter(f"{p}generation_tokens_total", "Number of generation tokens processed.")
        self.m_cached = r.counter(f"{p}cached_tokens_total", "Number of cached prompt tokens.")
        self.m_ttft = r.histogram(f"{p}time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.m_itl = r.histogram(f"{p}inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS)
        self.m_e2e = r.histogram(f"{p}e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", E2E_BUCKETS)
        self.m_queue_time = r.histogram(f"{p}queue_time_seconds", "Histogram of queueing time in seconds.", QUEUE_BUCKETS)

    # ----- state ---------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return self.slots_taken

    @property
    def num_queued(self) -> int:
        return sum(1 for f in self.waiters if not f.done())

    @property
    def in_flight(self) -> int:
        return len(self._active)

    async def wait_idle(self) -> None:
        await self._idle.wait()

    def refresh_gauges(self) -> None:
        """Bring the gauges up to date; called before each /metrics answer."""
        self.m_running.value = self.num_running
        self.m_queue.value = self.num_queued
        used = sum(s.held_tokens for s in self._active.values())
        self.m_used.value = used
        self.m_usage.value = min(1.0, used / self.config.kv_capacity_tokens)
        prompt = sum(p for p, _ in self._recent_hits)
        self.m_hit.value = (sum(c for _, c in self._recent_hits) / prompt) if prompt else 0.0
        # Generation throughput over the last ~5 s of samples (one sample per scrape/chunk).
        now = self.clock()
        self._gen_samples.append((now, self.m_generation.value))
        while len(self._gen_samples) > 2 and now - self._gen_samples[1][0] >= 5.0:
            self._gen_samples.popleft()
        t0, g0 = self._gen_samples[0]
        self.m_gen.value = (self.m_generation.value - g0) / (now - t0) if now - t0 > 0.5 else 0.0

    def state(self) -> dict:
        return {"running": self.num_running, "queued": self.num_queued,
                "in_flight": self.in_flight, "draining": self.draining,
                "requests_done": self.m_requests.value, "cache_tokens": self.cache.tokens}

    # ----- slots ---------------------------------------------------------------------------
    async def _acquire(self) -> None:
        if self.slots_taken < self.config.max_running and not self.num_queued:
            self.slots_taken += 1
            return
        fut = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # the slot was handed over just now: pass it on
                self._release()
            else:
                fut.cancel()
                try:
                    self.waiters.remove(fut)
                except ValueError:
                    pass
            raise

    def _release(self) -> None:
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the next in line takes the slot over; slots_taken stays
                return
        self.slots_taken -= 1

    # ----- a request -----------------------------------------------------------------------
    def admit(self, prompt: Prompt, output_tokens: int) -> Admission:
        """Accept a request (raises Draining after SIGTERM). Iterate the result for its chunks."""
        if self.draining:
            raise Draining()
        self._ids += 1
        stats = RequestStats(prompt_tokens=prompt.tokens, output_tokens=max(1, int(output_tokens)))
        self._active[self._ids] = stats
        self._idle.clear()
        return Admission(self, self._ids, prompt, stats)

    def _finish(self, rid: int, completed: bool) -> None:
        stats = self._active.pop(rid, None)
        if not self._active:
            self._idle.set()
        if stats is not None and not completed:
            self.m_aborted.value += 1


class Admission:
    """One admitted request; ``async for chunk in admission`` runs it on the engine's timeline."""

    def __init__(self, engine: Engine, rid: int, prompt: Prompt, stats: RequestStats) -> None:
        self.engine, self.rid, self.prompt, self.stats = engine, rid, prompt, stats

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self._run()

    def close(self) -> None:
        """Forget the request if it never ran or was cut (idempotent; a finished one is gone)."""
        self.engine._finish(self.rid, completed=False)

    async def _run(self) -> AsyncIterator[Chunk]:
        eng, cfg, st = self.engine, self.engine.config, self.stats
        clock = eng.clock
        arrived = clock()
        completed = False
        try:
            await eng._acquire()
            try:
                admitted = clock()
                st.queue_s = admitted - arrived
                eng.m_queue_time.observe(st.queue_s)
                st.cached_tokens = eng.cache.match(self.prompt)
                st.held_tokens = st.prompt_tokens
                uncached = st.prompt_tokens - st.cached_tokens
                await asyncio.sleep(uncached / cfg.prefill_tokens_per_s)
                eng.cache.insert(self.prompt)
                eng._recent_hits.append((st.prompt_tokens, st.cached_tokens))
                eng.m_prompt.value += st.prompt_tokens
                eng.m_cached.value += st.cached_tokens
                first_at = clock()
                st.ttft_s = first_at - arrived
                eng.m_ttft.observe(st.ttft_s)
                # Decode: token i (i >= 1) is ready at first_at + i / decode speed. Chunks are at
                # least min_chunk_interval_s apart, to keep the CPU low at test speeds
                # (2,000 tokens/s would otherwise be 2,000 wake-ups a second per request).
                per_chunk = max(1, round(cfg.decode_tokens_per_s * cfg.min_chunk_interval_s))
                n = st.output_tokens
                start, done = 0, 1  # the first token comes out of the prefill
                st.held_tokens += 1
                eng.m_generation.value += 1
                last_at = first_at
                while True:
                    if done == n:  # account for the request before its last chunk goes out
                        st.e2e_s = clock() - arrived
                        eng.m_e2e.observe(st.e2e_s)
                        eng.m_requests.value += 1
                        completed = True
                    yield Chunk(start, done, first=start == 0, last=done == n)
                    if done == n:
                        break
                    stop = min(n, done + per_chunk)
                    due = first_at + stop / cfg.decode_tokens_per_s
                    delay = due - clock()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    now = clock()
                    eng.m_itl.observe((now - last_at) / (stop - done), stop - done, now - last_at)
                    last_at = now
                    st.held_tokens += stop - done
                    eng.m_generation.value += stop - done
                    start, done = done, stop
            finally:
                eng._release()
        finally:
            eng._finish(self.rid, completed)
