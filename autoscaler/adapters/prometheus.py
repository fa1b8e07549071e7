"""Live load signals from Prometheus, as a ``SignalSnapshot`` of values and named problems.

``read_signals`` runs, concurrently and at one evaluation time, every query in the policy's
``signals`` section plus a few it derives from them (see ``plan_queries``), maps each series to a
group by the ``group_label`` value (``Group.metrics_instance``: host:port of the worker URL) and
turns every anomaly into a ``Problem``. It never raises for a Prometheus anomaly; a value is a
number or None, never a silent 0. docs/signals.md explains each problem kind with examples.

Derived queries, per signal:

- ``freshness``: ``max by (LABEL) (timestamp(M))`` for the metrics M the template names as
  ``{prefix}NAME``. A group whose newest sample is older than ``staleness_s``, or that has a value
  but no sample at all within Prometheus's lookback, is ``stale``. This matters because an
  instant query answers with the last sample of the past 5 minutes (a frozen target's gauge keeps
  answering), and ``rate()`` keeps answering for a whole window after a target died (Prometheus
  marks the target's series stale at the first failed scrape, so ``timestamp()`` no longer finds
  them while ``rate()`` over the window still does).
- ``fleet`` (percentile signals only): the same template with ``{label}`` dropped from its
  ``by (...)`` lists, e.g. ``sum by ({label}, le)`` -> ``sum by (le)``, and every ``{prefix}NAME``
  selector restricted to the policy's groups (``NAME{instance=~"host1:port|host2:port"}``), so
  that other targets with the same metrics (another fleet, a test box) do not count. A fleet
  percentile must be computed over all the fleet's buckets; it cannot be combined from the
  groups' percentiles. Sums (running, queued, request_rate) and the maximum (kv_usage) are
  combined from the groups' values.
- ``traffic`` (percentile signals only): observations per second, ``rate(NAME_count[window])``
  for the template's one ``{prefix}NAME_bucket`` (none when it reads no or several histograms). ``histogram_quantile`` over a window with no
  observations is NaN: with traffic 0 that is an idle group (value None, no problem); with
  traffic above 0, or no way to tell, it is ``not_a_number``.

``query_range_split`` fetches a range query in pieces below Prometheus's 11,000 points per series
(for replaying recorded history).
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from autoscaler.adapters.histogram import share_above
from autoscaler.adapters.keepalive import (
    ConnectFailed,
    ConnectTimeout,
    KeepAlivePool,
    ProtocolFailed,
    ReadTimeout,
    Response,
)
from autoscaler.core.types import GroupSignals, Problem, SignalSnapshot, out_of_range
from autoscaler.errors import BadInput, RuntimeFailure
from autoscaler.policy.model import SIGNAL_NAMES, Policy, Signals

log = logging.getLogger(__name__)

SUM_SIGNALS = ("running", "queued", "request_rate")  # fleet value = sum over groups
MAX_SIGNALS = ("kv_usage",)  # fleet value = the fullest group
PERCENTILE_SIGNALS = ("ttft_p99_s", "queue_wait_p99_s")  # fleet value = the fleet query
MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses a range query with more points per series

_PREFIXED_METRIC = re.compile(r"\{prefix\}([A-Za-z0-9_:]+)")
_BUCKET_METRIC = re.compile(r"\{prefix\}([A-Za-z0-9_:]+)_bucket\b")
_SELECTOR = re.compile(r"\{prefix\}([A-Za-z0-9_:]+)(\{)?")
# {label} inside a grouping list, with the comma that joins it to its neighbour.
_LABEL_IN_LIST = re.compile(r"\{label\}\s*,\s*|\s*,\s*\{label\}|\{label\}")


class PrometheusError(RuntimeFailure):
    """A query failed (``query_range_split``): ``kind`` is ``unreachable`` (no connection), ``slow``
    (connected, no answer in time) or ``http_error``."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"prometheus {kind}: {detail}")
        self.kind = kind
        self.detail = detail


