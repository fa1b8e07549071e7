"""Controllers the backtest replays: ours (the real core), always-on, Kubernetes HPA, the oracle."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import replace
from operator import itemgetter

import numpy as np

from autoscaler.core import Action, Decision, Memory, decide, record_startup
from autoscaler.core.types import FleetState, GroupSignals, Phase, Reason, SignalSnapshot
from autoscaler.core.victim import groups_to_start
from autoscaler.policy.model import Policy
from autoscaler.sim.engine import GroupLoads, _snapshot_of
from autoscaler.sim.loadscale import service_times_s
from autoscaler.sim.peers import FleetReading, drain_victims, fleet_load, starts_to_cancel
from autoscaler.sim.traces import Trace

# Enum members read at every tick, looked up once (an Enum class attribute costs ~60 ns a read).
_HOLD, _SCALE_UP, _SCALE_DOWN = Action.HOLD, Action.SCALE_UP, Action.SCALE_DOWN
_READY, _STARTING = Phase.READY, Phase.STARTING


class CoreController:
    """The live service's decision core, on virtual time.

    The replay's times are seconds since the trace's start; the core is handed UTC epoch seconds
    (``epoch_s``, the trace's ``start_epoch_s``, plus the replay's time), as the live service hands
    it the clock: schedule windows, freezes and pins fall on the trace's own dates and times of
    day, and its minutes and 5-minute slots on the clock's. Decisions are kept on the replay's time.
    """

    def __init__(self, policy: Policy, keep_decisions: bool = False, epoch_s: float = 0.0):
        self.policy = policy
        self.period_s = policy.scaling.tick_interval_s
        self.memory = Memory()
        self.keep = keep_decisions
        self.epoch_s = epoch_s
        self.decisions: list[tuple[float, Decision]] = []
        self.counts: dict[str, int] = {}
        self._keys: dict[tuple[Action, Reason], str] = {}  # (action, reason) -> "action:reason"
        self._fleet_in: FleetState | None = None  # the replay hands the same fleet out while no group changed
        self._fleet_out: FleetState | None = None

    def _on_clock(self, signals: SignalSnapshot, fleet: FleetState) -> tuple[SignalSnapshot, FleetState]:
        """The replay's signals and fleet with their times on the UTC clock."""
        epoch = self.epoch_s
        if fleet is not self._fleet_in:
            self._fleet_in = fleet
            self._fleet_out = FleetState({name: replace(g, since=g.since + epoch) for name, g in fleet.groups.items()},
                                         fleet.synced)
        assert self._fleet_out is not None
        # (= replace(signals, at=...), through the slots: every tick)
        return (_snapshot_of(signals.at + epoch, signals.groups, signals.fleet, signals.problems,
                             signals.ttft_over_target), self._fleet_out)

    def tick(self, now: float, signals: SignalSnapshot, fleet: FleetState):
        epoch = self.epoch_s
        if epoch:  # (_on_clock, written out: every tick)
            if fleet is not self._fleet_in:
                signals, fleet = self._on_clock(signals, fleet)
            else:
                signals = _snapshot_of(signals.at + epoch, signals.groups, signals.fleet, signals.problems,
                                       signals.ttft_over_target)
                fleet = self._fleet_out  # type: ignore[assignment]
        decision, self.memory = decide(signals, fleet, self.policy, self.memory, now + epoch, explain=self.keep)
        pair = (decision.action, decision.reason)
        key = self._keys.get(pair)
        if key is None:
            key = self._keys[pair] = f"{decision.action}:{decision.reason}"
        self.counts[key] = self.counts.get(key, 0) + 1
        action = decision.action
        if self.keep or action is not _HOLD:
            self.decisions.append((now, decision))
        if action is _SCALE_UP:
            return list(decision.groups), []
        if action is _SCALE_DOWN:
            return [], list(decision.groups)
        return [], []

    def on_ready(self, name: str, startup_s: float) -> None:
        self.memory = record_startup(self.memory, startup_s)


