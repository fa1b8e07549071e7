"""Recorded history from Prometheus as a per-request trace for the backtest
(``autoscaler simulate --from-prometheus URL --from T --to T``).

Prometheus keeps counters, not requests. Per step of ``step_s`` seconds (default 60) over
[from, to] we read, summed over the fleet's series:

    requests/s          sum(rate({prefix}num_requests_total{SEL}[STEP]))
    prompt tokens/s     sum(rate({prefix}prompt_tokens_total{SEL}[STEP]))      (where exported)
    generated tokens/s  sum(rate({prefix}generation_tokens_total{SEL}[STEP]))  (where exported)

evaluated at from + STEP, from + 2 STEP, ... so step k is the window (from + k STEP, from + (k+1)
STEP] and the windows tile the range without overlap. ``SEL`` is by default the policy's groups
(``{group_label}=~"host1:port|host2:port"``, the same restriction as the live fleet signals), or
``selector`` when given ('' = every series). The range queries go through ``query_range_split``
so any range length works under Prometheus's 11,000 points per series.

Then a per-request ``Trace`` is synthesised (seeded):

- arrivals: in step k, a Poisson process at the recorded rate r_k: n_k ~ Poisson(r_k x STEP)
  arrivals placed uniformly in the step;
- tokens: each arrival draws one (input, output) pair from the shipped length table
  (``loadscale.length_table``); where the token counters exist, the pairs of step k are rescaled
  so that the step's mean input (output) tokens per request equal the recorded
  prompt-token rate / request rate (generated-token rate / request rate) of that step, then
  rounded to whole tokens keeping the totals (cumulative rounding). Without token counters the
  table is used as is.
- gaps: a step for which the request query returns no point at all (Prometheus down, no series
  scraped) is a gap, listed in ``Trace.gap_windows``. Gaps before the first and after the last
  step with data are cut off: the replay's span is the recorded part. Gaps in between are filled
  with rates (and token means) interpolated linearly between the nearest steps with data on each
  side, and counted in the output (``gap_windows``, ``gaps_filled``) so nothing is silently zero.

docs/backtest-from-prometheus.md has the reasoning, limits and measured output.

``fetch_demand_history`` reads another history, for the live controller's warm start
(docs/live.md, "Warm start"): the fleet's demand (running + queued requests over the policy's
groups, the signal the core decides on) at every step of a range.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from autoscaler.adapters.prometheus import PrometheusError, plan_queries, query_range_split
from autoscaler.errors import BadInput
from autoscaler.policy.model import Policy, Signals
from autoscaler.sim.loadscale import length_table, scale_for_policy
from autoscaler.sim.traces import Trace

log = logging.getLogger(__name__)

FORMAT = "prometheus"
DEFAULT_STEP_S = 60
DEFAULT_TIMEOUT_S = 30.0
REQUESTS, PROMPT_TOKENS, GENERATED_TOKENS = "num_requests_total", "prompt_tokens_total", "generation_tokens_total"
# More than this share of the range's steps without data earns a warning (a step shorter than
# two scrape intervals leaves most windows with fewer than the two samples rate() needs).
GAP_WARNING_SHARE = 0.25

_SELECTOR_CHECK = re.compile(r"^[^{}\[\]]*$")


@dataclass
class History:
    """What the range queries returned, one value per step; NaN = no point for that step."""

    url: str
    start: float  # epoch s of the range start (--from)
    end: float  # epoch s of --to
    step_s: int
    queries: dict[str, str]  # requests / input_tokens / output_tokens -> PromQL
    request_rate: np.ndarray  # (steps,) requests/s
    input_rate: np.ndarray | None  # (steps,) prompt tokens/s; None: no series at all in the range
    output_rate: np.ndarray | None  # (steps,) generated tokens/s; None: no series at all
    bad_samples: int  # points that were not a finite number >= 0 (treated as no data)

    @property
    def steps(self) -> int:
        return int(self.request_rate.shape[0])


# ------------------------------------------------------------------------------------ queries
def fleet_selector(signals: Signals, instances: Sequence[str]) -> str:
    """``instance=~"a:1|b:2"``: the policy's groups, as the live fleet signals restrict them."""
    alternatives = "|".join(re.escape(i) for i in instances).replace("\\", "\\\\")
    return f'{signals.group_label}=~"{alternatives}"'


