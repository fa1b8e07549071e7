"""Load signals read straight from the workers' ``/metrics``, without Prometheus.

For a site (or the demo) with no Prometheus: each tick reads every serving group's worker once
and builds the same ``SignalSnapshot`` as ``adapters.prometheus.read_signals``. Gauges are read as
they are (running, queued, KV use); the request rate and the TTFT / queue-wait percentiles come
from the counters and histogram buckets of earlier reads within ``signals.window_s`` (like PromQL's
``rate()`` and ``histogram_quantile`` over that window). The first read of a worker has no rate
and no percentile yet: those are None without a problem (nothing is known to be wrong).

An expected group whose worker cannot be read gets a ``Problem`` (``unreachable``,
``http_error``, ``absent``, ``not_a_number``), never a silent 0.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from autoscaler.adapters.histogram import share_above
from autoscaler.core.types import GroupSignals, Problem, SignalSnapshot, out_of_range
from autoscaler.policy.model import Policy

CONNECT_REFUSED = "no connection"  # the detail of a worker that nothing listens for


@dataclass(frozen=True, slots=True)
class _Scrape:
    at: float
    gauges: dict[str, float | None]
    requests_total: float | None
    ttft_buckets: dict[float, float]
    queue_buckets: dict[float, float]


def parse_exposition(text: str, prefix: str) -> tuple[dict[str, list[float]], dict[str, dict[float, float]]]:
    """Prometheus text -> (values of every series by metric name, histogram buckets by ``le``), for
    the metrics whose names start with ``prefix`` (a full name selects that metric and its kin)."""
    values: dict[str, list[float]] = collections.defaultdict(list)
    buckets: dict[str, dict[float, float]] = collections.defaultdict(dict)
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        name_end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=-1)
        if name_end < 0:
            continue
        name = line[:name_end]
        rest = line[name_end:]
        labels = ""
        if rest.startswith("{"):
            close = rest.find("}")
            labels, rest = rest[1:close], rest[close + 1:]
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            value = math.nan
        if name.endswith("_bucket"):
            le = next((part.split("=", 1)[1].strip('"') for part in labels.split(",") if part.startswith("le=")), None)
            if le is not None:
                bound = math.inf if le == "+Inf" else float(le)
                buckets[name][bound] = buckets[name].get(bound, 0.0) + value
        else:
            values[name].append(value)
    return values, buckets


def _quantile(q: float, buckets: dict[float, float]) -> float | None:
    """histogram_quantile over cumulative bucket counts (linear inside a bucket); None if empty."""
    bounds = sorted(buckets)
    if not bounds or bounds[-1] != math.inf:
        return None
    total = buckets[math.inf]
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == math.inf:
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return bounds[-2] if len(bounds) > 1 else None


def _delta(new: dict[float, float], old: dict[float, float]) -> dict[float, float]:
    return {b: max(0.0, new[b] - old.get(b, 0.0)) for b in new}


class DirectSignals:
    def __init__(self, policy: Policy, *, timeout_s: float = 2.0) -> None:
        self.policy = policy
        self._http = httpx.Client(timeout=timeout_s, trust_env=False)
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(policy.fleet.groups)), thread_name_prefix="direct-signals")
        self._history: dict[str, collections.deque[_Scrape]] = collections.defaultdict(collections.deque)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.close()

    def set_policy(self, policy: Policy) -> None:
        self.policy = policy

    def _scrape(self, url: str) -> tuple[_Scrape | None, str | None, str | None]:
        prefix = self.policy.signals.metric_prefix
        try:
            response = self._http.get(url + "/metrics")
        except httpx.ConnectError as exc:  # refused, no route: nothing listens (an off group, for advisory)
            return None, "unreachable", f"{url}/metrics: {CONNECT_REFUSED} ({type(exc).__name__})"
        except httpx.HTTPError as exc:
            return None, "unreachable", f"{url}/metrics: unreachable ({type(exc).__name__})"
        at = time.time()
        if response.status_code != 200:
            return None, "http_error", f"{url}/metrics: HTTP {response.status_code}"
        values, buckets = parse_exposition(response.text, prefix)

        def gauge(name: str) -> float | None:
            series = values.get(prefix + name)
            if not series:
                return None
            return sum(series)

        gauges = {"running": gauge("num_running_reqs"), "queued": gauge("num_queue_reqs"),
                  "kv_usage": (max(values[prefix + "token_usage"]) if values.get(prefix + "token_usage") else None)}
        return _Scrape(at, gauges, gauge("num_requests_total"),
                       buckets.get(prefix + "time_to_first_token_seconds_bucket", {}),
                       buckets.get(prefix + "queue_time_seconds_bucket", {})), None, None

    def read(self, now: float | None = None, *, expected_groups: Iterable[str] | None = None,
             silent_is_off: bool = False) -> SignalSnapshot:
        """``silent_is_off`` (advisory): an expected group whose worker refuses the connection is
        taken as off in the real fleet, not as a problem, while some other group's worker answers."""
        policy = self.policy
        expected = set(policy.fleet.group_names() if expected_groups is None else expected_groups)
        at = time.time() if now is None else now
        q = policy.slo.ttft_percentile / 100
        groups = {g.name: g for g in policy.fleet.groups}
        results = dict(zip(groups, self._pool.map(lambda g: self._scrape(g.worker_url), groups.values())))
        if silent_is_off:
            refused = {n for n, (scrape, _k, detail) in results.items()
                       if scrape is None and CONNECT_REFUSED in (detail or "")}
            if refused and any(scrape is not None for scrape, _k, _d in results.values()):
                expected -= refused
        out: dict[str, GroupSignals] = {}
        problems: list[Problem] = []
        window_ttft: dict[float, float] = {}
        window_queue: dict[float, float] = {}
        for name, (scrape, kind, detail) in results.items():
            if scrape is None:
                if name in expected:
                    problems.extend(Problem(sig, name, kind or "unreachable", detail or "") for sig in ("running", "queued", "kv_usage"))
                self._history.pop(name, None)
                out[name] = GroupSignals()
                continue
            bad = [k for k, v in scrape.gauges.items() if v is not None and not math.isfinite(v)]
            missing = [k for k, v in scrape.gauges.items() if v is None]
            impossible = {k: why for k, v in scrape.gauges.items()
                          if v is not None and k not in bad and (why := out_of_range(k, v)) is not None}
            if name in expected:
                problems.extend(Problem(k, name, "not_a_number", f"{groups[name].worker_url}/metrics: {k} is NaN") for k in bad)
                problems.extend(Problem(k, name, "out_of_range", f"{groups[name].worker_url}/metrics: {why}")
                                for k, why in impossible.items())
                problems.extend(Problem(k, name, "absent", f"{groups[name].worker_url}/metrics: no {k} metric") for k in missing)
            bad += list(impossible)
            history = self._history[name]
            history.append(scrape)
            while len(history) > 1 and scrape.at - history[0].at > policy.signals.window_s:
                history.popleft()
            first = history[0]
            rate = ttft = queue_wait = None
            if first is not scrape and scrape.requests_total is not None and first.requests_total is not None:
                rate = max(0.0, scrape.requests_total - first.requests_total) / max(1e-6, scrape.at - first.at)
                d_ttft, d_queue = _delta(scrape.ttft_buckets, first.ttft_buckets), _delta(scrape.queue_buckets, first.queue_buckets)
                ttft, queue_wait = _quantile(q, d_ttft), _quantile(q, d_queue)
                for b, c in d_ttft.items():
                    window_ttft[b] = window_ttft.get(b, 0.0) + c
                for b, c in d_queue.items():
                    window_queue[b] = window_queue.get(b, 0.0) + c
            if name in expected:  # the derived values too: a counter reset or a broken histogram
                for k, v in (("request_rate", rate), ("ttft_p99_s", ttft), ("queue_wait_p99_s", queue_wait)):
                    if v is not None and (why := out_of_range(k, v)) is not None:
                        problems.append(Problem(k, name, "out_of_range", f"{groups[name].worker_url}/metrics: {why}"))
            rate, ttft, queue_wait = (None if v is None or out_of_range(k, v) else v for k, v in
                                      (("request_rate", rate), ("ttft_p99_s", ttft), ("queue_wait_p99_s", queue_wait)))
            clean = {k: (None if k in bad else v) for k, v in scrape.gauges.items()}
            out[name] = GroupSignals(running=clean["running"], queued=clean["queued"], kv_usage=clean["kv_usage"],
                                     request_rate=rate, ttft_p99_s=ttft, queue_wait_p99_s=queue_wait)
        serving = [s for n, s in out.items() if n in expected or s.running is not None]

        def total(key: str) -> float | None:
            vals = [getattr(s, key) for s in serving]
            return None if not vals or any(v is None for v in vals) else float(sum(vals))

        kv = [s.kv_usage for s in serving if s.kv_usage is not None]
        fleet = GroupSignals(running=total("running"), queued=total("queued"), kv_usage=max(kv) if kv else None,
                             request_rate=total("request_rate"), ttft_p99_s=_quantile(q, window_ttft),
                             queue_wait_p99_s=_quantile(q, window_queue))
        return SignalSnapshot(at=at, groups=out, fleet=fleet, problems=tuple(problems),
                              ttft_over_target=share_above(window_ttft, policy.slo.ttft_target_s))
