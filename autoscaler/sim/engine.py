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
- a started group serves after its start-up time; a controller that drains a group still starting
  stops it at once (a cancelled start: its nodes count up to then); a draining group takes no new requests and
  stops when its in-flight (running and queued) requests finish; at the drain timeout the policy's
  ``drain.on_timeout`` stops it (the unfinished requests are cut and count as SLO misses) or keeps it
  serving. A drained group loses its cache.
- controllers act every tick on signals one scrape old (running, queued, KV use, request rate and
  TTFT/queue-wait percentiles over ``signals.window_s``), as Prometheus would show them.

Shape: ``simulate`` builds a ``_Replay`` and runs it. ``_Replay.run`` walks the arrivals; before
each one the clock catches up (scrapes and controller ticks, ``_step_clock``), then the request is
routed (``_route``), placed in a slot (``_place``) and its prefix remembered (``_remember``). A tick
(``_tick``) shows the controller its delayed snapshot, applies its starts and drains, and settles
the drains. ``_Group.settle`` is the one place that forgets finished requests. Per group: a 6-entry
heap of slot free times and a heap of in-system finish times; no per-request objects.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from itertools import chain
from typing import Protocol

import numpy as np

from autoscaler.core.types import FleetState, GroupSignals, GroupState, Phase, SignalSnapshot
from autoscaler.policy.model import OnDrainTimeout, Policy
from autoscaler.sim.traces import Trace

BLOCK_TOKENS = 512  # Mooncake's hash_ids are 512-token blocks
_STARTING, _DRAINING = Phase.STARTING, Phase.DRAINING
_heappush, _heapreplace = heapq.heappush, heapq.heapreplace


# Every scrape builds a GroupSignals per serving group, one for the fleet and a SignalSnapshot
# (~320,000 values in a 14-day replay). A frozen dataclass's __init__ sets each field with
# object.__setattr__, which looks the field up by name each time; writing through the fields' slot
# descriptors builds the same value in about half the time (0.34 us against 0.64 for a
# GroupSignals). The unpacking below fails at import if either class gains or loses a field.
_new = object.__new__
_set_running, _set_queued, _set_kv, _set_rate, _set_ttft, _set_wait = (
    GroupSignals.__dict__[f.name].__set__ for f in fields(GroupSignals))
_set_at, _set_groups, _set_fleet, _set_problems, _set_over = (
    SignalSnapshot.__dict__[f.name].__set__ for f in fields(SignalSnapshot))


def _signals(running: float, queued: float, kv_usage: float | None = None, request_rate: float | None = None,
             ttft_p99_s: float | None = None, queue_wait_p99_s: float | None = None) -> GroupSignals:
    """The same value as ``GroupSignals(running, queued, kv_usage, ...)`` (see above)."""
    s = _new(GroupSignals)
    _set_running(s, running)
    _set_queued(s, queued)
    _set_kv(s, kv_usage)
    _set_rate(s, request_rate)
    _set_ttft(s, ttft_p99_s)
    _set_wait(s, queue_wait_p99_s)
    return s


def _snapshot_of(at: float, groups: Mapping[str, GroupSignals], fleet: GroupSignals,
                 problems: tuple = (), ttft_over_target: float | None = None) -> SignalSnapshot:
    """The same value as ``SignalSnapshot(at, groups, fleet, problems, ttft_over_target)`` (see above)."""
    s = _new(SignalSnapshot)
    _set_at(s, at)
    _set_groups(s, groups)
    _set_fleet(s, fleet)
    _set_problems(s, problems)
    _set_over(s, ttft_over_target)
    return s


