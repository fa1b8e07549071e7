"""``autoscaler simulate``: replay a trace through the fleet with the real decision core."""

from __future__ import annotations

import argparse
import math
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from autoscaler.adapters.prom_history import DEFAULT_STEP_S, DEFAULT_TIMEOUT_S, prepare_prometheus_trace
from autoscaler.cli.common import check_db_output, check_output, check_seed, print_json, time_arg
from autoscaler.core.types import iso
from autoscaler.errors import BadInput
from autoscaler.policy import load_policy
from autoscaler.settings import check_http_url
from autoscaler.sim import tracecache
from autoscaler.sim.backtest import (
    HPA_DEFAULT_TARGET,
    PEER_NAMES,
    backtest,
    reference_names,
    results_json,
)
from autoscaler.sim.frontier import DEFAULT_BUDGETS, parse_budgets, policy_with_budget
from autoscaler.sim.refcache import ReferenceCache, default_dir
from autoscaler.sim.timeline import check_plot_path, minute_rows, write_plot, write_timeline
from autoscaler.sim.traces import Trace

FORMATS = ("auto", "azure", "mooncake", "servegen", "csv")
# --peak-utilization: below 1% of the ceiling's slots at the busiest 5 minutes no fleet is sized,
# and load scaling would keep a handful of requests (1e-9 kept 1 of 2,002).
MIN_PEAK, MAX_PEAK = 0.01, 10.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="backtest a policy on a recorded trace (and compare with HPA and the oracle)")
    p.add_argument("--policy", required=True, metavar="FILE", help="the policy to backtest (YAML)")
    p.add_argument("--trace", metavar="PATH", help="a trace file (or a ServeGen directory)")
    p.add_argument("--trace-format", choices=FORMATS, default="auto",
                   help="the trace's format: " + ", ".join(FORMATS) + " (default auto: recognised by its content)")
    p.add_argument("--from-prometheus", metavar="URL",
                   help="instead of --trace: replay the fleet's request history recorded in this Prometheus "
                        "between --from and --to (docs/backtest-from-prometheus.md)")
    p.add_argument("--from", dest="from_", type=time_arg, metavar="T",
                   help="with --from-prometheus: range start (ISO 8601, UTC without a zone)")
    p.add_argument("--to", type=time_arg, metavar="T", help="with --from-prometheus: range end")
    p.add_argument("--step", type=int, default=None, metavar="S",
                   help="with --from-prometheus: seconds per step (rate window and query step; "
                        f"default {DEFAULT_STEP_S}, at least twice the scrape interval)")
    p.add_argument("--selector", metavar="MATCHERS",
                   help="with --from-prometheus: label matchers for the counters, e.g. 'job=\"sglang\"' "
                        "('' = every series; default: the policy's groups by signals.group_label)")
    p.add_argument("--peak-utilization", type=float, default=None, metavar="U",
                   help="rescale so the busiest 5 minutes offer U of the ceiling's slots, 0.01 to 10 (default 0.5 "
                        "for --trace; with --from-prometheus no rescaling unless given)")
    p.add_argument("--seed", type=int, default=0, help="seed of the load scaling's draws, 0 or more (default 0)")
    p.add_argument("--warmup-hours", type=float, default=0.0, metavar="H",
                   help="replay the trace's first H hours to build every controller's memory (ours, HPA, the peers, "
                        "the oracle's schedule alike) and score only what follows; shorter than the trace's span "
                        "(default 0: a cold start)")
    p.add_argument("--start-at", type=time_arg, metavar="T",
                   help="when a trace without absolute times starts (default Monday 2026-01-05 00:00 UTC)")
    p.add_argument("--skip-bad-rows", action="store_true", help="skip malformed rows and count them")
    p.add_argument("--compare", nargs="?", const="defaults", choices=("defaults", "sweep"), default=None,
                   help="also run always-on, the HPA sweep, the oracle and the peers (Knative KPA, AIBrix APA and KPA, Ray "
                        "Serve, Dynamo's planner) at their defaults; '--compare sweep' also sweeps each peer's main "
                        "knob (docs/peers.md)")
    p.add_argument("--reference-cache", metavar="DIR", default=None,
                   help="where reference replays are cached, keyed by trace, load, seed, fleet model, setting and "
                        "code (default $XDG_CACHE_HOME/fleet-autoscaler/references, or under ~/.cache)")
    p.add_argument("--no-reference-cache", action="store_true", help="replay every reference, read and write no cache")
    p.add_argument("--trace-cache", metavar="DIR", default=None,
                   help="where traces are cached read and load-scaled, keyed by the trace's bytes, format, start, "
                        "peak use, seed, fleet model and code (default $XDG_CACHE_HOME/fleet-autoscaler/traces, or "
                        "under ~/.cache; the 8 most recently used are kept)")
    p.add_argument("--no-trace-cache", action="store_true", help="read and scale the trace again, read and write no cache")
    p.add_argument("--frontier", nargs="?", const=DEFAULT_BUDGETS, default=None, metavar="LIST",
                   help="replay once per SLO error budget (slo.capacity_miss_budget_pct, comma-separated percents, "
                        f"each above 0 and at most 100; default {DEFAULT_BUDGETS}) beside the references of "
                        "'--compare sweep' (or '--compare' alone: the peers at their defaults), and recommend one "
                        "(docs/backtest.md#choosing-a-budget-the-frontier); --plot draws it")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--timeline-out", metavar="FILE.csv", help="write one row per minute of our replay")
    p.add_argument("--plot", metavar="FILE", help="draw demand against active nodes (.html or .svg)")
    p.add_argument("--db", metavar="URL", help="write the backtest into the ledger (source 'simulation')")
    p.set_defaults(func=_run)


