"""The fleet model: replays arrivals through groups of request slots under a controller.

Equations (README, "The fleet model"):
- a group has ``requests_per_group`` slots and a FIFO queue; a request holds one slot from the
  start of its prefill to its last token;
- prefill time = (input tokens - tokens served from the group's prefix cache) / prefill speed;
  decode time = output tokens / decode speed; TTFT = wait for a slot + prefill time;
- routing as the gateway's cache_aware policy: a request whose prefix is cached on a serving group
  above ``cache_threshold`` of its input (Mooncake blocks) or whose session last ran there (CSV
  session ids) goes to that group, unless that group has ``balance_abs_threshold`` more requests
  than the least-loaded one; everything else goes to the least-loaded serving group;
- a started group serves after its start-up time; a draining group takes no new requests and
  stops when its in-flight (running and queued) requests finish; at the drain timeout the policy's
  ``drain.on_timeout`` stops it (the unfinished requests are cut and count as SLO misses) or keeps it
  serving. A drained group loses its cache.
- controllers act every tick on signals one scrape old (running, queued, KV use, request rate and
  TTFT/queue-wait percentiles over ``signals.window_s``), as Prometheus would show them.

The hot loop handles one request in a few microseconds: per group, a 6-entry heap of slot free
times and a heap of in-system finish times; no per-request objects.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from autoscaler.core.types import FleetState, GroupSignals, GroupState, Phase, SignalSnapshot
from autoscaler.policy.model import OnDrainTimeout, Policy
from autoscaler.sim.traces import Trace

BLOCK_TOKENS = 512  # Mooncake's hash_ids are 512-token blocks


class Controller(Protocol):
    period_s: float
    # Optional: a controller with ``uses_signals = False`` (always-on, the oracle) is handed None for
    # the signals, and the replay skips building them; with ``uses_latency_signals = False`` (HPA)
    # the snapshot has the load but no TTFT or queue-wait percentiles (None), and the replay skips
    # tracking first tokens for them.

    def tick(self, now: float, signals: SignalSnapshot, fleet: FleetState) -> tuple[list[str], list[str]]:
        """-> (groups to start or return to service, groups to drain)."""

    def on_ready(self, name: str, startup_s: float) -> None:
        """A started group became ready after ``startup_s``."""


class _Group:
    __slots__ = (
        "name", "idx", "phase", "since", "ready_at", "slots", "inflight", "ctx_tokens", "cache",
        "cache_tokens", "epoch", "on_since", "drain_deadline", "up", "draining_since", "state",
    )  # fmt: skip

    def __init__(self, name: str, idx: int, slots: int):
        self.name, self.idx = name, idx
        self.phase = Phase.OFF
        self.since = 0.0
        self.ready_at = math.inf
        self.slots = [0.0] * slots  # heap of slot free times
        self.inflight: list[tuple[float, int, int]] = []  # heap of (finish, tokens, request index)
        self.ctx_tokens = 0  # tokens of in-system requests (KV in use by running requests, roughly)
        self.cache: dict[int, None] = {}  # prefix blocks, LRU order
        self.cache_tokens = 0
        self.epoch = 0  # bumps at every start: a session's cache on an older epoch is gone
        self.on_since: float | None = None  # open node interval
        self.drain_deadline = math.inf
        self.draining_since = 0.0
        self.up: list[tuple[float, float]] = []  # closed (start, end) intervals of nodes being on
        self.state: GroupState | None = None  # the last GroupState handed to the controller

    def settle(self, now: float) -> None:
        """Forget requests that finished by ``now``."""
        inflight = self.inflight
        while inflight and inflight[0][0] <= now:
            self.ctx_tokens -= heapq.heappop(inflight)[1]


@dataclass
class SimResult:
    ttft_s: np.ndarray  # per request
    queue_s: np.ndarray
    cut: np.ndarray  # bool: cut by a drain timeout
    group_intervals: dict[str, list[tuple[float, float]]]  # nodes on (starting, ready, draining), clipped
    span_s: tuple[float, float]
    scale_ups: int  # groups started (returns from draining are not starts)
    scale_downs: int  # groups drained
    requests_cut_by_drain: int
    tick_t: np.ndarray
    tick_demand: np.ndarray  # running + queued over serving groups at each tick
    tick_ready: np.ndarray
    tick_starting: np.ndarray
    tick_draining: np.ndarray
    events: list[tuple[float, str, str]] = field(default_factory=list)  # (t, group, "start"|"ready"|"drain"|"stop"|"return")

    def node_hours(self, nodes_per_group: int) -> float:
        return nodes_per_group * sum(e - s for iv in self.group_intervals.values() for s, e in iv) / 3600.0


def simulate(
    trace: Trace,
    policy: Policy,
    controller: Controller,
    *,
    seed: int = 0,
    progress: Callable[[float], None] | None = None,
) -> SimResult:
    fleet_p, sim_p = policy.fleet, policy.simulation
    prefill, decode = sim_p.prefill_tokens_per_s, sim_p.decode_tokens_per_s
    slots_n = fleet_p.requests_per_group
    names = fleet_p.group_names()
    groups = [_Group(n, i, slots_n) for i, n in enumerate(names)]
    by_name = {g.name: g for g in groups}
    rng = np.random.default_rng(seed)
    STARTING, READY, DRAINING, OFF = Phase.STARTING, Phase.READY, Phase.DRAINING, Phase.OFF
    heappush, heappop, heapreplace = heapq.heappush, heapq.heappop, heapq.heapreplace

    t_arr = trace.t_s.tolist()
    inp = trace.input_tokens.tolist()
    # Per request, without a cache hit: the same IEEE operations as (inp - 0) / prefill and
    # out / decode on Python numbers (exact int -> float64 conversion), done once as arrays.
    pre_np, dec_np = trace.input_tokens / prefill, trace.output_tokens / decode
    pre_l, dec_l, svc_l = pre_np.tolist(), dec_np.tolist(), (pre_np + dec_np).tolist()
    tok_l = (trace.input_tokens + trace.output_tokens).tolist()
    n = len(t_arr)
    span0, span1 = trace.span_s
    t0 = span0

    blocks = trace.prefix_blocks
    sessions = trace.session.tolist() if blocks is None and bool((trace.session >= 0).any()) else None
    cache_cap_blocks = max(1, sim_p.kv_cache_tokens // BLOCK_TOKENS)
    cache_threshold = sim_p.cache_threshold
    balance = sim_p.balance_abs_threshold
    session_at: dict[int, tuple[int, int, int]] = {}  # session -> (group idx, epoch, tokens cached)

    ttft = np.zeros(n)
    qwait = np.zeros(n)
    cut = np.zeros(n, dtype=bool)
    ttft_l = [0.0] * n
    qwait_l = [0.0] * n

    # Every schedule starts with the ceiling ready.
    for g in groups[: fleet_p.ceiling_groups]:
        g.phase, g.since, g.on_since = READY, t0 - 86400.0, t0
    serving = [g for g in groups if g.phase is READY]
    events: list[tuple[float, str, str]] = []
    scale_ups = scale_downs = 0

    window = float(policy.signals.window_s)
    pct = policy.slo.ttft_percentile / 100.0
    first_tokens: list[tuple[float, float, float]] = []  # heap of (first token time, ttft, queue wait)
    # First tokens within the signal window, in time order, as three parallel columns.
    recent_t: deque[float] = deque()
    recent_ttft: deque[float] = deque()
    recent_wait: deque[float] = deque()
    # Their percentiles, recomputed only when a first token entered or left the window.
    ttft_p: float | None = None
    queue_p: float | None = None
    percentiles_valid = False

    period = controller.period_s
    uses_signals = getattr(controller, "uses_signals", True)
    track_latency = uses_signals and getattr(controller, "uses_latency_signals", True)
    next_tick = t0
    # The controller at tick T sees the fleet as Prometheus scraped it at T - scrape_interval_s:
    # one scrape per tick, taken that long before it (the first tick sees the fleet as it is).
    lag = sim_p.scrape_interval_s
    next_scrape = t0 + period - lag
    while next_scrape < t0:  # scrapes before the trace saw nothing: those ticks see the fleet as it is
        next_scrape += period
    scrapes: deque[SignalSnapshot] = deque()
    next_ready = math.inf
    tick_rows: list[tuple[float, float, int, int, int]] = []
    drain_policy = policy.drain
    cap = sim_p.kv_cache_tokens
    idle = GroupSignals(running=0.0, queued=0.0, kv_usage=min(1.0, 0 / cap))
    fleet_now: FleetState | None = None  # the last tick's, handed out again while no group changed

    def start_group(g: _Group, now: float) -> None:
        nonlocal scale_ups, next_ready
        if g.phase is DRAINING:  # back into service: cheapest capacity there is
            g.phase, g.drain_deadline = READY, math.inf
            serving.append(g)
            serving.sort(key=lambda x: x.idx)
            events.append((now, g.name, "return"))
            return
        if g.phase is not OFF:
            return
        jitter = sim_p.startup_jitter_s
        startup = sim_p.startup_s + (rng.uniform(-jitter, jitter) if jitter else 0.0)
        g.phase, g.since, g.ready_at = STARTING, now, now + startup
        g.epoch += 1
        g.cache, g.cache_tokens = {}, 0
        g.on_since = now
        g.slots = [0.0] * slots_n
        scale_ups += 1
        next_ready = min(next_ready, g.ready_at)
        events.append((now, g.name, "start"))

    def promote(now: float) -> None:
        nonlocal next_ready
        for g in groups:
            if g.phase is STARTING and g.ready_at <= now:
                g.phase, g.since = READY, g.ready_at
                serving.append(g)
                serving.sort(key=lambda x: x.idx)
                controller.on_ready(g.name, g.ready_at - g.on_since)  # type: ignore[operator]
                events.append((g.ready_at, g.name, "ready"))
        next_ready = min((g.ready_at for g in groups if g.phase is STARTING), default=math.inf)

    def stop(g: _Group, at: float) -> None:
        g.phase, g.since = OFF, at
        g.up.append((g.on_since, at))  # type: ignore[arg-type]
        g.on_since = None
        g.drain_deadline = math.inf
        events.append((at, g.name, "stop"))

    def snapshot(now: float) -> SignalSnapshot:
        nonlocal ttft_p, queue_p, percentiles_valid
        if first_tokens and first_tokens[0][0] <= now:
            while first_tokens and first_tokens[0][0] <= now:
                ft, tt, qq = heappop(first_tokens)
                recent_t.append(ft)
                recent_ttft.append(tt)
                recent_wait.append(qq)
            percentiles_valid = False
        oldest = now - window
        if recent_t and recent_t[0] <= oldest:
            while recent_t and recent_t[0] <= oldest:
                recent_t.popleft()
                recent_ttft.popleft()
                recent_wait.popleft()
            percentiles_valid = False
        per: dict[str, GroupSignals] = {}
        running_total = queued_total = 0.0
        for g in serving:
            inflight = g.inflight
            while inflight and inflight[0][0] <= now:
                g.ctx_tokens -= heappop(inflight)[1]
            k = len(inflight)
            tokens = g.cache_tokens + g.ctx_tokens
            if k == 0 and tokens == 0:
                per[g.name] = idle
                continue
            running = float(min(k, slots_n))
            queued = float(k - running)
            per[g.name] = GroupSignals(running=running, queued=queued, kv_usage=min(1.0, tokens / cap))
            running_total += running
            queued_total += queued
        if track_latency and not percentiles_valid:  # (without latency tracking they stay None)
            if recent_t:
                m = len(recent_ttft)
                k = min(m - 1, max(0, math.ceil(pct * m) - 1))
                ttft_p, queue_p = sorted(recent_ttft)[k], sorted(recent_wait)[k]
            else:  # no first token in the window: no percentile, not a zero
                ttft_p = queue_p = None
            percentiles_valid = True
        arrivals = bisect_left(t_arr, now) - bisect_left(t_arr, oldest)
        fleet = GroupSignals(running=running_total, queued=queued_total, request_rate=arrivals / window,
                             ttft_p99_s=ttft_p, queue_wait_p99_s=queue_p)
        return SignalSnapshot(now, per, fleet, ())

    def demand_only(now: float) -> float:
        """running + queued over the serving groups, as snapshot() adds them up, for the tick rows."""
        running_total = queued_total = 0.0
        for g in serving:
            inflight = g.inflight
            while inflight and inflight[0][0] <= now:
                g.ctx_tokens -= heappop(inflight)[1]
            k = len(inflight)
            running = float(min(k, slots_n))
            running_total += running
            queued_total += float(k - running)
        return running_total + queued_total

    def fleet_state() -> FleetState:
        # GroupState and FleetState are frozen: the same values may be handed out again.
        nonlocal fleet_now
        changed = fleet_now is None
        for g in groups:
            st = g.state
            if st is None or st.phase is not g.phase or st.since != g.since:
                g.state = GroupState(g.name, g.phase, g.since)
                changed = True
        if changed or fleet_now is None:
            fleet_now = FleetState({g.name: g.state for g in groups if g.state is not None})  # every one is set above
        return fleet_now

    def do_tick(now: float) -> None:
        nonlocal scale_downs
        if now >= next_ready:
            promote(now)
        seen = None
        if uses_signals:
            due = now - lag + 1e-9
            while len(scrapes) > 1 and scrapes[1].at <= due:
                scrapes.popleft()
            seen = scrapes[0] if scrapes and scrapes[0].at <= due else snapshot(now)
        demand = demand_only(now)
        starts, drains = controller.tick(now, seen, fleet_state())  # type: ignore[arg-type]
        for name in starts:
            start_group(by_name[name], now)
        for name in drains:
            g = by_name[name]
            if g.phase is READY:
                g.phase, g.since, g.draining_since = DRAINING, now, now
                g.drain_deadline = now + drain_policy.timeout_s
                serving.remove(g)
                scale_downs += 1
                events.append((now, g.name, "drain"))
        # Drains: stop when empty (after the controller had its chance to take the group back).
        starting = draining = 0
        for g in groups:
            if g.phase is not DRAINING:
                if g.phase is STARTING:
                    starting += 1
                continue
            deadline = g.drain_deadline
            # At the deadline, what has not finished by then is cut (or kept serving): settle only
            # up to the deadline, since the tick may come after it.
            g.settle(min(now, deadline))
            if not g.inflight:
                stop(g, now)
            elif now >= deadline:
                if drain_policy.on_timeout is OnDrainTimeout.STOP:
                    for _, _, idx in g.inflight:
                        cut[idx] = True
                    g.inflight, g.ctx_tokens = [], 0
                    stop(g, deadline)
                else:
                    g.phase, g.drain_deadline = READY, math.inf
                    serving.append(g)
                    serving.sort(key=lambda x: x.idx)
                    events.append((now, g.name, "return"))
            else:
                draining += 1
        tick_rows.append((now, demand, len(serving), starting, draining))

    report_every = max(1, n // 100)
    for i in range(n):
        a = t_arr[i]
        while a >= next_tick or (uses_signals and a >= next_scrape):
            if uses_signals and next_scrape < next_tick:  # at equal times the tick goes first
                scrapes.append(snapshot(next_scrape))
                next_scrape += period
            else:
                do_tick(next_tick)
                next_tick += period
        if a >= next_ready:
            promote(a)
        if progress is not None and i % report_every == 0:
            progress(i / n)

        cached = 0
        if not serving:  # no group serves (cannot happen with a floor >= 1 once ready): wait for the first
            waiting = [g for g in groups if g.phase is STARTING]
            chosen = min(waiting, key=lambda g: g.ready_at) if waiting else groups[0]
        else:
            # Forget finished requests and take the least-loaded group (the first of equals, as min()).
            least: _Group | None = None
            fewest = n + 1
            for g in serving:
                inflight = g.inflight
                while inflight and inflight[0][0] <= a:
                    g.ctx_tokens -= heappop(inflight)[1]
                if len(inflight) < fewest:
                    least, fewest = g, len(inflight)
            assert least is not None  # serving is not empty
            chosen = least
            if blocks is not None:
                req_blocks = blocks[i]
                best, best_match = None, 0
                for g in serving:
                    c = g.cache
                    m = 0
                    for b in req_blocks:
                        if b in c:
                            m += 1
                        else:
                            break
                    if m > best_match:
                        best, best_match = g, m
                if best is not None and best_match * BLOCK_TOKENS > cache_threshold * inp[i] \
                        and len(best.inflight) - fewest <= balance:
                    chosen = best
                c = chosen.cache
                for b in req_blocks:
                    if b in c:
                        cached += 1
                    else:
                        break
                cached = min(cached * BLOCK_TOKENS, inp[i])
            elif sessions is not None:
                s = sessions[i]
                if s >= 0:
                    prev = session_at.get(s)
                    if prev is not None:
                        g = groups[prev[0]]
                        if g.phase is READY and g.epoch == prev[1] and len(g.inflight) - fewest <= balance:
                            chosen, cached = g, min(prev[2], inp[i])

        if cached:
            pre = (inp[i] - cached) / prefill
            svc = pre + dec_l[i]
        else:
            pre = pre_l[i]
            svc = svc_l[i]
        slots = chosen.slots
        begin = slots[0]
        if begin <= a:
            begin = a
        if chosen.phase is STARTING and begin < chosen.ready_at:
            begin = chosen.ready_at
        finish = begin + svc
        heapreplace(slots, finish)
        tokens = tok_l[i]
        heappush(chosen.inflight, (finish, tokens, i))
        chosen.ctx_tokens += tokens
        wait = begin - a
        ttft_l[i] = wait + pre
        qwait_l[i] = wait
        if track_latency:
            heappush(first_tokens, (begin + pre, wait + pre, wait))

        # The group now holds this request's prefix.
        if blocks is not None:
            c = chosen.cache
            for b in blocks[i]:
                if b in c:
                    del c[b]
                c[b] = None
            while len(c) > cache_cap_blocks:
                del c[next(iter(c))]
            chosen.cache_tokens = len(c) * BLOCK_TOKENS
        elif sessions is not None and sessions[i] >= 0:
            session_at[sessions[i]] = (chosen.idx, chosen.epoch, tokens)

    while next_tick <= span1:
        if uses_signals and next_scrape < next_tick:
            scrapes.append(snapshot(next_scrape))
            next_scrape += period
        else:
            do_tick(next_tick)
            next_tick += period

    intervals: dict[str, list[tuple[float, float]]] = {}
    for g in groups:
        ups = list(g.up)
        if g.on_since is not None:
            ups.append((g.on_since, span1))
        clipped = [(max(s, span0), min(e, span1)) for s, e in ups]
        intervals[g.name] = [(s, e) for s, e in clipped if e > s]

    ttft[:] = ttft_l
    qwait[:] = qwait_l
    rows = np.array(tick_rows, dtype=float).reshape(-1, 5)
    return SimResult(
        ttft_s=ttft,
        queue_s=qwait,
        cut=cut,
        group_intervals=intervals,
        span_s=(span0, span1),
        scale_ups=scale_ups,
        scale_downs=scale_downs,
        requests_cut_by_drain=int(cut.sum()),
        tick_t=rows[:, 0],
        tick_demand=rows[:, 1],
        tick_ready=rows[:, 2].astype(int),
        tick_starting=rows[:, 3].astype(int),
        tick_draining=rows[:, 4].astype(int),
        events=events,
    )