class GroupLoads:
    """A scrape of the groups' load alone: what a controller with ``uses_fleet_signals = False``
    (HPA, the peers) is handed in place of a SignalSnapshot. Per group serving at the scrape, in
    the fleet's order: ``load``, its requests in the system (running + queued, a whole number), and
    ``tokens``, its KV tokens in use. ``groups`` and ``fleet`` are the SignalSnapshot's the same
    scrape gives without the fleet rate and percentiles (``_Replay._snapshot``), built the first
    time either is read: a 14-day KPA replay scrapes 604,800 times and reads them at its few
    thousand drains (the victim's KV use), so most scrapes build no GroupSignals."""

    __slots__ = ("at", "load", "tokens", "_model", "_full")
    problems: tuple = ()

    def __init__(self, at: float, load: dict[str, int], tokens: dict[str, int],
                 model: tuple[int, int, GroupSignals]):
        self.at, self.load, self.tokens = at, load, tokens
        self._model = model  # (slots per group, KV-cache tokens per group, the idle group's signals)
        self._full: SignalSnapshot | None = None

    @classmethod
    def _of(cls, at: float, load: dict[str, int], tokens: dict[str, int],
            model: tuple[int, int, GroupSignals]) -> GroupLoads:
        """The same as ``GroupLoads(...)``, through the slots (see ``_signals``): every scrape."""
        s = _new(cls)
        _set_gl_at(s, at)
        _set_gl_load(s, load)
        _set_gl_tokens(s, tokens)
        _set_gl_model(s, model)
        _set_gl_full(s, None)
        return s

    def snapshot(self) -> SignalSnapshot:
        """The SignalSnapshot of this scrape (the fleet's running and queued, per group also KV use)."""
        if self._full is None:
            slots_n, cap_tokens, idle = self._model
            per: dict[str, GroupSignals] = {}
            running_total = queued_total = 0.0
            tokens_of = self.tokens
            for name, k in self.load.items():
                tokens = tokens_of[name]
                if k == 0 and tokens == 0:
                    per[name] = idle
                    continue
                running = float(k if k < slots_n else slots_n)
                queued = k - running
                per[name] = _signals(running, queued, min(1.0, tokens / cap_tokens))
                running_total += running
                queued_total += queued
            self._full = _snapshot_of(self.at, per, _signals(running_total, queued_total))
        return self._full

    @property
    def groups(self) -> dict[str, GroupSignals]:
        return self.snapshot().groups  # type: ignore[return-value]

    @property
    def fleet(self) -> GroupSignals:
        return self.snapshot().fleet


_set_gl_at, _set_gl_load, _set_gl_tokens, _set_gl_model, _set_gl_full = (
    GroupLoads.__dict__[name].__set__ for name in GroupLoads.__slots__)


class Controller(Protocol):
    period_s: float
    # Optional: a controller with ``uses_signals = False`` (always-on, the oracle) is handed None for
    # the signals, and the replay skips building them; with ``uses_fleet_signals = False`` (HPA, the
    # peers) it is handed a ``GroupLoads`` (the groups' load; as a snapshot, no fleet request rate,
    # TTFT or queue-wait percentiles), and the replay skips counting arrivals and tracking first
    # tokens for them.

    def tick(self, now: float, signals: SignalSnapshot, fleet: FleetState) -> tuple[list[str], list[str]]:
        """-> (groups to start or return to service, groups to drain)."""

    def on_ready(self, name: str, startup_s: float) -> None:
        """A started group became ready after ``startup_s``."""