# ------------------------------------------------------------------------------ query plan
@dataclass(frozen=True)
class SignalQueries:
    """Every query read_signals runs for one signal (None: not applicable to this template)."""

    signal: str
    by_group: str  # the policy's query, rendered
    freshness: str | None  # newest sample time per group of the metrics it reads
    fleet: str | None  # percentile signals: aggregated over all series
    traffic: str | None  # percentile signals: observations/s per group
    fleet_traffic: str | None
    # ttft_p99_s: the fleet's histogram by bucket, for the share of first tokens over the target
    # (SignalSnapshot.ttft_over_target: what a drain's moved sessions cost, core/risk.py)
    over_target: str | None = None

    def items(self) -> Iterable[tuple[str, str]]:
        for role in ("by_group", "freshness", "fleet", "traffic", "fleet_traffic", "over_target"):
            text = getattr(self, role)
            if text is not None:
                yield role, text


def _fill(signals: Signals, template: str, percentile: float) -> str:
    """Render any template with the policy's placeholders, through Signals.render itself."""
    return signals.model_copy(update={"queries": {"_": template}}).render("_", percentile)


def fleet_template(template: str, instances: Sequence[str]) -> str:
    """The fleet variant of a per-group template: ``{label}`` removed from its ``by (...)`` lists
    and each ``{prefix}NAME`` selector limited to the fleet's ``instances`` (group label values).

    ``histogram_quantile({quantile}, sum by ({label}, le) (rate({prefix}x_bucket[{window}])))`` ->
    ``histogram_quantile({quantile}, sum by (le) (rate({prefix}x_bucket{{label}=~"a:1|b:2"}[{window}])))``.
    ``{label}`` is still a placeholder in the result; render it with ``_fill``.
    """
    return _limit_to(_LABEL_IN_LIST.sub("", template), instances)


def _limit_to(template: str, instances: Sequence[str]) -> str:
    """Add ``{label}=~"i1|i2"`` to every ``{prefix}NAME`` selector (merged into an existing ``{...}``)."""
    # re.escape for the regex, then double the backslashes for the PromQL string literal.
    alternatives = "|".join(re.escape(i) for i in instances).replace("\\", "\\\\")
    matcher = '{label}=~"' + alternatives + '"'

    def add(match: re.Match[str]) -> str:
        if match.group(2):  # NAME{job="x"} -> NAME{{label}=~"..",job="x"}
            return "{prefix}" + match.group(1) + "{" + matcher + ","
        return "{prefix}" + match.group(1) + "{" + matcher + "}"

    return _SELECTOR.sub(add, template)


def _selector(names: Sequence[str]) -> str:
    # Metric names hold only [A-Za-z0-9_:], nothing a regex treats specially.
    return names[0] if len(names) == 1 else '{__name__=~"' + "|".join(names) + '"}'



def plan_queries(signals: Signals, percentile: float, instances: Sequence[str]) -> dict[str, SignalQueries]:
    """The queries for every signal, rendered; ``instances`` are the fleet's group label values
    (``Group.metrics_instance``). ``autoscaler signals --show-queries`` prints them."""
    label = signals.group_label
    plan = {}
    for name in SIGNAL_NAMES:
        template = signals.queries[name]
        metrics = list(dict.fromkeys(signals.metric_prefix + m for m in _PREFIXED_METRIC.findall(template)))
        freshness = f"max by ({label}) (timestamp({_selector(metrics)}))" if metrics else None
        fleet = traffic = fleet_traffic = over_target = None
        if name in PERCENTILE_SIGNALS:
            fleet = _fill(signals, fleet_template(template, instances), percentile)
            histograms = set(_BUCKET_METRIC.findall(template))
            if len(histograms) == 1:  # else we cannot tell which count stands for the traffic
                traffic_template = f"sum by ({{label}}) (rate({{prefix}}{histograms.pop()}_count[{{window}}]))"
                traffic = _fill(signals, traffic_template, percentile)
                fleet_traffic = _fill(signals, fleet_template(traffic_template, instances), percentile)
                if name == "ttft_p99_s":
                    buckets = traffic_template.replace("_count[", "_bucket[").replace("by ({label})", "by (le)")
                    over_target = _fill(signals, fleet_template(buckets, instances), percentile)
        plan[name] = SignalQueries(
            signal=name,
            by_group=signals.render(name, percentile),
            freshness=freshness,
            fleet=fleet,
            traffic=traffic,
            fleet_traffic=fleet_traffic,
            over_target=over_target,
        )
    return plan