class _Progress:
    """A one-line progress display on stderr, only when stderr is a terminal."""

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, label: str, fraction: float) -> None:
        now = time.monotonic()
        if self.enabled and now - self.last > 0.2:
            self.last = now
            sys.stderr.write(f"\rsimulating {label}: {100 * fraction:5.1f}%   ")
            sys.stderr.flush()

    def done(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * 50 + "\r")


def _check_source(args: argparse.Namespace) -> None:
    """Exactly one of --trace and --from-prometheus, and only the flags that go with it."""
    if args.trace and args.from_prometheus:
        raise BadInput("simulate: --trace and --from-prometheus are mutually exclusive; give one")
    if not args.trace and not args.from_prometheus:
        raise BadInput("simulate: give --trace PATH or --from-prometheus URL (with --from and --to)")
    if args.from_prometheus:
        args.from_prometheus = check_http_url("--from-prometheus", args.from_prometheus)
        for flag, value in (("--from", args.from_), ("--to", args.to)):
            if value is None:
                raise BadInput(f"simulate --from-prometheus: {flag} T is required (ISO 8601, UTC without a zone)")
        if args.to <= args.from_:
            raise BadInput("simulate --from-prometheus: --to must be after --from")
        for flag, given in (("--trace-format", args.trace_format != "auto"), ("--start-at", args.start_at is not None),
                            ("--skip-bad-rows", args.skip_bad_rows), ("--trace-cache", args.trace_cache is not None),
                            ("--no-trace-cache", args.no_trace_cache)):
            if given:
                raise BadInput(f"simulate: {flag} applies to --trace, not to --from-prometheus")
    else:
        for flag, value in (("--from", args.from_), ("--to", args.to), ("--step", args.step),
                            ("--selector", args.selector)):
            if value is not None:
                raise BadInput(f"simulate: {flag} applies to --from-prometheus, not to --trace")


