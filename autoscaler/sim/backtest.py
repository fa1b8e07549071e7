"""The backtest: load and scale a trace, replay it under our core and the reference schedules,
and summarise each run with the keys docs/interfaces.md fixes."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from autoscaler.policy.model import Policy
from autoscaler.sim.controllers import (
    CoreController,
    HpaController,
    OracleController,
    RateOracleController,
    StaticController,
)
from autoscaler.sim.engine import RequestColumns, SimResult, request_columns, simulate
from autoscaler.sim.loadscale import scale_for_policy
from autoscaler.sim.peers import PEERS, DynamoPlannerController
from autoscaler.sim.traces import Trace, load_trace

HPA_TARGETS = (0.5, 0.6, 0.7, 0.8, 0.9)
HPA_DEFAULT_TARGET = 0.7
PEER_NAMES = tuple(PEERS)  # kpa, apa, ray_serve, dynamo_planner: reference.<peer> in --json


def peer_knob(peer: str) -> str:
    """The name of the knob a peer's sweep varies (its sweep points carry it as a key)."""
    return PEERS[peer].KNOB


def peer_default(peer: str, policy: Policy) -> float:
    """A peer's knob at its documented default (Dynamo's planner: the policy's TTFT target)."""
    if peer == "dynamo_planner":
        return policy.slo.ttft_target_s
    return PEERS[peer].DEFAULT


def peer_sweep(peer: str, policy: Policy) -> list[float]:
    """The values of a peer's sweep, its default among them (Dynamo: 0.5-3 x the TTFT target)."""
    if peer == "dynamo_planner":
        return [round(x * policy.slo.ttft_target_s, 6) for x in DynamoPlannerController.SWEEP_X]
    return list(PEERS[peer].SWEEP)


@dataclass
class Run:
    name: str
    result: SimResult
    summary: dict[str, Any]
    controller: Any = None
    pid: int = 0  # the process that replayed it (the parent, or a worker of a parallel backtest)


def model_params(policy: Policy) -> dict[str, Any]:
    sim = policy.simulation
    return {
        "prefill_tokens_per_s": sim.prefill_tokens_per_s,
        "decode_tokens_per_s": sim.decode_tokens_per_s,
        "startup_s": sim.startup_s,
        "requests_per_group": policy.fleet.requests_per_group,
        "slo_ttft_s": policy.slo.ttft_target_s,
        "startup_jitter_s": sim.startup_jitter_s,
        "scrape_interval_s": sim.scrape_interval_s,
        "kv_cache_tokens": sim.kv_cache_tokens,
        "tick_interval_s": policy.scaling.tick_interval_s,
        "drain_timeout_s": policy.drain.timeout_s,
        "drain_on_timeout": str(policy.drain.on_timeout),
    }


def met_and_capacity_misses(result: SimResult, policy: Policy) -> tuple[np.ndarray, np.ndarray]:
    """Per request: (met the TTFT target, a capacity miss). docs/interfaces.md, "Capacity misses":
    missed, but would have met the target without its queue wait, or cut by a drain: the misses that
    more groups would have prevented."""
    target = policy.slo.ttft_target_s
    met = (result.ttft_s <= target) & ~result.cut
    return met, (~met & (result.ttft_s - result.queue_s <= target)) | result.cut


def summarise(result: SimResult, policy: Policy, load_scale: float, wall_s: float) -> dict[str, Any]:
    n = len(result.ttft_s)
    met, capacity = met_and_capacity_misses(result, policy)
    nodes = policy.fleet.group_size_nodes
    span_h = (result.span_s[1] - result.span_s[0]) / 3600.0
    node_hours = result.node_hours(nodes)
    baseline = policy.fleet.ceiling_groups * nodes * span_h
    return {
        "requests": n,
        "load_scale": load_scale,
        "node_hours": round(node_hours, 4),
        "baseline_node_hours": round(baseline, 4),
        "savings_pct": round(100.0 * (1.0 - node_hours / baseline), 3) if baseline > 0 else 0.0,
        "slo_attainment": round(float(met.mean()), 6) if n else 1.0,
        "capacity_misses": int(capacity.sum()),
        "session_move_misses": 0 if result.moved is None else int((result.moved & ~result.cut).sum()),
        "ttft_p50_s": round(float(np.percentile(result.ttft_s, 50)), 4) if n else None,
        "ttft_p99_s": round(float(np.percentile(result.ttft_s, 99)), 4) if n else None,
        "scale_ups": result.scale_ups,
        "scale_downs": result.scale_downs,
        "requests_cut_by_drain": result.requests_cut_by_drain,
        "wall_s": round(wall_s, 3),
    }