def history_queries(signals: Signals, selector: str, step_s: int) -> dict[str, str]:
    """The three PromQL range queries, e.g. ``sum(rate(sglang:num_requests_total{instance=~"..."}[60s]))``."""
    sel = f"{{{selector}}}" if selector.strip() else ""
    prefix = signals.metric_prefix
    return {
        role: f"sum(rate({prefix}{name}{sel}[{step_s}s]))"
        for role, name in (("requests", REQUESTS), ("input_tokens", PROMPT_TOKENS), ("output_tokens", GENERATED_TOKENS))
    }


def step_count(start: float, end: float, step_s: int) -> int:
    """Whole steps in [start, end]; a remainder shorter than a step is left out."""
    return int(math.floor((end - start) / step_s + 1e-9))


def check_range(start: float, end: float, step_s: int) -> int:
    if not isinstance(step_s, int) or step_s < 1:
        raise BadInput(f"--step: {step_s!r} must be a whole number of seconds, at least 1")
    if end <= start:
        raise BadInput(f"--to ({_iso(end)}) must be after --from ({_iso(start)})")
    n = step_count(start, end, step_s)
    if n < 1:
        raise BadInput(f"--from {_iso(start)} --to {_iso(end)}: the range is shorter than one --step of {step_s} s")
    return n


def _values(series, start: float, step_s: int, n: int) -> tuple[np.ndarray | None, int]:
    """Samples of a ``sum(...)`` answer as one value per step (NaN where none); None if no series."""
    if not series:
        return None, 0
    out = np.full(n, np.nan)
    bad = 0
    for s in series:  # sum() gives one series without labels; be lenient if a query gives more
        for t, v in s.samples:
            k = int(round((t - start) / step_s)) - 1
            if not 0 <= k < n:
                continue
            if not math.isfinite(v) or v < 0:
                bad += 1
                continue
            out[k] = v if np.isnan(out[k]) else out[k] + v
    return out, bad