def _run(args: argparse.Namespace) -> int:
    _check_source(args)
    if args.peak_utilization is not None and not MIN_PEAK <= args.peak_utilization <= MAX_PEAK:
        raise BadInput(f"--peak-utilization: {args.peak_utilization:g} must be from {MIN_PEAK:g} to {MAX_PEAK:g} "
                       f"(the share of the ceiling's slots the busiest 5 minutes fill)")
    check_seed(args.seed)
    if not math.isfinite(args.warmup_hours) or args.warmup_hours < 0:
        raise BadInput(f"--warmup-hours: {args.warmup_hours:g} must be a number of hours, 0 or more "
                       f"(0: a cold start)")
    if args.step is not None and args.step <= 0:
        raise BadInput(f"--step: {args.step} must be a number of seconds above 0")
    budgets = None if args.frontier is None else parse_budgets(args.frontier)
    if budgets is not None:
        for flag, given in (("--db", args.db), ("--timeline-out", args.timeline_out)):
            if given:
                raise BadInput(f"simulate --frontier: {flag} records one replay, not a frontier; run simulate "
                               f"{flag} with the budget chosen")
    # Every output before any work (a 14-day replay must not end in "cannot write").
    check_db_output("--db", args.db)
    if args.plot:
        check_plot_path(args.plot)
    check_output("--plot", args.plot, ledger_url=args.db)
    check_output("--timeline-out", args.timeline_out, ledger_url=args.db)
    if args.plot and args.timeline_out and Path(args.plot).resolve() == Path(args.timeline_out).resolve():
        raise BadInput(f"--plot and --timeline-out: both are {args.plot}; give two files")
    loaded = load_policy(args.policy)
    policy = loaded.policy
    # The policy once per budget, from its own text with the budget's line changed (a flow-style slo
    # section is bad input here, before any replay).
    variants = None if budgets is None else {b: policy_with_budget(loaded.text, loaded.path, b)[0] for b in budgets}
    started = time.perf_counter()
    trace, factor, info, label = _prepare(args, policy)
    warmup_s = args.warmup_hours * 3600.0
    span_s = trace.span_s[1] - trace.span_s[0]
    if warmup_s > 0 and warmup_s >= span_s:
        raise BadInput(f"--warmup-hours: {args.warmup_hours:g} h is not shorter than the trace's span "
                       f"({span_s / 3600.0:.4g} h as replayed, after load scaling): nothing would be scored")
    progress = _Progress()
    if variants is not None:
        from autoscaler.cli.frontier_cmd import run_frontier

        return run_frontier(args, loaded, variants, trace, factor, info, warmup_s, started, progress)
    compare, sweep = args.compare is not None, args.compare == "sweep"
    cache, cached = reference_cache(args, trace, factor, policy, warmup_s, sweep) if compare else (None, {})
    runs = backtest(trace, factor, policy, compare=compare, seed=args.seed, keep_decisions=bool(args.db),
                    progress=progress, sweep=sweep, skip=frozenset(cached), warmup_s=warmup_s)
    progress.done()
    if cache is not None:
        for name, run in runs.items():
            if name != "ours":
                cache.put(name, run.summary)
    out = results_json(runs, policy, info, time.perf_counter() - started, cached, warmup_s)
    out["scored_from"] = scored_from(trace, warmup_s)
    ours = runs["ours"]
    nodes = policy.fleet.group_size_nodes
    if args.timeline_out or args.plot:
        rows = minute_rows(trace, ours.result, nodes)
        if args.timeline_out:
            write_timeline(args.timeline_out, rows)
        if args.plot:
            title = (f"{info['format']} trace x{factor:.4g}: demand vs active nodes, saving "
                     f"{out['savings_pct']:.1f}% of node-hours, SLO attainment {100 * out['slo_attainment']:.2f}%")
            write_plot(args.plot, rows, title, policy.fleet.ceiling_groups * nodes,
                       policy.fleet.requests_per_group / nodes)
    if args.db:
        from autoscaler.ledger.export import export_backtest

        out["ledger_run_id"] = export_backtest(args.db, loaded, trace, ours, label=label)
    if args.json:
        print_json(out)
    else:
        _print_table(out)
    return 0