def scored_window(result: SimResult, trace: Trace, warmup_s: float) -> SimResult:
    """The part of a replay that is scored after a warm-up of ``warmup_s`` (docs/interfaces.md,
    "Warm-up"): the requests arriving at or after start + warm-up, the node intervals clipped to
    [start + warm-up, end], the ticks, starts and drains from then on. The replay itself ran over the
    whole trace: the fleet at the boundary is whatever the controller had then (not reset to the
    ceiling), and a request that arrived before it is not scored even if it finished (or was cut)
    after it. ``warmup_s`` <= 0 is the replay as it is (the same object)."""
    if warmup_s <= 0:
        return result
    start = result.span_s[0] + warmup_s
    if start >= result.span_s[1]:
        raise ValueError(f"a warm-up of {warmup_s:g} s is not shorter than the replay's span")
    first = int(np.searchsorted(trace.t_s, start, side="left"))  # arrivals are sorted
    ticks = result.tick_t >= start
    intervals = {name: [(max(s, start), e) for s, e in iv if e > start] for name, iv in result.group_intervals.items()}
    cut = result.cut[first:]
    return replace(
        result,
        ttft_s=result.ttft_s[first:], queue_s=result.queue_s[first:], cut=cut,
        moved=None if result.moved is None else result.moved[first:],
        group_intervals=intervals, span_s=(start, result.span_s[1]),
        scale_ups=sum(1 for t, _, what in result.events if what == "start" and t >= start),
        scale_downs=sum(1 for t, _, what in result.events if what == "drain" and t >= start),
        requests_cut_by_drain=int(cut.sum()),
        tick_t=result.tick_t[ticks], tick_demand=result.tick_demand[ticks], tick_ready=result.tick_ready[ticks],
        tick_starting=result.tick_starting[ticks], tick_draining=result.tick_draining[ticks],
        events=[e for e in result.events if e[0] >= start],
    )


def run_one(name: str, trace: Trace, policy: Policy, controller, load_scale: float, seed: int,
            progress: Callable[[float], None] | None = None, columns: RequestColumns | None = None,
            warmup_s: float = 0.0) -> Run:
    """Replay the whole trace under ``controller``; the summary scores only what follows the warm-up
    (``scored_window``). ``Run.result`` is the whole replay (the timeline, the plot and the ledger
    export show the warm-up too)."""
    started = time.perf_counter()
    result = simulate(trace, policy, controller, seed=seed, progress=progress, columns=columns)
    summary = summarise(scored_window(result, trace, warmup_s), policy, load_scale, time.perf_counter() - started)
    return Run(name, result, summary, controller, os.getpid())


# docs/interfaces.md, "HPA frontier": an HPA point reaches at least our SLO when its SLO attainment is
# >= ours - SLO_TIE, and costs less when its node-hours are < COST_TIE x ours.
SLO_TIE = 0.0001
COST_TIE = 0.995


