"""Reads one worker directly: its ``/health`` and its own running + queued requests.

The gateway forgets a removed worker at once (its ``smg_worker_requests_active`` drops to 0 while
the worker is still busy), so a drain's completion is read from the worker itself. A reading
carries the time it was taken, so the drain can require one taken ``drain.settle_s`` after the
gateway removal (requests in transit when the DELETE landed are then counted too).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from autoscaler.adapters.keepalive import ConnectFailed, ConnectTimeout, KeepAlivePool, ProtocolFailed, ReadTimeout


@dataclass(frozen=True, slots=True)
class LoadReading:
    at: float  # when the answer arrived (epoch s)
    running: float | None
    queued: float | None
    problem: str | None = None  # why the reading is missing, in one line

    @property
    def in_flight(self) -> float | None:
        if self.running is None or self.queued is None:
            return None
        return self.running + self.queued


def parse_gauge_sum(text: str, name: str) -> float | None:
    """The sum of every series of ``name`` in Prometheus text (None when absent or not a number)."""
    from autoscaler.adapters.direct_signals import parse_exposition

    values = parse_exposition(text, name)[0].get(name)
    if not values or any(not math.isfinite(v) for v in values):
        return None
    return float(sum(values))


class WorkerProbe:
    """One kept connection per worker (adapters/keepalive.py: a probe a tick costs a quarter of
    httpx's client CPU)."""

    def __init__(self, *, metric_prefix: str = "sglang:", timeout_s: float = 2.0,
                 health_timeout_s: float = 20.0) -> None:
        self.prefix = metric_prefix
        self.timeout_s = timeout_s
        self.health_timeout_s = health_timeout_s  # SGLang's /health generates a token: give it time
        self._pools: dict[str, KeepAlivePool] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()

    def urls(self) -> list[str]:
        """The worker URLs this probe keeps connections to (one pool each)."""
        with self._lock:
            return list(self._pools)

    def retain(self, worker_urls: set[str]) -> None:
        """Close the connections to every worker URL not in ``worker_urls``: a reloaded policy that
        moved a group to another URL (or dropped it) leaves no idle sockets to the old one."""
        with self._lock:
            gone = [u for u in self._pools if u not in worker_urls]
            pools = [self._pools.pop(u) for u in gone]
        for pool in pools:
            pool.close()

    def _pool(self, worker_url: str) -> KeepAlivePool:
        with self._lock:
            pool = self._pools.get(worker_url)
            if pool is None:
                pool = self._pools[worker_url] = KeepAlivePool(worker_url, timeout_s=self.timeout_s, max_idle=2)
            return pool

    def healthy(self, worker_url: str) -> tuple[bool, str]:
        try:
            r = self._pool(worker_url).get("/health", timeout_s=self.health_timeout_s)
        except (ConnectTimeout, ReadTimeout):
            return False, f"{worker_url}/health: no answer within {self.health_timeout_s:g} s"
        except (ConnectFailed, ProtocolFailed) as exc:
            return False, f"{worker_url}/health: unreachable ({type(exc).__name__}: {exc})"
        if r.status_code == 200:
            return True, "ok"
        return False, f"{worker_url}/health: HTTP {r.status_code} {r.text[:80].strip()}"

    def load(self, worker_url: str) -> LoadReading:
        try:
            r = self._pool(worker_url).get("/metrics")
        except (ConnectTimeout, ReadTimeout, ConnectFailed, ProtocolFailed) as exc:
            return LoadReading(time.time(), None, None, f"{worker_url}/metrics: unreachable ({type(exc).__name__})")
        at = time.time()
        if r.status_code != 200:
            return LoadReading(at, None, None, f"{worker_url}/metrics: HTTP {r.status_code}")
        running = parse_gauge_sum(r.text, self.prefix + "num_running_reqs")
        queued = parse_gauge_sum(r.text, self.prefix + "num_queue_reqs")
        problem = None if running is not None and queued is not None else (
            f"{worker_url}/metrics: no {self.prefix}num_running_reqs/num_queue_reqs")
        return LoadReading(at, running, queued, problem)

    def tokens(self, worker_url: str) -> tuple[float, float] | None:
        """The worker's token counters (``prompt_tokens_total``, ``generation_tokens_total``, summed
        over its series), or None when it cannot be read or exports neither. A counter that is
        absent reads 0 while the other is present."""
        try:
            r = self._pool(worker_url).get("/metrics")
        except (ConnectTimeout, ReadTimeout, ConnectFailed, ProtocolFailed):
            return None
        if r.status_code != 200:
            return None
        prompt = parse_gauge_sum(r.text, self.prefix + "prompt_tokens_total")
        generated = parse_gauge_sum(r.text, self.prefix + "generation_tokens_total")
        if prompt is None and generated is None:
            return None
        return prompt or 0.0, generated or 0.0