def _prepare(args: argparse.Namespace, policy) -> tuple[Trace, float, dict, str]:
    """The trace as replayed (from the file or from Prometheus), its load scale, its info and a label."""
    if args.from_prometheus:
        trace, factor, info = prepare_prometheus_trace(
            args.from_prometheus, args.from_, args.to, policy,
            step_s=DEFAULT_STEP_S if args.step is None else args.step, seed=args.seed,
            peak_utilization=args.peak_utilization, selector=args.selector, timeout_s=DEFAULT_TIMEOUT_S,
        )
        return trace, factor, info, f"prometheus {info['url']} {info['from']}..{info['to']}"
    start_at = None if args.start_at is None else datetime.fromtimestamp(args.start_at, tz=timezone.utc)
    peak = 0.5 if args.peak_utilization is None else args.peak_utilization
    root = None if args.no_trace_cache else (Path(args.trace_cache) if args.trace_cache else tracecache.default_dir())
    trace, factor, info = tracecache.prepare_trace(root, args.trace, args.trace_format, policy, peak, args.seed,
                                                   start_at, args.skip_bad_rows)
    return trace, factor, info, args.trace


def scored_from(trace: Trace, warmup_s: float) -> str:
    """``scored_from``: the first instant a summary scores (the trace's start after the warm-up)."""
    return iso(trace.start_epoch_s + trace.span_s[0] + warmup_s)


def reference_cache(args: argparse.Namespace, trace: Trace, factor: float, policy, warmup_s: float,
                    sweep: bool) -> tuple[ReferenceCache | None, dict[str, dict]]:
    """The reference cache of ``--compare`` (None with --no-reference-cache) and what it holds."""
    if args.no_reference_cache:
        return None, {}
    root = Path(args.reference_cache) if args.reference_cache else default_dir()
    if root is None:  # (no home folder and no $XDG_CACHE_HOME: nothing to cache in)
        return None, {}
    cache = ReferenceCache(root, trace, factor, args.seed, policy, warmup_s)
    return cache, cache.lookup(reference_names(policy, sweep))


_SHORT = {"kpa": "knative-kpa", "apa": "aibrix-apa", "aibrix_kpa": "aibrix-kpa", "ray_serve": "ray-serve",
          "dynamo_planner": "dynamo"}


def args_sweep(ref: dict) -> bool:
    """Whether the peers' sweeps were run (any ``<peer>_sweep`` in the reference)."""
    return any(f"{p}_sweep" in ref for p in PEER_NAMES)


