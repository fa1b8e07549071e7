"""A controllable fake SGLang ``/metrics`` endpoint for the signal tests.

Each ``Exporter`` is one scrape target on 127.0.0.1 (port 0, so no race for ports) serving the
plain text format 0.0.4 (``text/plain; version=0.0.4``) whatever the scraper asks for, so metric
names keep their colons (``sglang:num_running_reqs``): ``prometheus_client`` >= 0.23 would answer
Prometheus's OpenMetrics ``Accept`` header with escaped names (CONTEXT.md section 5).

Values are set from the test thread and read at scrape time:

- gauges: ``running``, ``queued``, ``kv_usage`` (any float, NaN included, or None to omit);
- counters move linearly with wall time, so ``rate()`` over a full window is exact:
  ``set_request_rate(1.5)`` makes ``num_requests_total`` grow by 1.5 per second;
- histograms (TTFT and queue time): ``set_ttft(value_s, per_s)`` observes ``per_s`` requests
  per second, each taking ``value_s``; ``per_s=0`` is an idle worker (counts stop moving);
- faults: ``mode = "garbage"`` (an unparsable body, the scrape fails), ``extra_running_series``
  (a second ``num_running_reqs`` series with another ``tp_rank``), ``drop_inf_bucket`` (a broken
  histogram), ``explicit_timestamps`` with ``freeze()`` (see below), and ``stop()`` (the port
  closes: connection refused).

A frozen target: with ``explicit_timestamps`` every sample carries its render time, as exporters
behind a cache or federation do; ``freeze()`` then serves the same samples, stamped with the
moment of freezing, on every later scrape. Prometheus 2.42 writes no staleness markers for
series with explicit timestamps, so a frozen gauge keeps answering instant queries for the
5-minute lookback. The target must use explicit timestamps from its first scrape: a series that
switches from scrape-time samples to explicit ones leaves the set Prometheus tracks for
staleness and gets a staleness marker at once (measured: it vanishes instead of lingering).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# SGLang's TTFT buckets (a subset; the exact bounds matter only for the expected quantiles).
BUCKETS_S = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class LinearCounter:
    """A counter that grows at ``per_s`` from ``since``; changing the rate keeps what was counted."""

    base: float = 0.0
    per_s: float = 0.0
    since: float = 0.0

    def value(self, now: float) -> float:
        return self.base + self.per_s * max(0.0, now - self.since)

    def set_rate(self, per_s: float, now: float) -> None:
        self.base = self.value(now)
        self.per_s = per_s
        self.since = now


class _Histogram:
    """Observations of one value at a steady rate; the value may change (buckets keep their counts)."""

    def __init__(self, now: float) -> None:
        # One linear counter per bucket (non-cumulative, last = +Inf) and one for the sum.
        self.buckets = [LinearCounter(since=now) for _ in range(len(BUCKETS_S) + 1)]
        self.total = LinearCounter(since=now)

    def set(self, value_s: float, per_s: float, now: float) -> None:
        index = next((i for i, le in enumerate(BUCKETS_S) if value_s <= le), len(BUCKETS_S))
        for i, bucket in enumerate(self.buckets):
            bucket.set_rate(per_s if i == index else 0.0, now)
        self.total.set_rate(per_s * value_s, now)

    def lines(self, name: str, labels: str, now: float, suffix: str, drop_inf: bool) -> list[str]:
        out, cumulative = [], 0.0
        for le, bucket in zip((*BUCKETS_S, math.inf), self.buckets):
            cumulative += bucket.value(now)
            if le == math.inf and drop_inf:
                continue
            le_text = "+Inf" if le == math.inf else repr(le)
            out.append(f'{name}_bucket{{{labels},le="{le_text}"}} {cumulative!r}{suffix}')
        out.append(f"{name}_sum{{{labels}}} {self.total.value(now)!r}{suffix}")
        out.append(f"{name}_count{{{labels}}} {cumulative!r}{suffix}")
        return out


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class Exporter:
    """One fake worker's /metrics. Thread-safe setters; start() binds 127.0.0.1:0."""

    def __init__(self, prefix: str = "sglang:") -> None:
        now = time.time()
        self.prefix = prefix
        self._lock = threading.Lock()
        self.running: float | None = 0.0
        self.queued: float | None = 0.0
        self.kv_usage: float | None = 0.0
        self.mode = "ok"  # or "garbage"
        self.extra_running_series = False
        self.drop_inf_bucket = False
        self.explicit_timestamps = False  # stamp every sample with its render time
        self.frozen_at: float | None = None  # set by freeze(): the explicit sample timestamp
        self._frozen_text: str | None = None
        self._requests = LinearCounter(since=now)
        self._ttft = _Histogram(now)
        self._queue_time = _Histogram(now)
        self.scrapes = 0
        self._server: ThreadingHTTPServer | None = None
        self._port: int | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ control
    def set(self, **values: float | None) -> None:
        """Set gauges at once, e.g. ``set(running=3, queued=2)``."""
        with self._lock:
            for key, value in values.items():
                if key not in ("running", "queued", "kv_usage"):
                    raise KeyError(key)
                setattr(self, key, value)

    def set_request_rate(self, per_s: float) -> None:
        with self._lock:
            self._requests.set_rate(per_s, time.time())

    def set_ttft(self, value_s: float, per_s: float) -> None:
        with self._lock:
            self._ttft.set(value_s, per_s, time.time())

    def set_queue_time(self, value_s: float, per_s: float) -> None:
        with self._lock:
            self._queue_time.set(value_s, per_s, time.time())

    def freeze(self) -> float:
        """Serve the current samples, stamped with this moment, on every later scrape."""
        at = time.time()
        text = self._render(at, suffix=f" {int(at * 1000)}")
        with self._lock:
            self.frozen_at, self._frozen_text = at, text
        return at

    # ------------------------------------------------------------------ exposition
    def render(self) -> str:
        with self._lock:
            self.scrapes += 1
            if self.mode == "garbage":
                return "this is { not the text format\n"
            if self._frozen_text is not None:
                return self._frozen_text
            explicit = self.explicit_timestamps
        now = time.time()
        return self._render(now, suffix=f" {int(now * 1000)}" if explicit else "")

    def _render(self, now: float, suffix: str) -> str:
        with self._lock:
            p = self.prefix
            labels = 'model_name="test-model",engine_type="unified",tp_rank="0",pp_rank="0"'
            rank1 = labels.replace('tp_rank="0"', 'tp_rank="1"')
            lines = []
            for name, value in (("num_running_reqs", self.running), ("num_queue_reqs", self.queued),
                                ("token_usage", self.kv_usage)):  # fmt: skip
                if value is None:
                    continue
                lines.append(f"# TYPE {p}{name} gauge")
                lines.append(f"{p}{name}{{{labels}}} {_fmt(value)}{suffix}")
                if name == "num_running_reqs" and self.extra_running_series:
                    lines.append(f"{p}{name}{{{rank1}}} {_fmt(value)}{suffix}")
            lines.append(f"# TYPE {p}num_requests_total counter")
            lines.append(f"{p}num_requests_total{{{labels}}} {self._requests.value(now)!r}{suffix}")
            for name, hist in (("time_to_first_token_seconds", self._ttft), ("queue_time_seconds", self._queue_time)):
                lines.append(f"# TYPE {p}{name} histogram")
                lines += hist.lines(p + name, labels, now, suffix, self.drop_inf_bucket)
            return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ server
    def start(self) -> Exporter:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = exporter.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

        # Bind the port it had before when restarted, so Prometheus's target comes back.
        self._server = ThreadingHTTPServer(("127.0.0.1", self._port or 0), Handler)
        self._port = self._server.server_address[1]
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        assert self._port is not None, "start() first"
        return self._port

    @property
    def address(self) -> str:
        """host:port, which is also the ``instance`` label Prometheus gives this target."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def stop(self) -> None:
        """Close the port: the next scrape is refused and the target is down."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server = None

    def __enter__(self) -> Exporter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