class StaticController:
    """The ceiling, always on."""

    uses_signals = False  # the engine hands it None and skips building signals

    def __init__(self, policy: Policy):
        self.period_s = 60.0

    def tick(self, now, signals, fleet):
        return [], []

    def on_ready(self, name, startup_s):
        pass


_DESIRED = itemgetter(1)  # (time, desired) -> desired


def hpa_plain_metric_replicas(current: int, ready: int, total: float, missing: int, target: float,
                              tolerance: float = 0.1) -> int:
    """Kubernetes' ``calcPlainMetricReplicas`` (``pkg/controller/podautoscaler/replica_calculator.go``)
    for a pods metric: ``ready`` pods reported ``total`` (their mean against ``target`` is the usage
    ratio); ``missing`` pods reported nothing (a group still starting). Without missing pods:
    ceil(ratio x ready), or ``current`` within the tolerance. With them, the ratio is taken again
    with the missing pods at the target (on a scale-down) or at 0 (on a scale-up), over ready +
    missing pods; a change of direction or one within the tolerance keeps ``current``. (A pods
    metric has no "unready" pods: those are a CPU rule.) E.g. 2 ready at 6 and 1 starting, target
    4.2: ratio 1.43 -> (12 + 0) / 3 / 4.2 = 0.95: within the tolerance -> 3, where current x ratio asks 5."""
    ratio = total / ready / target
    if missing == 0:
        if abs(ratio - 1.0) <= tolerance:
            return current
        return math.ceil(ratio * ready)
    counted = ready + missing
    new_total = total + (missing * target if ratio < 1.0 else 0.0)
    new_ratio = new_total / counted / target
    if abs(new_ratio - 1.0) <= tolerance or (ratio > 1.0 > new_ratio) or (ratio < 1.0 < new_ratio):
        return current
    replicas = math.ceil(new_ratio * counted)
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        return current
    return replicas


class HpaController:
    """Kubernetes HPA v2's algorithm with its defaults, on the same delayed signals.

    Every 15 s: metric = (running + queued over ready groups) / ready groups; current = ready +
    starting; desired = ceil(current x metric / (target x requests per group)), unchanged when
    |metric / (target x requests per group) - 1| <= 0.1; a scale-down applies the highest desired
    of the last 300 s (the window starts filled with the initial count); within floor and ceiling.
    A scale-down stops groups still starting first (a ReplicaSet deletes a not-ready pod first),
    then drains the least-loaded ready group the way ours does (core.victim).

    That is docs/interfaces.md's "HPA reference". ``kubernetes=True`` sizes as Kubernetes does
    (``hpa_plain_metric_replicas``: the starting groups as pods with missing metrics), which
    differs while a group starts: docs/peers.md has both, measured.
    """

    CANCEL_STARTS = True  # False only to measure what the missing cancel cost (bench/peers_cancel.py)

    uses_fleet_signals = False  # reads the groups' load only: the engine skips the request rate and percentiles

    SYNC_S = 15.0
    STABILIZATION_S = 300.0
    TOLERANCE = 0.1

    def __init__(self, policy: Policy, target_utilization: float, start: float, kubernetes: bool = False):
        self.policy = policy
        self.kubernetes = kubernetes
        self.target = target_utilization
        self.period_s = self.SYNC_S
        self.history: deque[tuple[float, int]] = deque([(start, policy.fleet.ceiling_groups)])
        self.order = {n: i for i, n in enumerate(policy.fleet.group_names())}
        self.at_target = target_utilization * policy.fleet.requests_per_group  # requests per group at the target
        self.floor, self.ceiling = policy.fleet.floor_groups, policy.fleet.ceiling_groups
        self.reading = FleetReading()

    def tick(self, now: float, signals: SignalSnapshot | GroupLoads, fleet: FleetState):
        seen = fleet_load(signals, fleet, self.reading)  # the ready groups, the starting count, their load; None: hold
        if seen is None:
            return [], []
        ready, starting, total = seen
        current = len(ready) + starting
        if self.kubernetes:
            desired = hpa_plain_metric_replicas(current, len(ready), total, starting, self.at_target, self.TOLERANCE)
        else:
            ratio = total / len(ready) / self.at_target
            desired = current if abs(ratio - 1.0) <= self.TOLERANCE else math.ceil(current * ratio)
        desired = min(max(desired, self.floor), self.ceiling)
        self.history.append((now, desired))
        while len(self.history) > 1 and self.history[0][0] <= now - self.STABILIZATION_S:
            self.history.popleft()
        if desired > current:
            return groups_to_start(fleet, desired - current), []
        # The highest desired of the window is at least this tick's: no scale-down unless it is below
        # the current count (most ticks it is not, and the window need not be read).
        if desired < current and (stabilized := max(self.history, key=_DESIRED)[1]) < current:
            cancel = starts_to_cancel(fleet, current - stabilized) if self.CANCEL_STARTS else []
            return [], cancel + drain_victims(ready, self.order, signals, current - stabilized - len(cancel))
        return [], []

    def on_ready(self, name, startup_s):
        pass