def share_over(series: list[dict[str, Any]] | None, target_s: float) -> float | None:
    """The share of first tokens over ``target_s`` from the ``over_target`` query's answer (one
    series per bucket, ``le`` labelled): ``histogram.share_above``. None without observations, or
    when a bucket is unreadable."""
    buckets: dict[float, float] = {}
    for s in series or ():
        le, value = s.get("metric", {}).get("le"), _number(s)
        try:
            bound = float(le)  # "+Inf" too
        except (TypeError, ValueError):
            return None
        if value is None:
            return None
        buckets[bound] = buckets.get(bound, 0.0) + value
    return share_above(buckets, target_s)


# ------------------------------------------------------------------------------ the client
def _check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(f"prometheus URL {url!r} must be http(s)://host[:port]")
    return url.rstrip("/")


def _seconds(timeout_s: float) -> str:
    """Prometheus's ``timeout`` parameter in plain seconds ("2.5", "3"): its API parses a float as
    seconds, while a duration string must be whole ("3s"; "2.5s" is refused as bad_data)."""
    return f"{timeout_s:g}"


class PrometheusClient:
    """One Prometheus HTTP API client for a whole run: one connection pool and one thread pool,
    made once (a tick does not build a session or threads). No retries: a tick cannot wait for
    them, and the next tick tries again anyway. Every failure comes out typed (``_Answer.kind``
    or ``PrometheusError``) with the server's own error text from its JSON body."""

    def __init__(self, url: str, *, timeout_s: float = 3.0, max_concurrency: int = 24) -> None:
        self.url = _check_url(url)
        self.timeout_s = timeout_s
        # Uncompressed answers: an instant vector of a few series is a few hundred bytes, and gzip
        # costs more than it saves (measured with httpx on loopback: 0.59 -> 0.50 ms of client CPU
        # per query). The standard library's HTTP client, not httpx: 0.34 ms against 1.43 ms of
        # client CPU per query (adapters/keepalive.py, bench/README.md).
        self._http = KeepAlivePool(self.url, timeout_s=timeout_s, max_idle=max_concurrency)
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="prometheus-query")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(self, path: str, params: Mapping[str, str], timeout_s: float) -> Any:
        """GET an API path; returns ``data`` of a success answer. Raises PrometheusError."""
        try:
            response = self._http.get(path, dict(params), timeout_s=timeout_s)
        except ConnectTimeout as exc:
            raise PrometheusError("unreachable", f"no connection within {timeout_s:g} s to {self.url}") from exc
        except ReadTimeout as exc:  # it took the connection: there, but slow (an overloaded Prometheus)
            raise PrometheusError("slow", f"connected, but no answer within {timeout_s:g} s from {self.url}") from exc
        except ConnectFailed as exc:
            raise PrometheusError("unreachable", f"{_connection_detail(exc)} at {self.url}") from exc
        except ProtocolFailed as exc:
            raise PrometheusError("unreachable", f"{exc} at {self.url}") from exc
        try:
            payload = json.loads(response.content)
        except ValueError:  # UnicodeDecodeError is one
            payload = None
        if response.status_code != 200:
            if isinstance(payload, dict) and "error" in payload:
                message = f"{payload.get('errorType', 'error')}: {payload['error']}"
            else:
                message = _not_the_api(response, self.url)
            raise PrometheusError("http_error", f"HTTP {response.status_code}: {message}")
        if not isinstance(payload, dict) or payload.get("status") != "success" or "data" not in payload:
            raise PrometheusError("http_error", _not_the_api(response, self.url))
        return payload["data"]

    def query(self, promql: str, at: float, timeout_s: float | None = None) -> _Answer:
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        # Prometheus's own timeout too, so a heavy query is cut server-side rather than left running.
        # Plain seconds: Prometheus reads "2.5" as 2.5 s but refuses "2.5s" (a Go duration has no
        # fraction), which failed every query under a policy with signals.timeout_s 2.5.
        params = {"query": promql, "time": f"{at:.3f}", "timeout": _seconds(timeout_s)}
        try:
            data = self._get("/api/v1/query", params, timeout_s)
        except PrometheusError as exc:
            return _Answer(kind=exc.kind, detail=exc.detail)
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(result, list) \
                or any(not isinstance(s, dict) for s in result):
            return _Answer(kind="http_error", detail="the answer is not an instant vector (a scalar or string query?)")
        return _Answer(series=result)

    def query_range(self, promql: str, start: float, end: float, step: float, timeout_s: float) -> list[dict]:
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}",
                  "timeout": _seconds(timeout_s)}
        try:
            data = self._get("/api/v1/query_range", params, timeout_s)
        except PrometheusError as exc:
            if exc.kind == "http_error":
                raise PrometheusError("http_error", f"{exc.detail}; query: {promql}") from exc
            raise
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list):
            raise PrometheusError("http_error", f"not a Prometheus API answer from {self.url} (no result list)")
        return result

    def run_all(self, queries: Mapping[tuple[str, str], str], at: float, timeout_s: float) -> dict[tuple[str, str], _Answer]:
        """Run every query at once; whatever has not answered ``timeout_s`` (+ slack) later is unreachable.

        Concurrent, so a dead Prometheus costs one connection attempt (refused: milliseconds; a
        black hole: ``timeout_s``), not one per query."""
        futures = {self._pool.submit(self.query, q, at, timeout_s): key for key, q in queries.items()}
        done, _ = wait(futures, timeout=timeout_s + 0.5, return_when=FIRST_EXCEPTION)
        answers = {}
        for future, key in futures.items():
            if future in done and future.exception() is None:
                answers[key] = future.result()
            elif future in done:  # a bug in query(), not a Prometheus anomaly: let it surface
                error = future.exception()
                assert error is not None
                raise error
            else:
                future.cancel()
                answers[key] = _Answer(kind="slow", detail=f"no answer within {timeout_s:g} s from {self.url}")
        return answers