def hpa_dominating(ours_slo: float, ours_node_hours: float, sweep: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The cheapest HPA setting that dominates ours, or None (``frontier_dominating``)."""
    return frontier_dominating(ours_slo, ours_node_hours, sweep, "target_utilization")


def frontier_dominating(ours_slo: float, ours_node_hours: float, sweep: list[dict[str, Any]],
                        knob: str) -> dict[str, Any] | None:
    """The cheapest setting of a swept controller that dominates ours, or None (docs/interfaces.md,
    "HPA frontier", which holds for every peer); ``knob`` names the key of each point's setting.

    Ours at (s, n) is dominated when some sweep point has SLO >= s - 0.0001 and node-hours
    < 0.995 n, or when the straight line between two neighbouring sweep points (sorted by SLO)
    passes below (s, 0.995 n). A point found on a line is reported as that line's point at s,
    with the two targets it lies between. E.g. ours (0.95, 130): points (0.94, 100) and
    (0.96, 140) are not dominating alone (0.94 < 0.9499; 140 > 129.35), but their line at 0.95
    is 100 + 40 x 0.5 = 120 < 129.35: dominated by 120.
    """
    bar = COST_TIE * ours_node_hours
    found: list[dict[str, Any]] = []
    for p in sweep:
        if p["slo_attainment"] >= ours_slo - SLO_TIE and p["node_hours"] < bar:
            found.append({"slo_attainment": p["slo_attainment"], "node_hours": p["node_hours"],
                          knob: p.get(knob), "on_line_between": None})
    pts = sorted(sweep, key=lambda p: (p["slo_attainment"], p["node_hours"]))
    for a, b in zip(pts, pts[1:]):
        s0, n0, s1, n1 = a["slo_attainment"], a["node_hours"], b["slo_attainment"], b["node_hours"]
        if not s0 <= ours_slo <= s1 or s1 == s0:
            continue
        at = n0 + (n1 - n0) * (ours_slo - s0) / (s1 - s0)
        if at < bar:
            found.append({"slo_attainment": ours_slo, "node_hours": at, knob: None,
                          "on_line_between": [a.get(knob), b.get(knob)]})
    return min(found, key=lambda p: p["node_hours"]) if found else None


def hpa_frontier_node_hours(ours_slo: float, sweep: list[dict[str, Any]]) -> float:
    """HPA's node-hours at our SLO attainment, for the table: the sweep sorted by SLO, interpolated
    linearly; above every point, the most expensive point; below every point, the cheapest."""
    pts = sorted((p["slo_attainment"], p["node_hours"]) for p in sweep)
    if ours_slo >= pts[-1][0]:
        return max(nh for _, nh in pts)
    if ours_slo <= pts[0][0]:
        return pts[0][1]
    for (s0, n0), (s1, n1) in zip(pts, pts[1:]):
        if s0 <= ours_slo <= s1:
            if s1 == s0:
                return max(n0, n1)
            return n0 + (n1 - n0) * (ours_slo - s0) / (s1 - s0)
    return pts[-1][1]  # pragma: no cover


def verdict(ours: dict[str, Any], static: dict[str, Any], oracle: dict[str, Any],
            sweep: list[dict[str, Any]], peers: dict[str, list[dict[str, Any]]] | None = None,
            oracle_rate: dict[str, Any] | None = None) -> dict[str, Any]:
    """The three targets of one backtest cell (docs/interfaces.md, "The order of the targets"): SLO
    attainment at least always-on's - 0.5 pp (the hard one); node-hours at most the rate oracle's,
    where it is defined (``oracle_rate`` None: a trace of recorded arrivals, no such target); not
    dominated by any setting of HPA or of a peer. The oracle stays as the outer bound
    (``node_hours_vs_oracle``, ``within_10pct_of_oracle``: the target until 2026-12-04, reported, not
    judged).

    ``peers``: each peer's points (its sweep, or its default alone), each carrying its knob.
    ``dominated_by`` lists the controllers ("hpa" and the peers' names) with a dominating
    setting; ``peer_dominating`` the cheapest dominating point of each peer (or None)."""
    oracle_nh = oracle["node_hours"]
    static_slo = static["slo_attainment"]
    dominating = hpa_dominating(ours["slo_attainment"], ours["node_hours"], sweep)
    rate_nh = None if oracle_rate is None else oracle_rate["node_hours"]
    out = {
        "slo_gap_vs_static_pp": round(100 * (static_slo - ours["slo_attainment"]), 3),
        "slo_within_0_5pp_of_static": static_slo - ours["slo_attainment"] <= 0.005 + 1e-12,
        "node_hours_vs_oracle": round(ours["node_hours"] / oracle_nh, 4) if oracle_nh else None,
        "within_10pct_of_oracle": ours["node_hours"] <= 1.10 * oracle_nh + 1e-9,
        "node_hours_vs_oracle_rate": round(ours["node_hours"] / rate_nh, 4) if rate_nh else None,
        # None where the rate oracle is not defined (the target does not apply)
        "within_rate_oracle": None if rate_nh is None else ours["node_hours"] <= rate_nh + 1e-9,
        "hpa_frontier_node_hours": round(hpa_frontier_node_hours(ours["slo_attainment"], sweep), 4),
        "dominated_by_hpa": dominating is not None,
        "hpa_dominating": dominating,
        "at_or_below_hpa_frontier": dominating is None,
    }
    by_peer = {name: frontier_dominating(ours["slo_attainment"], ours["node_hours"], points, peer_knob(name))
               for name, points in (peers or {}).items()}
    out["peer_dominating"] = by_peer
    out["dominated_by"] = (["hpa"] if dominating is not None else []) + [n for n, p in by_peer.items() if p]
    out["meets_targets"] = (out["slo_within_0_5pp_of_static"] and out["within_rate_oracle"] is not False
                            and not out["dominated_by"])
    return out


def prepare_trace(path: str, fmt: str, policy: Policy, peak_utilization: float, seed: int,
                  start_at=None, skip_bad_rows: bool = False) -> tuple[Trace, float, dict[str, Any]]:
    src = load_trace(path, fmt, start_at=start_at, skip_bad_rows=skip_bad_rows)
    trace, factor = scale_for_policy(src, policy, peak_utilization, seed)
    info = {
        "format": src.format,
        "requests_read": src.requests_read,
        "bad_rows": src.bad_rows,
        "gap_windows": len(src.gap_windows),
    }
    return trace, factor, info


# Below this many requests the replays take well under a second each, less than starting a pool.
PARALLEL_MIN_REQUESTS = 20_000


def reference_names(policy: Policy | None = None, sweep: bool = False) -> list[str]:
    """The reference runs of ``--compare``, in the order they are reported: always-on, the HPA
    sweep, the oracle, each peer at its defaults (``kpa``, ...), and with ``sweep`` (which needs
    the policy) each peer's other sweep points (``kpa@0.5``, ...)."""
    names = ["static", *(f"hpa@{t}" for t in HPA_TARGETS), "oracle", "oracle_rate", *PEER_NAMES]
    if sweep:
        assert policy is not None, "a peer sweep needs the policy (Dynamo's values follow its TTFT target)"
        for peer in PEER_NAMES:
            default = peer_default(peer, policy)
            names += [f"{peer}@{v:g}" for v in peer_sweep(peer, policy) if v != default]
    return names


def peer_points(peer: str, policy: Policy, available: Any) -> list[tuple[float, str]]:
    """(knob value, run name) of a peer's points among ``available`` run names, by value."""
    default = peer_default(peer, policy)
    points = [(default, peer)] if peer in available else []
    points += [(v, f"{peer}@{v:g}") for v in peer_sweep(peer, policy) if v != default and f"{peer}@{v:g}" in available]
    return sorted(points)


def _reference_controller(name: str, trace: Trace, policy: Policy):
    if name == "static":
        return StaticController(policy)
    if name == "oracle":
        return OracleController(trace, policy)
    if name == "oracle_rate":
        return RateOracleController(trace, policy)
    kind, _, value = name.partition("@")
    if kind == "hpa":
        return HpaController(policy, float(value), trace.span_s[0])
    knob = float(value) if value else peer_default(kind, policy)
    if kind == "dynamo_planner":
        return DynamoPlannerController(policy, trace, ttft_target_s=knob)
    factory: Any = PEERS[kind]  # (the other peers take the start time)
    return factory(policy, trace.span_s[0], knob)


def applies(name: str, trace: Trace) -> bool:
    """Whether reference ``name`` is defined for ``trace``: the rate oracle only for a trace drawn from
    rate windows (ServeGen); for recorded arrivals it is null (there are no other draws to learn
    the rate from: docs/interfaces.md, "Rate oracle")."""
    return name != "oracle_rate" or trace.rate_source is not None


def default_workers() -> int:
    """Processes for a parallel backtest: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def can_fork() -> bool:
    """Whether the references can run in forked workers: a 'fork' start method, and not from inside
    a daemonic process (a multiprocessing worker may not have children)."""
    return "fork" in mp.get_all_start_methods() and not mp.current_process().daemon


def backtest(trace: Trace, factor: float, policy: Policy, *, compare: bool, seed: int = 0,
             keep_decisions: bool = False, progress: Callable[[str, float], None] | None = None,
             workers: int | None = None, sweep: bool = False,
             skip: frozenset[str] = frozenset(), warmup_s: float = 0.0) -> dict[str, Run]:
    """Run ours, and with ``compare`` the references (with ``sweep`` every peer's sweep as well),
    on the same arrivals; the reference names in ``skip`` are not replayed (a caller's cache holds
    them). ``warmup_s``: every controller alike replays the whole trace, and each summary scores
    only what follows the first ``warmup_s`` seconds (``scored_window``).

    The replays are independent (each has its own fleet, controller and seeded start-up jitter), so
    with ``workers`` > 1 (default: the CPUs available, for traces of at least
    ``PARALLEL_MIN_REQUESTS``) they run in that many processes at once: this one replays ours (its
    controller, with every decision for --db, and its progress need no transfer) and
    ``workers - 1`` forked workers replay the references, longest first; when ours is done, this
    process takes the references no worker has started. The fork hands the workers the scaled
    trace without pickling it; each sends back its Run (summary, SimResult, controller).
    ``workers=1``, or no fork, runs everything here one after another; both give the same results.
    """
    def prog(label: str):
        return None if progress is None else (lambda f: progress(label, f))

    columns = request_columns(trace, policy)  # one copy for every replay (and, by the fork, every worker)

    def here(name: str) -> Run:
        label = name.replace("@", " ")
        return run_one(name, trace, policy, _reference_controller(name, trace, policy), factor, seed, prog(label),
                       columns, warmup_s)

    refs = [n for n in reference_names(policy, sweep) if n not in skip and applies(n, trace)] if compare else []
    if workers is None:
        workers = default_workers() if len(trace) >= PARALLEL_MIN_REQUESTS else 1
    workers = min(workers, len(refs) + 1)
    if workers <= 1 or not can_fork():
        runs = {"ours": run_one("ours", trace, policy, CoreController(policy, keep_decisions, trace.start_epoch_s),
                                factor, seed, prog("ours"), columns, warmup_s)}
        for name in refs:
            runs[name] = here(name)
        return runs

    # Longest first, so that nobody is left with a long replay at the end. A worker is handed its
    # next reference only when it finishes one (a callback, in this process's executor thread), so
    # that none is queued for a busy worker while this process could take it. With 'fork', the
    # initargs reach the workers by inheritance, not by pickling; a worker that dies (killed for
    # memory, say) raises BrokenProcessPool here rather than leaving us waiting.
    todo = deque(sorted(refs, key=lambda n: -_COST.get(n.split("@")[0], 1.0)))
    lock = threading.Lock()
    jobs: dict[str, Future] = {}
    done: dict[str, Run] = {}

    def take() -> str | None:
        with lock:
            return todo.popleft() if todo else None

    with ProcessPoolExecutor(workers - 1, mp_context=mp.get_context("fork"), initializer=_init_worker,
                             initargs=(trace, policy, factor, seed, columns, warmup_s)) as pool:
        def feed(_finished: Future | None = None) -> None:
            with lock:  # taken and registered at once: once ``todo`` is empty, ``jobs`` is complete
                if not todo:
                    return
                name = todo.popleft()
                try:
                    jobs[name] = job = pool.submit(_run_reference, name)
                except BaseException:  # a broken pool: leave it to this process
                    todo.appendleft(name)
                    raise
            job.add_done_callback(feed)

        for _ in range(workers - 1):
            feed()
        runs = {"ours": run_one("ours", trace, policy, CoreController(policy, keep_decisions, trace.start_epoch_s),
                                factor, seed, prog("ours"), columns, warmup_s)}
        while (left := take()) is not None:
            done[left] = here(left)
        for name, job in jobs.items():
            done[name] = job.result()
    for name in refs:
        runs[name] = done[name]
    return runs


# Relative replay cost of each kind of reference (CPU s of one replay of the 14-day trace, alone
# in one process: KPA ticks every 2 s, Ray Serve every 10 s, HPA and APA every 15 s; Dynamo's
# planner ticks every 180 s but sizes each tick by 40 bisection steps); only the order matters.
_COST = {"oracle_rate": 1.5, "kpa": 2.8, "ray_serve": 0.93, "dynamo_planner": 0.87, "apa": 0.71, "hpa": 0.7, "oracle": 0.5,
         "static": 0.35}

_worker_args: tuple[Trace, Policy, float, int, RequestColumns, float] | None = None


def _init_worker(trace: Trace, policy: Policy, factor: float, seed: int, columns: RequestColumns,
                 warmup_s: float) -> None:
    global _worker_args
    _worker_args = (trace, policy, factor, seed, columns, warmup_s)


def _run_reference(name: str) -> Run:
    assert _worker_args is not None, "_run_reference runs in a worker started by backtest()"
    trace, policy, factor, seed, columns, warmup_s = _worker_args
    return run_one(name, trace, policy, _reference_controller(name, trace, policy), factor, seed, columns=columns,
                   warmup_s=warmup_s)


def reference_json(summaries: dict[str, dict[str, Any]], policy: Policy) -> dict[str, Any]:
    """``reference`` of ``simulate --json`` from the reference runs' summaries (by run name):
    static, hpa, hpa_sweep, oracle; each peer at its defaults with its ``source``; and where its
    sweep was run, ``<peer>_sweep`` (each point with ``knob``, the knob's name, and that name's
    value)."""
    ref: dict[str, Any] = {
        "static": summaries["static"],
        "hpa": summaries[f"hpa@{HPA_DEFAULT_TARGET}"],
        "hpa_sweep": [{**summaries[f"hpa@{t}"], "target_utilization": t} for t in HPA_TARGETS],
        "oracle": summaries["oracle"],
        # null for a trace of recorded arrivals (``applies``), and in a cache written before it existed
        "oracle_rate": summaries.get("oracle_rate"),
    }
    for peer in PEER_NAMES:
        if peer not in summaries:
            continue
        ref[peer] = {**summaries[peer], "source": PEERS[peer].source}
        points = peer_points(peer, policy, summaries)
        if len(points) > 1:
            knob = peer_knob(peer)
            ref[f"{peer}_sweep"] = [{**summaries[name], "knob": knob, knob: v} for v, name in points]
    return ref


def peers_frontiers(ref: dict[str, Any], policy: Policy) -> dict[str, list[dict[str, Any]]]:
    """Each peer's points for the dominance rule: its sweep, or its default point alone."""
    out = {}
    for peer in PEER_NAMES:
        if f"{peer}_sweep" in ref:
            out[peer] = ref[f"{peer}_sweep"]
        elif peer in ref:
            knob = peer_knob(peer)
            out[peer] = [{**ref[peer], "knob": knob, knob: peer_default(peer, policy)}]
    return out


def results_json(runs: dict[str, Run], policy: Policy, trace_info: dict[str, Any], wall_s: float,
                 cached: dict[str, dict[str, Any]] | None = None, warmup_s: float = 0.0) -> dict[str, Any]:
    """``simulate --json``; ``cached``: reference summaries taken from a cache instead of ``runs``;
    ``warmup_s``: the warm-up the summaries were scored after (``warmup_hours``)."""
    out = dict(runs["ours"].summary)
    out["wall_s"] = round(wall_s, 3)
    out["warmup_hours"] = warmup_s / 3600.0
    out["trace"] = trace_info
    out["model"] = model_params(policy)
    summaries = {name: run.summary for name, run in runs.items() if name != "ours"}
    summaries.update(cached or {})
    if "static" in summaries:
        ref = out["reference"] = reference_json(summaries, policy)
        out["verdict"] = verdict(out, ref["static"], ref["oracle"], ref["hpa_sweep"], peers_frontiers(ref, policy),
                                 ref["oracle_rate"])
    return out