def oracle_schedule(trace: Trace, policy: Policy) -> tuple[np.ndarray, np.ndarray]:
    """Per-minute demand and groups needed, with unlimited slots (docs/interfaces.md, "Oracle").

    demand[m] = the most requests in service at once during minute m if every request started at
    arrival and held a slot for its service time (all input at the prefill speed + output at the
    decode speed); needed[m] = ceil(demand / requests per group) within floor and ceiling.
    """
    sim = policy.simulation
    t0, t1 = trace.span_s
    minutes = max(1, math.ceil((t1 - t0) / 60.0))
    svc = service_times_s(trace.input_tokens, trace.output_tokens, sim.prefill_tokens_per_s, sim.decode_tokens_per_s)
    starts = trace.t_s - t0
    ends = starts + svc
    times = np.concatenate([starts, ends])
    delta = np.concatenate([np.ones(len(starts)), -np.ones(len(ends))])
    order = np.lexsort((delta, times))  # at equal times, ends (-1) before starts (+1)
    times, delta = times[order], delta[order]
    level = np.cumsum(delta)
    demand = np.zeros(minutes)
    idx = np.minimum((times // 60).astype(np.int64), minutes - 1)
    inside = times < minutes * 60
    np.maximum.at(demand, idx[inside], level[inside])
    # The level carried into each minute from before it.
    edges = np.arange(minutes) * 60.0
    before = np.searchsorted(times, edges, side="left") - 1
    carried = np.where(before >= 0, level[np.maximum(before, 0)], 0.0)
    demand = np.maximum(demand, carried)
    return demand, groups_needed(demand, policy)


def groups_needed(demand: np.ndarray, policy: Policy) -> np.ndarray:
    """ceil(demand / requests per group) within floor and ceiling, per minute."""
    fleet = policy.fleet
    needed = np.ceil(demand / fleet.requests_per_group - 1e-9).astype(int)
    return np.clip(needed, fleet.floor_groups, fleet.ceiling_groups)


# The rate oracle's draws (docs/interfaces.md, "Rate oracle"): seeds s + 100 ... s + 107.
RATE_ORACLE_DRAWS = 8
RATE_ORACLE_SEED_OFFSET = 100


def rate_oracle_demand(trace: Trace, policy: Policy, draws: int = RATE_ORACLE_DRAWS) -> np.ndarray | None:
    """The rate oracle's per-minute demand of each of its draws, shape (draws, minutes), or None for a
    trace of recorded arrivals (no rate windows to draw again).

    For a trace drawn with seed s at load scale f (``loadscale.draw_rate_trace``), draw i is the same
    windows' rates and fitted shapes drawn with seed s + 100 + i at the same f: other arrivals and
    lengths, the same future rate. Each draw's demand is the oracle's (``oracle_schedule``) on the same
    span, so minute m of every draw is the same minute of the trace."""
    src, scale = trace.rate_source, trace.load_scale
    if src is None or scale is None:
        return None
    from autoscaler.sim.loadscale import draw_rate_trace  # (loadscale imports nothing from here)

    rows = []
    for i in range(draws):
        other = draw_rate_trace(src, scale.factor, scale.seed + RATE_ORACLE_SEED_OFFSET + i)
        rows.append(oracle_schedule(other, policy)[0])
    width = min(len(r) for r in rows)  # the same span: equal lengths, kept safe
    return np.stack([r[:width] for r in rows])


class OracleController:
    """Clairvoyant: group k is on for each stretch of minutes where k groups are needed, started one
    start-up time before the stretch, drained when it ends, kept on across gaps shorter than the
    start-up time. Every schedule starts with the ceiling ready, so minute 0 counts as needed."""

    uses_signals = False  # the engine hands it None and skips building signals

    def __init__(self, trace: Trace, policy: Policy, needed: np.ndarray | None = None):
        self.period_s = 15.0
        self.policy = policy
        t0 = trace.span_s[0]
        self.demand: np.ndarray | None = None  # per-minute demand, when computed here
        if needed is None:
            self.demand, needed = oracle_schedule(trace, policy)
        startup = policy.simulation.startup_s
        names = policy.fleet.group_names()
        self.actions: list[tuple[float, str, str]] = []  # (time, "start"|"drain", group)
        for k in range(1, policy.fleet.ceiling_groups + 1):
            on = needed >= k
            on[0] = True
            stretches: list[list[int]] = []
            m = 0
            while m < len(on):
                if on[m]:
                    e = m
                    while e < len(on) and on[e]:
                        e += 1
                    # docs/interfaces.md: kept on across gaps shorter than the start-up time. A gap of exactly
                    # one start-up would drain the group and start it again at the same instant, which
                    # costs the same node-hours and only loses its cache: it is merged as well.
                    if stretches and (m - stretches[-1][1]) * 60.0 <= startup:
                        stretches[-1][1] = e
                    else:
                        stretches.append([m, e])
                    m = e
                else:
                    m += 1
            name = names[k - 1]
            for i, (s, e) in enumerate(stretches):
                if i > 0:
                    self.actions.append((t0 + s * 60.0 - startup, "start", name))
                if e < len(on):
                    self.actions.append((t0 + e * 60.0, "drain", name))
        self.actions.sort()
        self.next = 0

    def tick(self, now: float, signals: SignalSnapshot, fleet: FleetState):
        starts: list[str] = []
        drains: list[str] = []
        while self.next < len(self.actions) and self.actions[self.next][0] <= now + 1e-6:
            _, what, name = self.actions[self.next]
            (starts if what == "start" else drains).append(name)
            self.next += 1
        return starts, drains

    def on_ready(self, name, startup_s):
        pass


class RateOracleController(OracleController):
    """The rate oracle (docs/interfaces.md): the oracle's schedule rule on a need it could know
    ahead, the future rate and shape of each window but not its draws. The need each minute is the
    largest of the eight draws' (``rate_oracle_demand``), in groups; the trace's own arrivals are
    replayed with that schedule. ``quantile`` (a check, not the reference): the need at that
    quantile of the draws instead of their maximum."""

    def __init__(self, trace: Trace, policy: Policy, demand: np.ndarray | None = None, quantile: float = 1.0):
        draws = rate_oracle_demand(trace, policy) if demand is None else demand
        if draws is None:
            raise ValueError("the rate oracle needs a trace drawn from rate windows (ServeGen)")
        self.draws = draws
        level = draws.max(axis=0) if quantile >= 1.0 else np.quantile(draws, quantile, axis=0)
        minutes = max(1, math.ceil((trace.span_s[1] - trace.span_s[0]) / 60.0))
        if len(level) < minutes:  # (never for one span; a defensive pad with the last minute's need)
            level = np.concatenate([level, np.full(minutes - len(level), level[-1] if len(level) else 0.0)])
        super().__init__(trace, policy, needed=groups_needed(level[:minutes], policy))
        self.demand = level[:minutes]


__all__ = ["CoreController", "HpaController", "OracleController", "RateOracleController", "StaticController",
           "groups_needed", "oracle_schedule", "rate_oracle_demand",
           "GroupSignals"]