def fetch_history(
    url: str,
    start: float,
    end: float,
    *,
    signals: Signals,
    selector: str,
    step_s: int = DEFAULT_STEP_S,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> History:
    """Run the three range queries over [start, end] (epoch s). Raises BadInput for a bad range,
    PrometheusError (exit 1) when Prometheus cannot be queried."""
    n = check_range(start, end, step_s)
    if not _SELECTOR_CHECK.match(selector):
        raise BadInput(f"--selector: {selector!r}: give label matchers without braces, e.g. job=\"sglang\"")
    queries = history_queries(signals, selector, step_s)
    first, last = start + step_s, start + n * step_s
    answers = {role: query_range_split(url, q, first, last, step_s, timeout_s=timeout_s) for role, q in queries.items()}
    req, bad = _values(answers["requests"], start, step_s, n)
    inp, bad_in = _values(answers["input_tokens"], start, step_s, n)
    out, bad_out = _values(answers["output_tokens"], start, step_s, n)
    return History(
        url=url,
        start=start,
        end=end,
        step_s=step_s,
        queries=queries,
        request_rate=req if req is not None else np.full(n, np.nan),
        input_rate=inp,
        output_rate=out,
        bad_samples=bad + bad_in + bad_out,
    )


# ------------------------------------------------------------------------------------ synthesis
def _interp(values: np.ndarray, known: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Linear interpolation over step indices (flat beyond the known ends)."""
    idx = np.flatnonzero(known)
    return np.interp(at, idx, values[idx])


def _per_request_means(rate: np.ndarray | None, req: np.ndarray, has_req: np.ndarray, steps: np.ndarray,
                       replayed_rate: np.ndarray) -> tuple[np.ndarray | None, int]:
    """Tokens per request of each replayed step: recorded where both rates are known and the
    request rate is above 0, interpolated between such steps elsewhere. Also the number of
    replayed steps with traffic whose mean was interpolated. (None, 0) without any token data."""
    if rate is None:
        return None, 0
    known = has_req & ~np.isnan(rate) & (req > 0)
    if not known.any():
        return None, 0
    mean = np.full(req.shape, np.nan)
    mean[known] = rate[known] / req[known]
    return _interp(mean, known, steps.astype(np.float64)), int((~known[steps] & (replayed_rate > 0)).sum())


def _pin_means(raw: np.ndarray, step_of: np.ndarray, n_steps: int, target: np.ndarray) -> np.ndarray:
    """Rescale ``raw`` within each step so the step's mean is ``target[step]``; whole tokens
    by cumulative rounding (each step's total within one token, the grand total within half)."""
    counts = np.bincount(step_of, minlength=n_steps)
    sums = np.bincount(step_of, weights=raw.astype(np.float64), minlength=n_steps)
    want = target * counts
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(sums > 0, want / sums, 0.0)
    x = raw * factor[step_of]
    flat = sums[step_of] <= 0  # every drawn pair had 0 tokens: share the step's total evenly
    x[flat] = target[step_of][flat]
    cum = np.rint(np.cumsum(x))
    return np.diff(cum, prepend=0.0).astype(np.int64)


def synthesise(history: History, seed: int = 0) -> tuple[Trace, dict[str, Any]]:
    """The per-request trace (see the module doc) and the ``trace`` info for ``simulate --json``."""
    s = history.step_s
    n = history.steps
    req = history.request_rate
    has = ~np.isnan(req)
    gap_steps = np.flatnonzero(~has)
    where = f"{history.url}: {history.queries['requests']} from {_iso(history.start)} to {_iso(history.end)}"
    if not has.any():
        raise BadInput(f"{where}: no data at any {s} s step (no such series, or nothing recorded then)")
    if gap_steps.size > GAP_WARNING_SHARE * n:
        log.warning("%d of %d steps have no data (%s): those inside the replay are filled by interpolation, "
                    "those at its edges cut; if data should be there, is --step %d s at least twice the scrape "
                    "interval?", gap_steps.size, n, where, s)
    first, last = int(np.flatnonzero(has)[0]), int(np.flatnonzero(has)[-1])
    steps = np.arange(first, last + 1)
    rate_replayed = _interp(req, has, steps.astype(np.float64))
    filled = int((~has[steps]).sum())

    rng = np.random.default_rng(seed)
    counts = rng.poisson(rate_replayed * s)
    total = int(counts.sum())
    if total == 0:
        raise BadInput(f"{where}: the recorded request rate is 0 throughout; nothing to replay")
    local = np.repeat(np.arange(steps.size), counts)  # index into `steps` of each request
    t = np.sort((steps[local] + rng.random(total)) * s)  # stays grouped by step: each lies in its step

    table = length_table()
    pick = rng.integers(0, table.shape[0], size=total)
    in_mean, in_filled = _per_request_means(history.input_rate, req, has, steps, rate_replayed)
    out_mean, out_filled = _per_request_means(history.output_rate, req, has, steps, rate_replayed)
    inp = table[pick, 0].copy() if in_mean is None else _pin_means(table[pick, 0], local, steps.size, in_mean)
    out = table[pick, 1].copy() if out_mean is None else _pin_means(table[pick, 1], local, steps.size, out_mean)

    gap_windows = [(float(k * s), float((k + 1) * s)) for k in gap_steps.tolist()]
    trace = Trace(
        format=FORMAT,
        path=history.url,
        start_epoch_s=float(history.start),
        t_s=t,
        input_tokens=inp,
        output_tokens=out,
        session=np.full(total, -1, dtype=np.int64),
        prefix_blocks=None,
        span_s=(float(first * s), float((last + 1) * s)),
        requests_read=int(has.sum()),
        bad_rows=history.bad_samples,
        gap_windows=gap_windows,
    )

    recorded = float(np.nansum(req) * s)

    def recorded_mean(r: np.ndarray | None) -> float | None:
        if r is None:
            return None
        ok = has & ~np.isnan(r)
        requests = float(req[ok].sum())
        return round(float(r[ok].sum()) / requests, 3) if requests > 0 else None

    info = {
        "format": FORMAT,
        "requests_read": trace.requests_read,  # steps with a recorded request rate
        "bad_rows": trace.bad_rows,
        "gap_windows": len(gap_windows),  # steps without data (Trace.gap_windows lists them)
        "url": history.url,
        "from": _iso(history.start),
        "to": _iso(history.end),
        "step_s": s,
        "steps": n,
        "replay_from": _iso(history.start + trace.span_s[0]),
        "replay_to": _iso(history.start + trace.span_s[1]),
        "gaps_filled": filled,  # gap steps inside the replay, rates interpolated
        "gaps_cut": int(gap_steps.size - filled),  # gap steps before the first / after the last data
        "recorded_requests": round(recorded, 1),  # sum over steps with data of rate x step
        "expected_requests": round(float(rate_replayed.sum() * s), 1),  # with the filled gaps
        "tokens": {
            "input": "length_table" if in_mean is None else "recorded",
            "output": "length_table" if out_mean is None else "recorded",
        },
        "token_steps_interpolated": {"input": in_filled, "output": out_filled},
        "recorded_input_tokens_per_request": recorded_mean(history.input_rate),
        "recorded_output_tokens_per_request": recorded_mean(history.output_rate),
        "queries": dict(history.queries),
        "seed": seed,
    }
    return trace, info


# ------------------------------------------------------------------------------------ demand
@dataclass(frozen=True)
class DemandHistory:
    """The fleet's recorded demand over a range, one value per step that has one."""

    url: str
    start: float  # epoch s: the first step
    end: float  # epoch s: the range's end (the last step is at or before it)
    step_s: float
    queries: dict[str, str]  # running / queued -> PromQL (the policy's per-group queries)
    samples: tuple[tuple[float, float], ...]  # (epoch s, running + queued over the fleet's groups), time order
    steps: int  # steps in the range
    bad_samples: int  # points that were not a finite number >= 0 (no data)

    @property
    def gaps(self) -> int:
        """Steps without a demand reading (no group had both running and queued)."""
        return self.steps - len(self.samples)


def fetch_demand_history(url: str, policy: Policy, start: float, end: float, *, step_s: float,
                         timeout_s: float = DEFAULT_TIMEOUT_S, deadline: float | None = None) -> DemandHistory:
    """The fleet's demand at start, start + step, ..., up to end: at each step, the sum over the
    policy's groups (series matched by ``signals.group_label``, as the live reader matches them) of
    running + queued, from the policy's own ``running`` and ``queued`` queries, counting the groups
    that have both. A step where none has both is a gap (no sample: never a silent 0).

    ``deadline`` (``time.monotonic()``) bounds the whole read. Raises PrometheusError when
    Prometheus cannot be queried or the budget is spent; BadInput for a bad range or URL."""
    plan = plan_queries(policy.signals, policy.slo.ttft_percentile, [g.metrics_instance for g in policy.fleet.groups])
    queries = {name: plan[name].by_group for name in ("running", "queued")}
    mine = {g.metrics_instance for g in policy.fleet.groups}
    label = policy.signals.group_label
    steps = int(math.floor((end - start) / step_s + 1e-9)) + 1
    values: dict[str, dict[tuple[int, str], float]] = {}
    bad = 0
    for name, promql in queries.items():
        per = values[name] = {}
        for series in query_range_split(url, promql, start, end, step_s, timeout_s=timeout_s, deadline=deadline):
            instance = series.labels.get(label)
            if instance not in mine:
                continue
            for t, v in series.samples:
                if not math.isfinite(v) or v < 0:
                    bad += 1
                    continue
                k = int(round((t - start) / step_s))
                per[(k, instance)] = per.get((k, instance), 0.0) + v
    demand: dict[int, float] = {}
    for key, running in values["running"].items():
        queued = values["queued"].get(key)
        if queued is not None:
            demand[key[0]] = demand.get(key[0], 0.0) + running + queued
    samples = tuple((start + k * step_s, demand[k]) for k in sorted(demand) if 0 <= k < steps)
    return DemandHistory(url=url, start=start, end=end, step_s=step_s, queries=queries, samples=samples,
                         steps=steps, bad_samples=bad)


# ------------------------------------------------------------------------------------ entry
def prepare_prometheus_trace(
    url: str,
    start: float,
    end: float,
    policy: Policy,
    *,
    step_s: int = DEFAULT_STEP_S,
    seed: int = 0,
    peak_utilization: float | None = None,
    selector: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> tuple[Trace, float, dict[str, Any]]:
    """Like ``backtest.prepare_trace``: (trace, load scale, trace info) for recorded history.

    The history is the fleet's own traffic, so it is replayed as recorded (load scale 1.0)
    unless ``peak_utilization`` is given; then ``scale_trace`` fits it as for any trace.
    ``selector`` None = the policy's groups (``fleet_selector``)."""
    given = selector is not None
    if selector is None:
        selector = fleet_selector(policy.signals, [g.metrics_instance for g in policy.fleet.groups])
    try:
        history = fetch_history(url, start, end, signals=policy.signals, selector=selector, step_s=step_s,
                                timeout_s=timeout_s)
    except PrometheusError as exc:
        if given and exc.kind == "http_error" and "bad_data" in exc.detail:  # the user's matchers do not parse
            raise BadInput(f"--selector {selector!r}: {exc.detail}") from exc
        raise
    trace, info = synthesise(history, seed)
    info["selector"] = selector
    factor = 1.0
    if peak_utilization is not None:
        trace, factor = scale_for_policy(trace, policy, peak_utilization, seed)
    return trace, factor, info


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


__all__ = [
    "DEFAULT_STEP_S",
    "FORMAT",
    "DemandHistory",
    "History",
    "check_range",
    "fetch_demand_history",
    "fetch_history",
    "fleet_selector",
    "history_queries",
    "prepare_prometheus_trace",
    "synthesise",
]