@dataclass(frozen=True)
class _Answer:
    series: list[dict[str, Any]] | None = None  # None when the query failed
    kind: str | None = None  # unreachable / http_error when it failed
    detail: str = ""


def _not_the_api(response: Response, url: str) -> str:
    """One short line for an answer that is not Prometheus's JSON API: a plain web server's 404 page, a
    proxy's login form. Its body is never copied in (a whole HTML page landed in the problem list)."""
    kind = response.headers.get("content-type", "").split(";")[0].strip() or "no content type"
    return f"a {kind} answer of {len(response.content)} bytes, not a Prometheus API answer: is {url} Prometheus?"


def _connection_detail(exc: Exception) -> str:
    text = str(exc)
    for hint in ("Connection refused", "Name or service not known", "No route to host", "Connection reset"):
        if hint in text:
            return hint.lower()
    return f"connection failed ({text[:160]})"


# ------------------------------------------------------------------------------ the snapshot
def _number(series: dict[str, Any]) -> float | None:
    """The sample value; None if it is not a finite number (NaN, +Inf, garbage)."""
    try:
        value = float(series["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _raw(series: dict[str, Any]) -> str:
    try:
        return str(series["value"][1])
    except (KeyError, IndexError, TypeError):
        return repr(series)


def _split_by_group(series: list[dict[str, Any]], label: str, group_of: Mapping[str, str]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for s in series:
        value = s.get("metric", {}).get(label)
        group = group_of.get(value) if value is not None else None
        if group is None:
            log.debug("series %s matches no group by %s", s.get("metric"), label)
            continue
        out.setdefault(group, []).append(s)
    return out


def _labels_text(series: list[dict]) -> str:
    return "; ".join("{" + ", ".join(f"{k}={v!r}" for k, v in sorted(s.get("metric", {}).items())) + "}" for s in series)


@dataclass
class _SignalResult:
    values: dict[str, float | None] = field(default_factory=dict)  # per group
    fleet: float | None = None
    problems: list[Problem] = field(default_factory=list)


def _evaluate(
    name: str,
    q: SignalQueries,
    answers: Mapping[tuple[str, str], _Answer],
    policy: Policy,
    expected: frozenset[str],
    now: float,
) -> _SignalResult:
    signals = policy.signals
    label = signals.group_label
    group_of = {g.metrics_instance: g.name for g in policy.fleet.groups}
    out = _SignalResult(values={g.name: None for g in policy.fleet.groups})
    main = answers[(name, "by_group")]
    if main.series is None:
        # An HTTP error names the query (a PromQL error is the policy's); unreachable names the URL.
        detail = main.detail if main.kind in ("unreachable", "slow") else f"{main.detail}; query: {q.by_group}"
        out.problems.append(Problem(name, None, main.kind or "http_error", detail))
        return out
    if not main.series:
        if expected:
            out.problems.append(Problem(name, None, "empty", f"no series at all; query: {q.by_group}"))
        return out

    fresh = answers.get((name, "freshness"))
    if fresh is not None and fresh.series is None:
        # Without a freshness answer no value can be vouched for.
        out.problems.append(Problem(name, None, fresh.kind or "http_error", f"freshness query: {fresh.detail}"))
        return out
    newest: dict[str, float | None] = {}
    if fresh is not None:
        for group_name, ss in _split_by_group(fresh.series or [], label, group_of).items():
            newest[group_name] = max((v for v in map(_number, ss) if v is not None), default=None)
    traffic = _traffic_by_group(answers.get((name, "traffic")), label, group_of)

    by_group = _split_by_group(main.series, label, group_of)
    for group in policy.fleet.groups:
        gname = group.name
        matched = by_group.get(gname, [])
        problem: tuple[str, str] | None = None
        value: float | None = None
        if not matched:
            problem = ("absent", f"no series with {label}={group.metrics_instance!r}")
        elif len(matched) > 1:
            problem = ("multiple_series", f"{len(matched)} series for one group: {_labels_text(matched)}")
        elif fresh is not None and (age := _age(newest.get(gname), now)) is not None and age > signals.staleness_s:
            problem = ("stale", f"newest sample is {age:.1f} s old (limit {signals.staleness_s:g} s)")
        elif fresh is not None and newest.get(gname) is None:
            problem = ("stale", f"no current sample (the target is down or failing its scrapes); "
                                f"the {signals.window_s}s window still holds old ones")
        else:
            value = _number(matched[0])
            if value is None:
                if name in PERCENTILE_SIGNALS and _is_idle(traffic, gname):
                    pass  # no requests in the window: unknown latency, not an anomaly
                else:
                    problem = ("not_a_number", _nan_detail(name, _raw(matched[0]), traffic, gname))
            elif (why := out_of_range(name, value)) is not None:
                problem, value = ("out_of_range", f"{why}; query: {q.by_group}"), None
        if problem is None:
            out.values[gname] = value
        elif gname in expected:
            out.problems.append(Problem(name, gname, *problem))
        # A group not expected to serve (off, draining) reports what it has, but no problems.
    out.fleet = _fleet_value(name, q, answers, out, expected)
    return out


def _age(newest: float | None, now: float) -> float | None:
    return None if newest is None else now - newest


def _traffic_by_group(answer: _Answer | None, label: str, group_of: Mapping[str, str]) -> dict[str, float | None] | None:
    if answer is None or answer.series is None:
        return None
    return {g: (_number(ss[0]) if len(ss) == 1 else None) for g, ss in _split_by_group(answer.series, label, group_of).items()}


def _is_idle(traffic: Mapping[Any, float | None] | None, group: str | None) -> bool:
    return traffic is not None and traffic.get(group) == 0.0


def _nan_detail(name: str, raw: str, traffic: Mapping[Any, float | None] | None, group: str | None) -> str:
    if name not in PERCENTILE_SIGNALS:
        return f"value {raw}"
    if traffic is None:
        return f"value {raw}; cannot tell an idle window from a broken histogram (no traffic query)"
    rate = traffic.get(group)
    if rate is None:
        return f"value {raw}; the histogram's _count is missing or not a number"
    return f"value {raw} while {rate:.3g} observations/s (a broken histogram, e.g. no +Inf bucket)"


def _fleet_value(
    name: str, q: SignalQueries, answers: Mapping[tuple[str, str], _Answer], out: _SignalResult, expected: frozenset[str]
) -> float | None:
    """Sums and the maximum combine the groups; a percentile comes from the fleet query.

    None when any expected group has a problem with this signal: a partial sum would understate
    demand (and could drive a scale-down) exactly when a group is failing."""
    if any(p.group in expected for p in out.problems):
        return None
    known = [v for v in out.values.values() if v is not None]
    if name in SUM_SIGNALS:
        return math.fsum(known) if known else None
    if name in MAX_SIGNALS:
        return max(known) if known else None
    if q.fleet is None:
        return None
    answer = answers[(name, "fleet")]
    if answer.series is None:
        out.problems.append(Problem(name, None, answer.kind or "http_error", f"fleet query: {answer.detail}"))
        return None
    if not answer.series:
        if expected:
            out.problems.append(Problem(name, None, "empty", f"fleet query returned no series: {q.fleet}"))
        return None
    if len(answer.series) > 1:
        detail = f"fleet query returned {len(answer.series)} series: {_labels_text(answer.series)}"
        out.problems.append(Problem(name, None, "multiple_series", detail))
        return None
    value = _number(answer.series[0])
    if value is not None and (why := out_of_range(name, value)) is not None:
        out.problems.append(Problem(name, None, "out_of_range", f"fleet query: {why}"))
        return None
    if value is None:
        traffic_answer = answers.get((name, "fleet_traffic"))
        traffic: dict[str | None, float | None] | None = None
        if traffic_answer is not None and traffic_answer.series is not None:
            traffic = {None: _number(traffic_answer.series[0]) if len(traffic_answer.series) == 1 else None}
        if not _is_idle(traffic, None):
            out.problems.append(Problem(name, None, "not_a_number", _nan_detail(name, _raw(answer.series[0]), traffic, None)))
    return value


MERGED_KEY = "_derived"  # the one merged query of a read: the queries the reader derives itself
SIGNAL_LABEL = "autoscaler_signal"  # the label that tells the merged query's parts apart
# The derived queries that go into the merged one: generated by the reader (none is the policy's own
# text, so one cannot break the others' syntax), and each part's answer is a vector whose label
# sets, once tagged with the part, collide with no other part's.
MERGED_ROLES = ("freshness", "traffic", "fleet_traffic", "over_target")


def merged_query(parts: Mapping[tuple[str, str], str]) -> str:
    """The derived queries of a read as one: each part labelled with its signal and role and joined
    with ``or`` (the label sets differ by that label, so none collide). One HTTP round trip a tick
    instead of eleven (six freshness, two traffic, two fleet traffic, the TTFT buckets):
    ``label_replace(max by (instance) (timestamp(sglang:num_running_reqs)), "autoscaler_signal",
    "running/freshness", "", "") or label_replace(...)``."""
    return " or ".join(f'label_replace({q}, "{SIGNAL_LABEL}", "{name}/{role}", "", "")'
                       for (name, role), q in parts.items())


def split_merged(answer: _Answer, parts: Mapping[tuple[str, str], str]) -> dict[tuple[str, str], _Answer]:
    """The merged answer back into one answer per part, as if each had been asked alone (the label
    removed); a failed merged query is that failure for every part."""
    if answer.series is None:
        return {key: answer for key in parts}
    by_tag: dict[str, list[dict[str, Any]]] = {f"{name}/{role}": [] for name, role in parts}
    for series in answer.series:
        metric = dict(series.get("metric", {}))
        tag = metric.pop(SIGNAL_LABEL, None)
        if tag in by_tag:
            by_tag[tag].append({**series, "metric": metric})
    return {(name, role): _Answer(series=by_tag[f"{name}/{role}"]) for name, role in parts}


def read_signals(
    policy: Policy,
    prometheus_url: str,
    now: float | None = None,
    *,
    expected_groups: Iterable[str] | None = None,
    client: PrometheusClient | None = None,
    silent_is_off: bool = False,
) -> SignalSnapshot:
    """The load signals at ``now`` (epoch s; default: the clock), one value or problem per signal.

    ``expected_groups``: the groups that should be serving (default: every group of the policy).
    Only they raise ``absent``/``stale``/... problems; another group's series are reported when
    they are valid and fresh (a draining group still has running requests) and ignored otherwise.

    Every query runs concurrently with ``policy.signals.timeout_s`` per request and no retries,
    so a dead Prometheus costs at most about ``timeout_s`` + 0.5 s. Raises BadInput only for a
    malformed URL or an unknown expected group; Prometheus anomalies are problems in the snapshot.
    ``client``: the run's client (the service passes its one client; a one-off call makes its own).
    ``silent_is_off`` (advisory: the real fleet's state is not known): an expected group with no
    series at all (every signal ``absent``) is taken as off in the real fleet, not as a problem;
    the fleet's values are then those of the groups that report. Only while some group reports:
    a fleet that is silent everywhere is a problem.
    """
    url = _check_url(prometheus_url)
    at = time.time() if now is None else now
    names = set(policy.fleet.group_names())
    expected = frozenset(names if expected_groups is None else expected_groups)
    if expected - names:
        raise BadInput(f"expected group {sorted(expected - names)[0]!r} is not in the policy ({', '.join(sorted(names))})")
    instances = [g.metrics_instance for g in policy.fleet.groups]
    plan = plan_queries(policy.signals, policy.slo.ttft_percentile, instances)
    queries = {(name, role): text for name, q in plan.items() for role, text in q.items() if role not in MERGED_ROLES}
    derived = {(name, role): text for name, q in plan.items() for role, text in q.items() if role in MERGED_ROLES}
    if derived:
        queries[(MERGED_KEY, "merged")] = merged_query(derived)
    if client is None:
        with PrometheusClient(url, timeout_s=policy.signals.timeout_s, max_concurrency=len(queries)) as own:
            answers = own.run_all(queries, at, policy.signals.timeout_s)
    else:
        answers = client.run_all(queries, at, policy.signals.timeout_s)
    if derived:
        answers.update(split_merged(answers.pop((MERGED_KEY, "merged")), derived))
    per_signal = {name: _evaluate(name, plan[name], answers, policy, expected, at) for name in SIGNAL_NAMES}
    if silent_is_off and (silent := _silent_groups(per_signal, expected)) and silent != expected:
        # Pure: the same answers evaluated again without the silent groups (no query is repeated).
        expected = expected - silent
        per_signal = {name: _evaluate(name, plan[name], answers, policy, expected, at) for name in SIGNAL_NAMES}
    groups = {
        g.name: GroupSignals(**{name: per_signal[name].values[g.name] for name in SIGNAL_NAMES})
        for g in policy.fleet.groups
    }
    fleet = GroupSignals(**{name: per_signal[name].fleet for name in SIGNAL_NAMES})
    problems = tuple(p for name in SIGNAL_NAMES for p in per_signal[name].problems)
    # The share over the target is the session-move estimate's only input: a failed read leaves it
    # unknown (the drain's watch counts no tick) and is no signal problem (it blocks no decision).
    over = answers.get(("ttft_p99_s", "over_target"))
    share = None if over is None else share_over(over.series, policy.slo.ttft_target_s)
    return SignalSnapshot(at=at, groups=groups, fleet=fleet, problems=problems, ttft_over_target=share)


def _silent_groups(per_signal: Mapping[str, _SignalResult], expected: frozenset[str]) -> frozenset[str]:
    """The expected groups that have no series at all: an ``absent`` problem for every signal (a
    signal that failed as a whole, e.g. unreachable, tells nothing about a group: then none is)."""
    silent = set(expected)
    for result in per_signal.values():
        absent = {p.group for p in result.problems if p.kind == "absent"}
        silent &= absent
        if any(p.group is None for p in result.problems):
            return frozenset()
    return frozenset(silent)


class PrometheusSignals:
    """The live service's signal source: ``read_signals`` with the run's one ``PrometheusClient``."""

    def __init__(self, policy: Policy, prometheus_url: str) -> None:
        self.policy = policy
        self.url = prometheus_url
        self.client = PrometheusClient(prometheus_url, timeout_s=policy.signals.timeout_s)

    def set_policy(self, policy: Policy) -> None:
        self.policy = policy

    def read(self, now: float, *, expected_groups: Iterable[str], silent_is_off: bool = False) -> SignalSnapshot:
        return read_signals(self.policy, self.url, now, expected_groups=expected_groups, client=self.client,
                            silent_is_off=silent_is_off)

    def close(self) -> None:
        self.client.close()


def is_unreachable(snapshot: SignalSnapshot) -> bool:
    """True when Prometheus could not be reached for some signal (the CLI then exits 1)."""
    return any(p.kind in ("unreachable", "slow") for p in snapshot.problems)


def answered_nothing(snapshot: SignalSnapshot) -> bool:
    """True when no signal's query was answered at all (each failed as unreachable or with an HTTP error):
    the URL is not a working Prometheus (a plain web server answers every query 404). The CLI exits 1."""
    failed = {p.signal for p in snapshot.problems if p.group is None and p.kind in ("unreachable", "slow", "http_error")}
    return failed >= set(SIGNAL_NAMES)


# ------------------------------------------------------------------------------ range queries
@dataclass(frozen=True)
class RangeSeries:
    """One series of a range query: its labels and (epoch s, value) samples in time order."""

    labels: Mapping[str, str]
    samples: tuple[tuple[float, float], ...]


def range_chunks(start: float, end: float, step_s: float, max_points: int = MAX_POINTS_PER_SERIES) -> list[tuple[float, float]]:
    """Split [start, end] into ranges of at most ``max_points`` points on the same step grid.

    A range query evaluates at start, start+step, ..., up to end: (end - start) / step + 1 points.
    Each chunk holds ``max_points`` of them and the next starts one step after it ends, so no
    point is fetched twice. E.g. a week at 15 s = 40,321 points -> 4 chunks (11,000 x 3 + 7,321).
    """
    if step_s <= 0:
        raise BadInput(f"step {step_s:g} s must be above 0")
    if end < start:
        raise BadInput(f"end {end:g} is before start {start:g}")
    total = int(math.floor((end - start) / step_s + 1e-9)) + 1
    chunks = []
    for first in range(0, total, max_points):  # bounded: ceil(total / max_points) chunks
        last = min(first + max_points, total) - 1
        chunks.append((start + first * step_s, start + last * step_s))
    return chunks


def query_range_split(
    url: str,
    promql: str,
    start: float,
    end: float,
    step: float,
    *,
    timeout_s: float = 30.0,
    max_points: int = MAX_POINTS_PER_SERIES,
    deadline: float | None = None,
) -> list[RangeSeries]:
    """A range query of any length: fetched in chunks of at most ``max_points`` points per series
    (Prometheus refuses more than 11,000) and merged by label set, in first-seen order.

    Times are epoch seconds; ``step`` is seconds. ``deadline`` (``time.monotonic()``): the whole
    query's time budget; each chunk waits at most what is left of it (and ``timeout_s``). Raises
    PrometheusError (kind ``unreachable`` or ``http_error``, exit code 1) when a chunk fails or the
    budget is spent; BadInput for a bad range or URL."""
    url = _check_url(url)
    merged: dict[frozenset, tuple[dict[str, str], list[tuple[float, float]]]] = {}
    with PrometheusClient(url, timeout_s=timeout_s, max_concurrency=1) as prom:
        for chunk_start, chunk_end in range_chunks(start, end, step, max_points):
            wait_s = timeout_s
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PrometheusError("slow", f"no complete answer from {url} within the time budget")
                wait_s = min(timeout_s, max(0.5, left))
            for series in prom.query_range(promql, chunk_start, chunk_end, step, wait_s):
                labels = dict(series.get("metric", {}))
                key = frozenset(labels.items())
                samples = merged.setdefault(key, (labels, []))[1]
                samples.extend((float(t), float(v)) for t, v in series.get("values", []))
    return [RangeSeries(labels, tuple(samples)) for labels, samples in merged.values()]


