"""``autoscaler simulate --frontier [LIST]``: the policy replayed once per SLO error budget beside the
references, the points no other point dominates, one recommended budget and what it is worth.

``simulate_cmd`` checks the arguments, loads the policy (once per budget) and the trace; this
module replays, judges and prints (autoscaler/sim/frontier.py has the definitions)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from autoscaler.cli.common import print_json
from autoscaler.cli.frontier_plot import NAMES, write_frontier_plot
from autoscaler.cli.simulate_cmd import reference_cache, scored_from
from autoscaler.policy.loader import LoadedPolicy
from autoscaler.policy.model import Policy
from autoscaler.sim.backtest import PEER_NAMES, model_params, peer_knob
from autoscaler.sim.frontier import (
    BUDGET_KEY,
    budget_text,
    frontier_json,
    judge,
    money,
    point_json,
    reference_of,
    run_points,
)
from autoscaler.sim.traces import Trace

KNOB_LABELS = {"target_utilization": "target", "target_ongoing_requests": "target", "ttft_target_s": "TTFT target s"}


def header(currency: str) -> list[str]:
    return ["controller", "setting", "node-hours", "saving %", f"saving {currency}", f"{currency} a month",
            "SLO attainment %", "gap vs always-on pp", "capacity misses", "session-move misses", "groups started",
            "frontier"]


def run_frontier(args: argparse.Namespace, loaded: LoadedPolicy, variants: dict[float, Policy], trace: Trace,
                 factor: float, info: dict[str, Any], warmup_s: float, started: float, progress) -> int:
    policy = loaded.policy
    sweep = args.compare != "defaults"  # the frontier compares with every swept setting unless told not to
    cache, cached = reference_cache(args, trace, factor, policy, warmup_s, sweep)
    own = policy.slo.capacity_miss_budget_pct
    first = own if own in variants else min(variants)
    summaries, runs = run_points(trace, factor, variants, seed=args.seed, warmup_s=warmup_s, sweep=sweep,
                                 skip=frozenset(cached), first=first, progress=progress)
    progress.done()
    references = {name: run.summary for name, run in runs.items() if name != "ours"}
    if cache is not None:
        for name, summary in references.items():
            cache.put(name, summary)
    references.update(cached)
    points = [point_json(summaries[b], variants[b], b, info, references, warmup_s) for b in sorted(summaries)]
    judge(points, policy)
    reference = reference_of(summaries[first], policy, info, references, warmup_s)
    out = frontier_json(points, reference, policy, loaded.text, loaded.path, info, model_params(policy), warmup_s,
                        scored_from(trace, warmup_s), time.perf_counter() - started)
    rows = table_rows(out, policy)
    head = header(policy.cost.currency)
    if args.plot:
        title = plot_title(args, info, loaded.path)
        write_frontier_plot(args.plot, out, title, rows, head)
    if args.json:
        print_json(out)
    else:
        print_frontier(out, head, rows)
    return 0


def plot_title(args: argparse.Namespace, info: dict[str, Any], policy_path: str) -> str:
    """'What each SLO budget buys: servegen-m-small (servegen), policy default.yaml'."""
    where = (f"Prometheus history {info['from']} to {info['to']}" if args.from_prometheus
             else f"{Path(args.trace).name} ({info['format']})")
    return f"What each SLO budget buys: {where}, policy {Path(policy_path).name}"


def table_rows(out: dict[str, Any], policy: Policy) -> list[list[str]]:
    """One row per point of ours (``*`` in the last column: no other point dominates it; ``<- recommended``),
    then always-on, the oracles, HPA's sweep and each peer's points."""
    ref = out["reference"]
    static_slo = ref["static"]["slo_attainment"]
    rec = (out.get("recommended") or {}).get(BUDGET_KEY)

    def row(name: str, setting: str, p: dict[str, Any], mark: str) -> list[str]:
        m = p.get("money") or money(p, policy)
        return [name, setting, f"{p['node_hours']:,.1f}", f"{p['savings_pct']:.2f}",
                f"{m['saving_variable']:,.2f}", f"{m['saving_variable_per_month']:,.2f}",
                f"{100 * p['slo_attainment']:.3f}", f"{100 * (static_slo - p['slo_attainment']):.3f}",
                f"{p['capacity_misses']:,}", f"{p.get('session_move_misses', 0):,}", f"{p['scale_ups']:,}", mark]

    rows = []
    for p in out["points"]:
        mark = "*" if p["non_dominated"] else "by " + ", ".join(
            ([f"budget {budget_text(p['dominated_by_budget'])}%"] if p["dominated_by_budget"] is not None else [])
            + p["verdict"]["dominated_by"])
        if p[BUDGET_KEY] == rec:
            mark += " recommended" if mark == "*" else ", recommended"
        rows.append(row("ours", f"budget {budget_text(p[BUDGET_KEY])}%", p, mark))
    rows.append(row("always-on", "", ref["static"], ""))
    rows.append(row("oracle", "clairvoyant", ref["oracle"], ""))
    if ref.get("oracle_rate"):
        rows.append(row("rate oracle", "", ref["oracle_rate"], ""))
    for p in ref["hpa_sweep"]:
        rows.append(row("HPA", f"target {p['target_utilization']:g}", p, ""))
    for peer in PEER_NAMES:
        sweep = ref.get(f"{peer}_sweep")
        knob = peer_knob(peer)
        for p in sweep or ([ref[peer]] if ref.get(peer) else []):
            setting = f"{KNOB_LABELS.get(knob, knob)} {p[knob]:g}" if knob in p else "default"
            if (tk := p.get("time_knob")) and tk in p:  # a time-constant grid's point: both its values
                setting += f", {tk} {p[tk]:g}"
            rows.append(row(NAMES.get(peer, peer), setting, p, ""))
    return rows


def print_frontier(out: dict[str, Any], head: list[str], rows: list[list[str]]) -> None:
    t = out["trace"]
    p0 = out["points"][0]
    print(f"frontier of slo.{BUDGET_KEY}: {len(out['points'])} budgets on a {t['format']} trace "
          f"({p0['requests']:,} requests scored from {out['scored_from']}, load scale x{p0['load_scale']:.6g}); "
          f"money at the policy's prices, variable cost only (docs/backtest.md#choosing-a-budget-the-frontier)")
    widths = [max(len(head[i]), *(len(r[i]) for r in rows)) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(c.ljust(widths[i]) if i < 2 or i == len(head) - 1 else c.rjust(widths[i])
                        for i, c in enumerate(r)).rstrip())
    print("(frontier *: no other point of ours, HPA's or a peer's reaches its SLO attainment for fewer node-hours; "
          "'by X': X does)")
    print()
    print("recommendation: " + out["advice"])
    rec = out.get("recommended")
    if rec is not None:
        diff = rec.get("policy_diff")
        print(diff.rstrip("\n") if diff else f"(the policy already sets slo.{BUDGET_KEY}: "
                                             f"{budget_text(rec[BUDGET_KEY])})")
    for w in out["warnings"]:
        print("warning: " + w)
    sys.stdout.flush()