class _Group:
    __slots__ = (
        "name", "idx", "phase", "since", "ready_at", "slots", "inflight", "ctx_tokens", "cache",
        "cache_tokens", "epoch", "on_since", "drain_deadline", "up", "draining_since", "state", "lost",
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
        self.lost: dict[int, None] | None = None  # the prefix cache its last drain took out of service

    def settle(self, now: float) -> None:
        """Forget requests that finished by ``now`` (the one place that does)."""
        inflight = self.inflight
        if inflight and inflight[0][0] <= now:
            pop = heapq.heappop
            while inflight and inflight[0][0] <= now:
                self.ctx_tokens -= pop(inflight)[1]


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
    # (t, group, "start"|"ready"|"drain"|"cancel"|"stop"|"return"); a cancelled start is "cancel" then "stop"
    events: list[tuple[float, str, str]] = field(default_factory=list)
    # bool per request: a session-move miss (docs/interfaces.md): missed without queue wait, and would
    # have met the target with the prefix or session cache a drain took out of service
    moved: np.ndarray | None = None
    starts_cancelled: int = 0  # starting groups stopped before they served (not drains)

    def node_hours(self, nodes_per_group: int) -> float:
        return nodes_per_group * sum(e - s for iv in self.group_intervals.values() for s, e in iv) / 3600.0


@dataclass(frozen=True)
class RequestColumns:
    """A trace's per-request numbers as the replay reads them: Python lists (reading a list item is
    cheaper than a numpy element, 300,000 times a replay). They depend only on the trace and the
    policy's prefill and decode speeds, so the replays of one backtest share one copy."""

    t_s: list[float]
    input_tokens: list[int]
    prefill_s: list[float]  # without a cache hit
    decode_s: list[float]
    service_s: list[float]  # prefill + decode
    tokens: list[int]  # input + output
    sessions: list[int] | None  # session ids, for a trace with sessions and no prefix blocks
    speeds: tuple[float, float]  # (prefill, decode) tokens/s they were computed with


def request_columns(trace: Trace, policy: Policy) -> RequestColumns:
    sim_p = policy.simulation
    prefill, decode = sim_p.prefill_tokens_per_s, sim_p.decode_tokens_per_s
    # Per request, without a cache hit: the same IEEE operations as (inp - 0) / prefill and
    # out / decode on Python numbers (exact int -> float64 conversion), done once as arrays.
    pre_np, dec_np = trace.input_tokens / prefill, trace.output_tokens / decode
    sessions = (trace.session.tolist()
                if trace.prefix_blocks is None and bool((trace.session >= 0).any()) else None)
    return RequestColumns(trace.t_s.tolist(), trace.input_tokens.tolist(), pre_np.tolist(), dec_np.tolist(),
                          (pre_np + dec_np).tolist(), (trace.input_tokens + trace.output_tokens).tolist(), sessions,
                          (prefill, decode))


def simulate(
    trace: Trace,
    policy: Policy,
    controller: Controller,
    *,
    seed: int = 0,
    progress: Callable[[float], None] | None = None,
    columns: RequestColumns | None = None,
) -> SimResult:
    """Replay ``trace`` through the fleet model under ``controller``; see the module docstring.

    ``columns``: ``request_columns(trace, policy)``, when the caller replays the same trace and
    speeds several times (built here otherwise)."""
    return _Replay(trace, policy, controller, seed, columns).run(progress)


class _LatencyWindow:
    """First tokens within the signal window, and their percentiles (TTFT and queue wait).

    First tokens are pushed as requests are placed (their time is known then) and enter the window
    when the clock passes them; the percentiles are recomputed only when the window changed."""

    def __init__(self, window_s: float, quantile: float, target_s: float = math.inf):
        self.window_s, self.quantile, self.target_s = window_s, quantile, target_s
        self.over = 0  # first tokens in the window whose TTFT exceeded the target
        self.pending: list[tuple[float, float, float]] = []  # heap of (first token time, ttft, queue wait)
        self.t: deque[float] = deque()  # the window, in time order, as three parallel columns
        self.ttft: deque[float] = deque()
        self.wait: deque[float] = deque()
        self.ttft_p: float | None = None
        self.wait_p: float | None = None
        self.valid = False

    def advance(self, now: float) -> None:
        pending = self.pending
        if pending and pending[0][0] <= now:
            while pending and pending[0][0] <= now:
                ft, tt, qq = heapq.heappop(pending)
                self.t.append(ft)
                self.ttft.append(tt)
                self.wait.append(qq)
                if tt > self.target_s:
                    self.over += 1
            self.valid = False
        oldest = now - self.window_s
        if self.t and self.t[0] <= oldest:
            while self.t and self.t[0] <= oldest:
                self.t.popleft()
                if self.ttft.popleft() > self.target_s:
                    self.over -= 1
                self.wait.popleft()
            self.valid = False

    def percentiles(self) -> tuple[float | None, float | None]:
        if not self.valid:
            if self.t:
                m = len(self.ttft)
                k = math.ceil(self.quantile * m) - 1  # within 0 .. m - 1 (two ifs: every scrape)
                if k < 0:
                    k = 0
                if k > m - 1:
                    k = m - 1
                if k == m - 1:  # the highest (p99 of fewer than 100 first tokens): no sort needed
                    self.ttft_p, self.wait_p = max(self.ttft), max(self.wait)
                else:
                    self.ttft_p, self.wait_p = sorted(self.ttft)[k], sorted(self.wait)[k]
            else:  # no first token in the window: no percentile, not a zero
                self.ttft_p = self.wait_p = None
            self.valid = True
        return self.ttft_p, self.wait_p


class _Replay:
    """One replay: the fleet's groups, the clock of ticks and scrapes, and the per-request results.

    ``run`` walks the arrivals in order. Before each arrival the clock catches up (``_catch_up``:
    scrapes and controller ticks that are due, in time order); then the request is routed
    (``_route``), placed in its group's earliest free slot (``_place``) and its prefix remembered
    (``_remember``). After the last arrival the ticks run to the end of the span.
    """

    def __init__(self, trace: Trace, policy: Policy, controller: Controller, seed: int,
                 columns: RequestColumns | None = None):
        self.policy, self.controller = policy, controller
        fleet_p, sim_p = policy.fleet, policy.simulation
        self.sim_p = sim_p
        self.prefill, self.decode = sim_p.prefill_tokens_per_s, sim_p.decode_tokens_per_s
        self.slots_n = fleet_p.requests_per_group
        self.groups = [_Group(n, i, self.slots_n) for i, n in enumerate(fleet_p.group_names())]
        self.by_name = {g.name: g for g in self.groups}
        self.rng = np.random.default_rng(seed)

        if columns is None:
            columns = request_columns(trace, policy)
        elif columns.speeds != (self.prefill, self.decode) or len(columns.t_s) != len(trace):
            raise ValueError("simulate: columns were built for another trace or other speeds")
        self.t_arr, self.inp = columns.t_s, columns.input_tokens
        self.pre_l, self.dec_l, self.svc_l = columns.prefill_s, columns.decode_s, columns.service_s
        self.tok_l = columns.tokens
        self.n = len(self.t_arr)
        self.span0, self.span1 = trace.span_s

        self.blocks = trace.prefix_blocks
        self.sessions = columns.sessions
        self.cache_cap_blocks = max(1, sim_p.kv_cache_tokens // BLOCK_TOKENS)
        self.session_at: dict[int, tuple[int, int, int]] = {}  # session -> (group idx, epoch, tokens cached)
        self.balance, self.cache_threshold = sim_p.balance_abs_threshold, sim_p.cache_threshold
        self.by_load_alone = self.blocks is None and self.sessions is None  # (ServeGen): no prefix to route by

        self.ttft_l = [0.0] * self.n
        self.qwait_l = [0.0] * self.n
        self.cut = np.zeros(self.n, dtype=bool)
        self.moved = np.zeros(self.n, dtype=bool)
        self.slo_target = policy.slo.ttft_target_s

        # Every schedule starts with the ceiling ready.
        for g in self.groups[: fleet_p.ceiling_groups]:
            g.phase, g.since, g.on_since = Phase.READY, self.span0 - 86400.0, self.span0
        self.serving = [g for g in self.groups if g.phase is Phase.READY]
        self.events: list[tuple[float, str, str]] = []
        self.scale_ups = self.scale_downs = 0
        self.starts_cancelled = 0  # starts stopped before the group served (``_cancel_start``)

        self.uses_signals = getattr(controller, "uses_signals", True)
        self.track_latency = self.uses_signals and getattr(controller, "uses_fleet_signals", True)
        self.latency = _LatencyWindow(float(policy.signals.window_s), policy.slo.ttft_percentile / 100.0,
                                      policy.slo.ttft_target_s)

        self.period = controller.period_s
        self.next_tick = self.span0
        # The controller at tick T sees the fleet as Prometheus scraped it at T - scrape_interval_s:
        # one scrape per tick, taken that long before it (the first tick sees the fleet as it is). A
        # controller that scrapes the groups itself says how old its data is (``scrape_lag_s``: Knative's
        # KPA, 1 s).
        self.lag = getattr(controller, "scrape_lag_s", sim_p.scrape_interval_s)
        self.next_scrape = self.span0 + self.period - self.lag
        while self.next_scrape < self.span0:  # scrapes before the trace saw nothing: those ticks see the fleet as it is
            self.next_scrape += self.period
        if not self.uses_signals:
            self.next_scrape = math.inf  # no scrapes for a controller that reads no signals
        self.scrapes: deque[SignalSnapshot | GroupLoads] = deque()
        self.next_ready = math.inf
        self.tick_rows: list[tuple[float, float, int, int, int]] = []
        self.cap_tokens = sim_p.kv_cache_tokens
        self.idle = GroupSignals(running=0.0, queued=0.0, kv_usage=0.0)
        self.loads_model = (self.slots_n, self.cap_tokens, self.idle)
        # ``version`` counts the changes of any group's phase or since (every assignment of them
        # below bumps it); the fleet state and the tick rows' counts are recomputed only when it moved.
        self.version = 0
        self.fleet_now: FleetState | None = None  # the last tick's, handed out again while no group changed
        self.fleet_version = -1
        self.counts_version = -1
        self.starting_n = 0  # starting groups, and whether any group drains, at ``counts_version``
        self.any_draining = False

    # ------------------------------------------------------------------------------ the run
    def run(self, progress: Callable[[float], None] | None) -> SimResult:
        n = self.n
        t_arr = self.t_arr
        report_every = max(1, n // 100)
        route, place, remember = self._route, self._place, self._remember  # bound once: 300,000 calls
        remembers = self.blocks is not None or self.sessions is not None  # a trace with prefixes or sessions
        due = min(self.next_tick, self.next_scrape, self.next_ready)  # the clock's next event
        for i in range(n):
            a = t_arr[i]
            if a >= due:  # (only the clock and the groups' start-ups move these, never a request)
                if a >= self.next_tick or a >= self.next_scrape:
                    self._catch_up(a)
                if a >= self.next_ready:
                    self._promote(a)
                due = min(self.next_tick, self.next_scrape, self.next_ready)
            if progress is not None and i % report_every == 0:
                progress(i / n)
            group, cached = route(i, a)
            place(i, a, group, cached)
            if remembers:
                remember(i, group)
        while self.next_tick <= self.span1:
            self._step_clock()
        return self._result()

    def _catch_up(self, a: float) -> None:
        """Run the scrapes and ticks due before an arrival at ``a``: ``_step_clock`` until neither is
        due, written out (a 14-day KPA replay takes 600,000 steps). Without signals the next
        scrape is at infinity, so a scrape is due only when it comes before the next tick."""
        period, tick, scrapes = self.period, self._tick, self.scrapes
        scrape = self._snapshot if self.track_latency else self._group_loads  # (see _scrape)
        while True:
            next_scrape, next_tick = self.next_scrape, self.next_tick
            if next_scrape < next_tick:  # (then a >= next_tick implies a >= next_scrape)
                if a < next_scrape:
                    return
                scrapes.append(scrape(next_scrape))
                self.next_scrape = next_scrape + period
            else:
                if a < next_tick:
                    return
                tick(next_tick)
                self.next_tick = next_tick + period

    def _step_clock(self) -> None:
        """The next scrape or tick, whichever comes first (at equal times the tick goes first)."""
        if self.uses_signals and self.next_scrape < self.next_tick:
            self.scrapes.append(self._scrape(self.next_scrape))
            self.next_scrape += self.period
        else:
            self._tick(self.next_tick)
            self.next_tick += self.period

    # -------------------------------------------------------------------- one request
    def _route(self, i: int, a: float) -> tuple[_Group, int]:
        """The group a request at ``a`` goes to, and how many of its input tokens are cached there.

        The least-loaded serving group (the first of equals), unless the request's prefix (Mooncake
        blocks) or session (CSV session ids) is cached on a serving group that is not more than
        ``balance_abs_threshold`` busier."""
        serving = self.serving
        if not serving:  # no group serves (cannot happen with a floor >= 1 once ready): wait for the first
            waiting = [g for g in self.groups if g.phase is Phase.STARTING]
            return (min(waiting, key=lambda g: g.ready_at) if waiting else self.groups[0]), 0
        least, fewest = None, self.n + 1
        for g in serving:
            inflight = g.inflight
            if inflight and inflight[0][0] <= a:  # (most arrivals find nothing finished: no call)
                g.settle(a)
            k = len(inflight)
            if k < fewest:
                least, fewest = g, k
        if self.by_load_alone:  # (the least loaded, nothing cached: the rest would find no prefix)
            return least, 0  # type: ignore[return-value]
        chosen: _Group = least  # type: ignore[assignment]
        cached = 0
        balance = self.balance
        if self.blocks is not None:
            req_blocks = self.blocks[i]
            best, best_match = None, 0
            for g in serving:
                m = _prefix_match(g.cache, req_blocks)
                if m > best_match:
                    best, best_match = g, m
            if best is not None and best_match * BLOCK_TOKENS > self.cache_threshold * self.inp[i] \
                    and len(best.inflight) - fewest <= balance:
                chosen = best
            cached = min(_prefix_match(chosen.cache, req_blocks) * BLOCK_TOKENS, self.inp[i])
        elif self.sessions is not None:
            s = self.sessions[i]
            if s >= 0:
                prev = self.session_at.get(s)
                if prev is not None:
                    g = self.groups[prev[0]]
                    if g.phase is Phase.READY and g.epoch == prev[1] and len(g.inflight) - fewest <= balance:
                        chosen, cached = g, min(prev[2], self.inp[i])
        return chosen, cached

    def _place(self, i: int, a: float, g: _Group, cached: int) -> None:
        """Hold the group's earliest free slot from the start of prefill to the last token."""
        if cached:
            pre = (self.inp[i] - cached) / self.prefill
            svc = pre + self.dec_l[i]
        else:
            pre = self.pre_l[i]
            svc = self.svc_l[i]
        slots = g.slots
        begin = slots[0]
        if begin <= a:
            begin = a
        if g.phase is _STARTING and begin < g.ready_at:
            begin = g.ready_at
        finish = begin + svc
        _heapreplace(slots, finish)
        tokens = self.tok_l[i]
        _heappush(g.inflight, (finish, tokens, i))
        g.ctx_tokens += tokens
        wait = begin - a
        self.ttft_l[i] = wait + pre
        self.qwait_l[i] = wait
        if pre > self.slo_target and not self.by_load_alone:  # a miss without its queue wait: a moved session?
            kept = self._lost_cached(i)
            if kept > cached and (self.inp[i] - kept) / self.prefill <= self.slo_target:
                self.moved[i] = True
        if self.track_latency:
            _heappush(self.latency.pending, (begin + pre, wait + pre, wait))

    def _lost_cached(self, i: int) -> int:
        """How many of request ``i``'s input tokens a drain took out of service: its prefix blocks
        in the cache a drained group held at its drain (most matched), or its session's tokens on a
        group that was drained since (not ready, or restarted: a newer epoch)."""
        if self.blocks is not None:
            req_blocks = self.blocks[i]
            best = 0
            for g in self.groups:
                if g.lost is not None:
                    best = max(best, _prefix_match(g.lost, req_blocks))
            return min(best * BLOCK_TOKENS, self.inp[i])
        if self.sessions is not None and self.sessions[i] >= 0:
            prev = self.session_at.get(self.sessions[i])
            if prev is not None:
                g = self.groups[prev[0]]
                if g.phase is not Phase.READY or g.epoch != prev[1]:
                    return min(prev[2], self.inp[i])
        return 0

    def _remember(self, i: int, g: _Group) -> None:
        """The group now holds this request's prefix (LRU blocks) or its session's tokens."""
        if self.blocks is not None:
            c = g.cache
            for b in self.blocks[i]:
                if b in c:
                    del c[b]
                c[b] = None
            while len(c) > self.cache_cap_blocks:
                del c[next(iter(c))]
            g.cache_tokens = len(c) * BLOCK_TOKENS
        elif self.sessions is not None and self.sessions[i] >= 0:
            self.session_at[self.sessions[i]] = (g.idx, g.epoch, self.tok_l[i])

    # ----------------------------------------------------------------------- the groups
    def _start_group(self, g: _Group, now: float) -> None:
        if g.phase is Phase.DRAINING:  # back into service: cheapest capacity there is
            self._return_to_service(g, now)
            return
        if g.phase is not Phase.OFF:
            return
        jitter = self.sim_p.startup_jitter_s
        startup = self.sim_p.startup_s + (self.rng.uniform(-jitter, jitter) if jitter else 0.0)
        g.phase, g.since, g.ready_at = Phase.STARTING, now, now + startup
        self.version += 1
        g.epoch += 1
        g.cache, g.cache_tokens = {}, 0
        g.on_since = now
        g.slots = [0.0] * self.slots_n
        self.scale_ups += 1
        self.next_ready = min(self.next_ready, g.ready_at)
        self.events.append((now, g.name, "start"))

    def _return_to_service(self, g: _Group, now: float) -> None:
        g.phase, g.drain_deadline = Phase.READY, math.inf
        g.lost = None  # its cache is back in service
        self.version += 1
        self.serving.append(g)
        self.serving.sort(key=lambda x: x.idx)
        self.events.append((now, g.name, "return"))

    def _promote(self, now: float) -> None:
        """Starting groups whose start-up has passed become ready (at their ready time)."""
        for g in self.groups:
            if g.phase is Phase.STARTING and g.ready_at <= now:
                g.phase, g.since = Phase.READY, g.ready_at
                self.version += 1
                self.serving.append(g)
                self.serving.sort(key=lambda x: x.idx)
                self.controller.on_ready(g.name, g.ready_at - g.on_since)  # type: ignore[operator]
                self.events.append((g.ready_at, g.name, "ready"))
        self.next_ready = min((g.ready_at for g in self.groups if g.phase is Phase.STARTING), default=math.inf)

    def _drain(self, g: _Group, now: float) -> None:
        """Take a ready group out of routing; a group still starting is stopped at once instead (a
        cancelled start, as a ReplicaSet deletes a not-yet-ready pod first): its nodes count up to now."""
        if g.phase is _STARTING:
            self._cancel_start(g, now)
            return
        if g.phase is not Phase.READY:
            return
        g.phase, g.since, g.draining_since = Phase.DRAINING, now, now
        g.lost = g.cache  # (a start gives the group a new cache dict: this one is no longer written)
        self.version += 1
        g.drain_deadline = now + self.policy.drain.timeout_s
        self.serving.remove(g)
        self.scale_downs += 1
        self.events.append((now, g.name, "drain"))

    def _cancel_start(self, g: _Group, now: float) -> None:
        """Stop a starting group before it serves. One that already holds requests (routed to it while
        no group served) keeps starting: stopping it would cut them."""
        if g.inflight:
            return
        g.ready_at = math.inf
        self.starts_cancelled += 1
        self.events.append((now, g.name, "cancel"))
        self._stop(g, now)
        self.next_ready = min((x.ready_at for x in self.groups if x.phase is _STARTING), default=math.inf)

    def _stop(self, g: _Group, at: float) -> None:
        g.phase, g.since = Phase.OFF, at
        self.version += 1
        g.up.append((g.on_since, at))  # type: ignore[arg-type]
        g.on_since = None
        g.drain_deadline = math.inf
        self.events.append((at, g.name, "stop"))

    def _settle_drains(self, now: float) -> tuple[int, int]:
        """Stop the draining groups that emptied; at a drain's deadline, cut what is left (or keep
        the group serving, per ``drain.on_timeout``). -> (starting, still draining) counts."""
        if self.counts_version != self.version:  # (most ticks: no group changed since the last count)
            self.counts_version = self.version
            self.starting_n = sum(g.phase is _STARTING for g in self.groups)
            self.any_draining = any(g.phase is _DRAINING for g in self.groups)
        if not self.any_draining:
            return self.starting_n, 0
        starting = draining = 0
        for g in self.groups:
            if g.phase is not _DRAINING:
                if g.phase is _STARTING:
                    starting += 1
                continue
            deadline = g.drain_deadline
            # At the deadline, what has not finished by then is cut (or kept serving): settle only
            # up to the deadline, since the tick may come after it.
            g.settle(min(now, deadline))
            if not g.inflight:
                self._stop(g, now)
            elif now >= deadline:
                if self.policy.drain.on_timeout is OnDrainTimeout.STOP:
                    for _, _, idx in g.inflight:
                        self.cut[idx] = True
                    g.inflight, g.ctx_tokens = [], 0
                    self._stop(g, deadline)
                else:
                    self._return_to_service(g, now)
            else:
                draining += 1
        return starting, draining

    # ---------------------------------------------------------------- ticks and signals
    def _tick(self, now: float) -> None:
        if now >= self.next_ready:
            self._promote(now)
        seen = None
        if self.uses_signals:
            due = now - self.lag + 1e-9
            scrapes = self.scrapes
            while len(scrapes) > 1 and scrapes[1].at <= due:
                scrapes.popleft()
            seen = scrapes[0] if scrapes and scrapes[0].at <= due else self._scrape(now)
        # The tick row's demand: running + queued over the serving groups, i.e. the requests in
        # them (the sums of whole numbers the snapshot adds up are exact: the same float).
        demand = 0
        for g in self.serving:
            inflight = g.inflight
            if inflight and inflight[0][0] <= now:
                g.settle(now)
            demand += len(inflight)
        fleet = self.fleet_now if self.fleet_version == self.version else self._fleet_state()
        starts, drains = self.controller.tick(now, seen, fleet)  # type: ignore[arg-type]
        for name in starts:
            self._start_group(self.by_name[name], now)
        for name in drains:
            self._drain(self.by_name[name], now)
        # Drains stop when empty, after the controller had its chance to take the group back.
        if self.counts_version == self.version and not self.any_draining:  # (_settle_drains' first step)
            starting, draining = self.starting_n, 0
        else:
            starting, draining = self._settle_drains(now)
        self.tick_rows.append((now, float(demand), len(self.serving), starting, draining))

    # A group's load at ``now`` (``_tick``, ``_snapshot`` and ``_group_loads``, written out in each:
    # they run at every tick and scrape): settle it, then running = min(in system, slots), queued =
    # the rest.

    def _snapshot(self, now: float) -> SignalSnapshot:
        latency = self.latency
        latency.advance(now)
        per: dict[str, GroupSignals] = {}
        running_total = queued_total = 0.0
        slots_n, cap_tokens = self.slots_n, self.cap_tokens
        for g in self.serving:
            inflight = g.inflight
            if inflight and inflight[0][0] <= now:
                g.settle(now)
            k = len(inflight)
            tokens = g.cache_tokens + g.ctx_tokens
            if k == 0 and tokens == 0:
                per[g.name] = self.idle
                continue
            running = float(k if k < slots_n else slots_n)
            queued = k - running
            kv = tokens / cap_tokens  # (min(1.0, kv), written out as min keeps them: every group of every scrape)
            per[g.name] = _signals(running, queued, kv if kv < 1.0 else 1.0)
            running_total += running
            queued_total += queued
        ttft_p, queue_p = latency.percentiles()
        arrivals = bisect_left(self.t_arr, now) - bisect_left(self.t_arr, now - latency.window_s)
        fleet = _signals(running_total, queued_total, request_rate=arrivals / latency.window_s, ttft_p99_s=ttft_p,
                         queue_wait_p99_s=queue_p)
        window = len(latency.t)
        return _snapshot_of(now, per, fleet, (), latency.over / window if window else None)

    def _scrape(self, now: float) -> SignalSnapshot | GroupLoads:
        """A controller that reads only the groups' load is handed GroupLoads (see there). (Chosen
        at each call: a bound method kept on the replay would make it a reference cycle, and its
        memory would wait for the cyclic collector: 170 MB more at the peak of a 14-day compare.)"""
        return self._snapshot(now) if self.track_latency else self._group_loads(now)

    def _group_loads(self, now: float) -> GroupLoads:
        """The scrape of a controller that reads only the groups' load: ``_snapshot``'s per-group
        numbers, not yet made into GroupSignals (GroupLoads builds them if they are read)."""
        load: dict[str, int] = {}
        tokens: dict[str, int] = {}
        for g in self.serving:
            inflight = g.inflight
            if inflight and inflight[0][0] <= now:
                g.settle(now)
            name = g.name
            load[name] = len(inflight)
            tokens[name] = g.cache_tokens + g.ctx_tokens
        return GroupLoads._of(now, load, tokens, self.loads_model)

    def _fleet_state(self) -> FleetState:
        # GroupState and FleetState are frozen: the same values may be handed out again. No group's
        # phase or since changed while the version stands still: the last one is handed out again.
        if self.fleet_version == self.version:
            return self.fleet_now  # type: ignore[return-value]
        self.fleet_version = self.version
        changed = self.fleet_now is None
        for g in self.groups:
            st = g.state
            if st is None or st.phase is not g.phase or st.since != g.since:
                g.state = GroupState(g.name, g.phase, g.since)
                changed = True
        if changed:
            self.fleet_now = FleetState({g.name: g.state for g in self.groups if g.state is not None})
        assert self.fleet_now is not None
        return self.fleet_now

    # -------------------------------------------------------------------------- results
    def _result(self) -> SimResult:
        intervals: dict[str, list[tuple[float, float]]] = {}
        for g in self.groups:
            ups = list(g.up)
            if g.on_since is not None:
                ups.append((g.on_since, self.span1))
            clipped = [(max(s, self.span0), min(e, self.span1)) for s, e in ups]
            intervals[g.name] = [(s, e) for s, e in clipped if e > s]
        # (The same array as np.array(self.tick_rows, dtype=float), built in half the time: 600,000
        # rows in a 14-day KPA replay.)
        rows = np.fromiter(chain.from_iterable(self.tick_rows), dtype=float, count=5 * len(self.tick_rows)).reshape(-1, 5)
        return SimResult(
            ttft_s=np.array(self.ttft_l, dtype=float),
            queue_s=np.array(self.qwait_l, dtype=float),
            cut=self.cut,
            moved=self.moved,
            group_intervals=intervals,
            span_s=(self.span0, self.span1),
            scale_ups=self.scale_ups,
            scale_downs=self.scale_downs,
            requests_cut_by_drain=int(self.cut.sum()),
            tick_t=rows[:, 0],
            tick_demand=rows[:, 1],
            tick_ready=rows[:, 2].astype(int),
            tick_starting=rows[:, 3].astype(int),
            tick_draining=rows[:, 4].astype(int),
            events=self.events,
            starts_cancelled=self.starts_cancelled,
        )


def _prefix_match(cache: dict[int, None], blocks) -> int:
    """How many of a request's leading prefix blocks the cache holds."""
    m = 0
    for b in blocks:
        if b in cache:
            m += 1
        else:
            break
    return m