def _or_dash(value) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _print_table(out: dict) -> None:
    cols = [("ours", out)]
    ref = out.get("reference")
    if ref:
        cols += [("always-on", ref["static"]), (f"hpa@{HPA_DEFAULT_TARGET}", ref["hpa"])]
        cols += [(_SHORT[p], ref[p]) for p in PEER_NAMES if p in ref]
        cols += [("oracle", ref["oracle"])]
        if ref.get("oracle_rate") is not None:
            cols += [("rate-oracle", ref["oracle_rate"])]
    rows = [
        ("requests", "requests", "{:,}"),
        ("node-hours", "node_hours", "{:,.1f}"),
        ("always-on node-hours", "baseline_node_hours", "{:,.1f}"),
        ("saving %", "savings_pct", "{:.2f}"),
        ("SLO attainment %", "slo_attainment", None),
        ("capacity misses", "capacity_misses", "{:,}"),
        ("session-move misses", "session_move_misses", "{:,}"),
        ("TTFT p50 s", "ttft_p50_s", "{:.3f}"),
        ("TTFT p99 s", "ttft_p99_s", "{:.3f}"),
        ("groups started", "scale_ups", "{:,}"),
        ("groups drained", "scale_downs", "{:,}"),
        ("requests cut by drain", "requests_cut_by_drain", "{:,}"),
        ("wall s", "wall_s", "{:.2f}"),
    ]
    t = out["trace"]
    if t["format"] == "prometheus":
        tokens = t["tokens"]
        print(f"trace: prometheus {t['url']}, {t['from']} to {t['to']} in {t['steps']:,} steps of {t['step_s']} s: "
              f"{t['requests_read']:,} with data, {t['gap_windows']} without ({t['gaps_filled']} filled by "
              f"interpolation, {t['gaps_cut']} cut at the edges); replayed {t['replay_from']} to {t['replay_to']}")
        print(f"recorded: {t['recorded_requests']:,.1f} requests, tokens per request: input "
              f"{_or_dash(t['recorded_input_tokens_per_request'])} ({tokens['input']}), output "
              f"{_or_dash(t['recorded_output_tokens_per_request'])} ({tokens['output']}); "
              f"load scale x{out['load_scale']:.6g}")
    else:
        print(f"trace: {t['format']}, {t['requests_read']:,} rows read, {t['bad_rows']} bad, "
              f"{t['gap_windows']} collection-gap windows; load scale x{out['load_scale']:.6g}")
    if out.get("warmup_hours"):
        print(f"warm-up: the first {out['warmup_hours']:g} h replayed to build every controller's memory, not "
              f"scored; scored from {out['scored_from']}")
    width = 24
    print("".ljust(width) + "".join(name.rjust(14) for name, _ in cols))
    for label, key, fmt in rows:
        cells = []
        for _, col in cols:
            v = col.get(key)
            if v is None:
                cells.append("-".rjust(14))
            elif fmt is None:
                cells.append(f"{100 * v:.3f}".rjust(14))
            else:
                cells.append(fmt.format(v).rjust(14))
        print(label.ljust(width) + "".join(cells))
    if ref:
        print()
        print("HPA sweep (target utilisation: node-hours, SLO attainment %): " + ", ".join(
            f"{p['target_utilization']}: {p['node_hours']:,.1f}, {100 * p['slo_attainment']:.3f}"
            for p in ref["hpa_sweep"]))
        for peer in PEER_NAMES:
            points = ref.get(f"{peer}_sweep")
            if points:
                knob, tk = points[0]["knob"], points[0].get("time_knob")
                print(f"{_SHORT[peer]} sweep ({knob}{'/' + tk if tk else ''}: node-hours, SLO attainment %): "
                      + ", ".join(f"{p[knob]:g}{'/' + format(p[tk], 'g') if tk else ''}: {p['node_hours']:,.1f}, "
                                  f"{100 * p['slo_attainment']:.3f}" for p in points))
        v = out["verdict"]
        beaten = [("hpa", v["hpa_dominating"])] + [(p, d) for p, d in v["peer_dominating"].items() if d]
        print(f"vs always-on SLO: {-v['slo_gap_vs_static_pp']:+.3f} pp "
              f"({'ok' if v['slo_within_0_5pp_of_static'] else 'MORE than 0.5 pp below'}); "
              + (f"vs rate oracle node-hours: x{v['node_hours_vs_oracle_rate']} "
                 f"({'ok' if v['within_rate_oracle'] else 'ABOVE'}); " if v["within_rate_oracle"] is not None else "")
              + f"vs oracle node-hours: x{v['node_hours_vs_oracle']}; "
              + ("not dominated by HPA or a peer" if not v["dominated_by"] else "DOMINATED by " + ", ".join(
                  f"{_SHORT.get(name, name)} ({d['node_hours']:,.1f} node-hours at SLO {100 * d['slo_attainment']:.3f}%)"
                  for name, d in beaten if d)))
        if ref.get("oracle_rate") is None:
            print("(no rate oracle: it is defined for traces given as rate windows (ServeGen), which it draws "
                  "again with other seeds; a trace of recorded arrivals has one draw only)")
        if not args_sweep(ref):
            print("(peers at their defaults only; '--compare sweep' sweeps each peer's knob)")
