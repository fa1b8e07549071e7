"""``simulate --frontier``: what each SLO error budget buys on one trace.

The same arrivals are replayed once per budget (``slo.capacity_miss_budget_pct`` set to it in the
policy's own text, everything else as given) and once per reference (the references of
``--compare``, replayed or taken from its cache, never once per budget: none reads the budget).
Each point is what ``simulate --json`` prints for the policy with that budget; this module adds
what a reader chooses with: which of our points no other point dominates, the saving in money at
the policy's prices, one recommended budget and the warnings that say when not to trust it.

No I/O here but the forked workers of a parallel run; the command line is ``cli/frontier_cmd.py``.
"""

from __future__ import annotations

import difflib
import math
import multiprocessing as mp
import re
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from decimal import Decimal
from fractions import Fraction
from typing import Any, cast

from autoscaler.core.risk import RECENT_MINUTES, TAIL_HOURS
from autoscaler.errors import BadInput
from autoscaler.policy.loader import parse_policy
from autoscaler.policy.model import Policy
from autoscaler.sim.backtest import (
    COST_TIE,
    SLO_TIE,
    Run,
    backtest,
    can_fork,
    default_workers,
    results_json,
    run_one,
)
from autoscaler.sim.controllers import CoreController
from autoscaler.sim.engine import RequestColumns, SimResult, request_columns
from autoscaler.sim.traces import Trace

DEFAULT_BUDGETS = "0.1,0.25,0.5,1,2,4"
BUDGET_KEY = "capacity_miss_budget_pct"
# The SLO's bar (docs/interfaces.md, "The order of the targets"): SLO attainment >= always-on's - 0.5 pp.
SLO_BAR_PP = 0.5
# Trust: the core's risk remembers its recent rises and the week's tail behind them (core/risk.py), so a
# week of scored traffic holds a week's peaks, and a scored minute that has a week of memory behind
# it is "warm". Fewer than this many requests make 0.5 pp fewer than 50 requests: one burst.
WEEK_H = TAIL_HOURS + RECENT_MINUTES / 60.0  # 165 + 3 = 168 h (at the default minute)
MIN_REQUESTS = 10_000
HOURS_PER_MONTH = Fraction(730)  # 8,760 h / 12, as the ledger's cost report (autoscaler/ledger/cost.py)
# The keys of a point that the frontier's reader compares (the rest are in simulate --json too).
SHARED_KEYS = ("trace", "model", "reference", "warmup_hours", "scored_from")


def parse_budgets(text: str) -> list[float]:
    """``--frontier`` LIST: comma-separated budgets in percent, each > 0 and <= 100, none twice;
    returned in ascending order. Anything else is bad input, in one line."""
    items = [s.strip() for s in text.split(",")]
    if not text.strip() or all(not s for s in items):
        raise BadInput("--frontier: the list of budgets is empty; give percentages like "
                       f"{DEFAULT_BUDGETS} (or --frontier alone for those)")
    budgets: list[float] = []
    for item in items:
        try:
            value = float(item)
        except ValueError:
            raise BadInput(f"--frontier: {item!r} is not a number; give percentages, comma-separated, "
                           f"each above 0 and at most 100 (e.g. {DEFAULT_BUDGETS})") from None
        if not math.isfinite(value) or not 0 < value <= 100:
            raise BadInput(f"--frontier: {item} is not a budget: each must be above 0 and at most 100 (percent of "
                           "requests that may miss the TTFT target for lack of capacity)")
        if value in budgets:
            raise BadInput(f"--frontier: {item} is given twice")
        budgets.append(value)
    return sorted(budgets)


def budget_text(budget: float) -> str:
    """A budget as it is written into the policy, in plain decimals (YAML reads '1e-05' as a string):
    0.1 -> '0.1', 4.0 -> '4', 1e-05 -> '0.00001'."""
    text = format(Decimal(repr(budget)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


_TOP_KEY = re.compile(r"^[^\s#-][^:]*:")
_SLO_LINE = re.compile(r"^slo:[ \t]*(#.*)?$")
_BUDGET_LINE = re.compile(r"^(?P<indent>[ \t]+)capacity_miss_budget_pct:(?P<space>[ \t]*)(?P<value>[^#\n]*?)"
                          r"(?P<comment>[ \t]+#.*)?$")


def policy_text_with_budget(text: str, budget: float) -> str:
    """The policy's own text with ``slo.capacity_miss_budget_pct`` set to ``budget``; every other
    line (comments included) as it was. The value is replaced on its line; a policy without the
    field gets it as the first line of its ``slo`` block, and one without an ``slo`` block gets the
    block at the end. A policy whose ``slo`` section is written another way (flow style) is bad input:
    the diff would not be one an operator can read."""
    lines = text.splitlines(keepends=True)
    value = budget_text(budget)
    slo = next((i for i, line in enumerate(lines) if _SLO_LINE.match(line.rstrip("\r\n"))), None)
    if slo is None:
        if any(line.startswith("slo:") for line in lines):
            raise BadInput("--frontier: the policy's slo section is not a block of 'key: value' lines; write "
                           f"it as one (slo:, then '  {BUDGET_KEY}: ...' below it)")
        tail = "" if not lines or lines[-1].endswith("\n") else "\n"
        return text + tail + f"slo:\n  {BUDGET_KEY}: {value}\n"
    end = next((j for j in range(slo + 1, len(lines)) if _TOP_KEY.match(lines[j])), len(lines))
    keys = [j for j in range(slo + 1, end) if lines[j].strip() and not lines[j].strip().startswith("#")]
    indent = lines[keys[0]][: len(lines[keys[0]]) - len(lines[keys[0]].lstrip())] if keys else "  "
    for j in keys:
        found = _BUDGET_LINE.match(lines[j].rstrip("\r\n"))
        if found and found.group("indent") == indent:
            newline = lines[j][len(lines[j].rstrip("\r\n")):]
            lines[j] = (f"{indent}{BUDGET_KEY}:{found.group('space') or ' '}{value}"
                        f"{found.group('comment') or ''}{newline}")
            return "".join(lines)
    lines.insert(slo + 1, f"{indent}{BUDGET_KEY}: {value}\n")
    return "".join(lines)


def policy_with_budget(text: str, source: str, budget: float) -> tuple[Policy, str]:
    """The policy (and its text) with that budget, parsed as ``simulate`` would parse the file:
    a frontier point is a single ``simulate`` of exactly this text. Checked: only the budget moved."""
    new_text = policy_text_with_budget(text, budget)
    policy = parse_policy(new_text, source)
    before = parse_policy(text, source).model_dump(mode="json")
    after = policy.model_dump(mode="json")
    after_slo = dict(after["slo"])
    if after_slo.pop(BUDGET_KEY) != budget or {**after, "slo": after_slo} != {
            **before, "slo": {k: v for k, v in before["slo"].items() if k != BUDGET_KEY}}:
        raise BadInput(f"--frontier: {source}: setting slo.{BUDGET_KEY} to {budget_text(budget)} in the "
                       "policy's text changed something else; write the slo section as a plain block")
    return policy, new_text


def policy_diff(text: str, source: str, budget: float) -> str:
    """The unified diff that sets the budget in the policy file (empty when it is already set)."""
    new_text = policy_text_with_budget(text, budget)
    return "".join(difflib.unified_diff(text.splitlines(keepends=True), new_text.splitlines(keepends=True),
                                        fromfile=source, tofile=source))


# ------------------------------------------------------------------------------------- the replays

def run_points(trace: Trace, factor: float, policies: dict[float, Policy], *, seed: int, warmup_s: float,
               sweep: bool, skip: frozenset[str], first: float,
               progress: Callable[[str, float], None] | None = None,
               workers: int | None = None) -> tuple[dict[float, dict[str, Any]], dict[str, Run]]:
    """Replay ours once per budget and, once, the references not in ``skip``.

    The references are ``backtest(compare=True)``'s, so that whatever ``--compare`` replays the
    frontier replays too; that call also replays ours at the budget ``first`` (the policy's own
    budget when it is in the list), which is that point. The other budgets are replayed by
    ``workers - 1`` forked workers (default: the CPUs available) while this process does the
    references; when it is done, it takes the budgets no worker has started (the scheme of
    ``backtest``'s own parallel path). Returns (budget -> our summary, the backtest's runs).
    """
    columns = request_columns(trace, policies[first])
    todo = deque(b for b in policies if b != first)
    if workers is None:
        workers = default_workers()
    workers = min(workers, len(todo) + 1)
    summaries: dict[float, dict[str, Any]] = {}

    def here(budget: float) -> dict[str, Any]:
        return _replay_point(trace, policies[budget], factor, seed, columns, warmup_s, progress, budget)

    def backtest_here() -> dict[str, Run]:
        return backtest(trace, factor, policies[first], compare=True, seed=seed, progress=progress, workers=1,
                        sweep=sweep, skip=skip, warmup_s=warmup_s)

    if workers <= 1 or not can_fork():
        runs = backtest_here()
        while todo:
            budget = todo.popleft()
            summaries[budget] = here(budget)
    else:
        lock = threading.Lock()
        jobs: dict[float, Future] = {}

        def take() -> float | None:
            with lock:
                return todo.popleft() if todo else None

        with ProcessPoolExecutor(workers - 1, mp_context=mp.get_context("fork"), initializer=_init_worker,
                                 initargs=(trace, policies, factor, seed, columns, warmup_s)) as pool:
            def feed(_finished: Future | None = None) -> None:
                with lock:
                    if not todo:
                        return
                    budget = todo.popleft()
                    try:
                        jobs[budget] = job = pool.submit(_point_in_worker, budget)
                    except BaseException:  # a broken pool: left to this process
                        todo.appendleft(budget)
                        raise
                job.add_done_callback(feed)

            for _ in range(workers - 1):
                feed()
            runs = backtest_here()
            while (left := take()) is not None:
                summaries[left] = here(left)
            for budget, job in jobs.items():
                summaries[budget] = job.result()
    summaries[first] = runs["ours"].summary
    return {b: summaries[b] for b in sorted(summaries)}, runs


def _replay_point(trace: Trace, policy: Policy, factor: float, seed: int, columns: RequestColumns,
                  warmup_s: float, progress: Callable[[str, float], None] | None, budget: float) -> dict[str, Any]:
    prog = None if progress is None else (lambda f: progress(f"ours at budget {budget_text(budget)}%", f))
    run = run_one("ours", trace, policy, CoreController(policy, False, trace.start_epoch_s), factor, seed, prog,
                  columns, warmup_s)
    return run.summary


_worker_args: tuple[Trace, dict[float, Policy], float, int, RequestColumns, float] | None = None


def _init_worker(trace: Trace, policies: dict[float, Policy], factor: float, seed: int, columns: RequestColumns,
                 warmup_s: float) -> None:
    global _worker_args
    _worker_args = (trace, policies, factor, seed, columns, warmup_s)


def _point_in_worker(budget: float) -> dict[str, Any]:
    assert _worker_args is not None, "_point_in_worker runs in a worker started by run_points()"
    trace, policies, factor, seed, columns, warmup_s = _worker_args
    return _replay_point(trace, policies[budget], factor, seed, columns, warmup_s, None, budget)


# ------------------------------------------------------------------------------ judging the points

def point_json(summary: dict[str, Any], policy: Policy, budget: float, trace_info: dict[str, Any],
               references: dict[str, dict[str, Any]], warmup_s: float) -> dict[str, Any]:
    """One point: ``simulate --json`` of the policy with that budget (built by the same function,
    ``results_json``, with the references as its cache gives them), without the keys every point
    shares (``SHARED_KEYS``, printed once), with ``capacity_miss_budget_pct`` first."""
    ours = Run("ours", cast(SimResult, None), summary)  # results_json reads the summaries alone
    full = results_json({"ours": ours}, policy, trace_info, summary["wall_s"], references, warmup_s)
    return {BUDGET_KEY: budget, **{k: v for k, v in full.items() if k not in SHARED_KEYS}}


def reference_of(summary: dict[str, Any], policy: Policy, trace_info: dict[str, Any],
                 references: dict[str, dict[str, Any]], warmup_s: float) -> dict[str, Any]:
    """``reference`` exactly as ``simulate --compare --json`` builds it."""
    return results_json({"ours": Run("ours", cast(SimResult, None), summary)}, policy, trace_info, 0.0, references,
                        warmup_s)["reference"]


def dominated_by_ours(point: dict[str, Any], others: list[dict[str, Any]]) -> float | None:
    """The budget of another of our points that reaches at least this point's SLO for fewer
    node-hours (the ties of docs/interfaces.md's "HPA frontier"), the cheapest; or None."""
    bar = COST_TIE * point["node_hours"]
    found = [o for o in others if o is not point and o["slo_attainment"] >= point["slo_attainment"] - SLO_TIE
             and o["node_hours"] < bar]
    return min(found, key=lambda o: o["node_hours"])[BUDGET_KEY] if found else None


def money(point: dict[str, Any], policy: Policy) -> dict[str, Any]:
    """The saving against always-on in money, at the policy's prices (the ledger's arithmetic,
    docs/ledger.md, done here on the backtest's node-hours): a node-hour not run saves (active W - the
    stopped state's W) x PUE / 1000 x price per kWh + the node-hour fee; fixed costs are paid either
    way. Per month: over the scored span, x 730 h / span (the ledger's month). E.g. the default
    prices: (240 - 3) W x 1.3 / 1000 x 0.15 USD = 0.0462 USD per node-hour not run."""
    cost = policy.cost
    stopped = str(policy.actuator.power_state_when_stopped)
    active_w, stopped_w = _exact(cost.node_power_active_w), _exact(getattr(cost, f"node_power_{stopped}_w"))
    price, pue, fee = _exact(cost.energy_price_per_kwh), _exact(cost.pue), _exact(cost.node_hour_fee)
    per_node_hour = (active_w - stopped_w) * pue / 1000 * price + fee
    baseline_per_node_hour = active_w * pue / 1000 * price + fee
    baseline = _exact(point["baseline_node_hours"])
    saved = baseline - _exact(point["node_hours"])
    span_h = _exact(scored_hours(point, policy))
    month = HOURS_PER_MONTH / span_h if span_h > 0 else Fraction(0)
    return {
        "currency": cost.currency,
        "stopped_power_state": stopped,
        "saving_variable": round(float(saved * per_node_hour), 2),
        "saving_variable_per_month": round(float(saved * per_node_hour * month), 2),
        "baseline_variable_per_month": round(float(baseline * baseline_per_node_hour * month), 2),
    }


def _exact(x: float) -> Fraction:
    """A number as the decimal it was written as (0.15 -> 3/20), as the ledger's ``cost.exact``."""
    return Fraction(Decimal(repr(x)))


def judge(points: list[dict[str, Any]], policy: Policy) -> None:
    """Adds to each point: ``money``, ``slo_gap_vs_static_pp`` (from its verdict),
    ``dominated_by_budget`` (another of ours) and ``non_dominated`` (by none of ours, HPA or a peer)."""
    for p in points:
        p["money"] = money(p, policy)
        p["dominated_by_budget"] = dominated_by_ours(p, points)
        p["non_dominated"] = p["dominated_by_budget"] is None and not p["verdict"]["dominated_by"]


def _ref_saving(ref: dict[str, Any], name: str) -> float | None:
    r = ref.get(name)
    return None if not r else r["savings_pct"]


def recommend(points: list[dict[str, Any]], ref: dict[str, Any], slo_bar_pp: float = SLO_BAR_PP
              ) -> tuple[dict[str, Any] | None, str]:
    """The budget that saves the most node-hours within the SLO's bar (SLO attainment at most
    ``slo_bar_pp`` below always-on's; the smaller budget on a tie), with the sentence that says
    so; None (and the sentence why) when no point is within the bar or none within it saves
    anything."""
    within = [p for p in points if p["verdict"]["slo_gap_vs_static_pp"] <= slo_bar_pp + 1e-9]
    outer = _outer_bound(ref)
    if not within:
        low = points[0]
        return None, (f"no budget in the list keeps SLO attainment within {slo_bar_pp:g} pp of always-on: the "
                      f"smallest, {budget_text(low[BUDGET_KEY])}%, is {low['verdict']['slo_gap_vs_static_pp']:.3f} pp "
                      f"below; try smaller budgets{outer}")
    best = max(within, key=lambda p: (p["savings_pct"], -p[BUDGET_KEY]))
    if best["savings_pct"] <= 0:
        return None, (f"no budget in the list saves node-hours within the SLO's {slo_bar_pp:g} pp: every budget "
                      f"up to {budget_text(max(p[BUDGET_KEY] for p in within))}% keeps the ceiling on; try larger "
                      f"budgets{outer}")
    m = best["money"]
    reason = (f"at the SLO's {slo_bar_pp:g} pp, budget {budget_text(best[BUDGET_KEY])}% saves "
              f"{best['savings_pct']:.2f}% of node-hours ({m['saving_variable_per_month']:,.2f} {m['currency']} a month "
              f"of variable cost) at {best['verdict']['slo_gap_vs_static_pp']:.3f} pp below always-on{outer}")
    if best["verdict"]["dominated_by"]:
        reason += ("; a setting of " + " and of ".join(best["verdict"]["dominated_by"])
                   + " reaches that SLO for fewer node-hours")
    return {BUDGET_KEY: best[BUDGET_KEY], "reason": reason}, reason


def _outer_bound(ref: dict[str, Any]) -> str:
    rate = _ref_saving(ref, "oracle_rate")
    if rate is not None:
        return f"; the rate oracle saves {rate:.2f}%"
    return f"; the oracle (clairvoyant, the outer bound) saves {ref['oracle']['savings_pct']:.2f}%"


def warnings_for(points: list[dict[str, Any]], policy: Policy, warmup_s: float) -> list[str]:
    """When not to trust the frontier: too short (less than a week scored: a week's peaks are not
    in it), too cold (less than half the scored time has a week of the core's memory behind it:
    the risk's three hours of recent rises and the week's tail), too few requests (0.5 pp is under 50 of them)."""
    p = points[0]
    out: list[str] = []
    scored_h = scored_hours(p, policy)
    if scored_h < WEEK_H:
        length = f"{scored_h / 24:.1f} days" if scored_h >= 48 else f"{scored_h:.1f} hours"
        out.append(f"too short: {length} scored, less than a week; a week's peaks (weekdays and "
                   "weekend, the core's week of memory) are not in it, so the budget may not hold over one")
    warm_h = max(0.0, scored_h - max(0.0, WEEK_H - warmup_s / 3600.0))
    if warm_h < scored_h / 2:
        out.append(f"too cold: only {warm_h:.0f} of the {scored_h:.0f} scored hours follow a week of replayed "
                   "memory (the risk's three hours of recent rises and the week's tail); give a longer trace or --warmup-hours")
    if p["requests"] < MIN_REQUESTS:
        out.append(f"too few requests: {p['requests']:,} scored, so {SLO_BAR_PP:g} pp is "
                   f"{p['requests'] * SLO_BAR_PP / 100:.0f} requests; one burst moves a point across the bar")
    return out


def scored_hours(point: dict[str, Any], policy: Policy) -> float:
    """The hours a point scored: its always-on node-hours over the ceiling's nodes."""
    return point["baseline_node_hours"] / (policy.fleet.ceiling_groups * policy.fleet.group_size_nodes)


def frontier_json(points: list[dict[str, Any]], reference: dict[str, Any], policy: Policy, policy_text: str,
                  source: str,
                  trace_info: dict[str, Any], model: dict[str, Any], warmup_s: float, scored_from: str,
                  wall_s: float) -> dict[str, Any]:
    """``simulate --frontier --json``: INTERFACES' ``points``, ``reference`` and ``recommended``,
    and what the text output prints (``advice``, ``warnings``) and the keys every point shares."""
    recommended, advice = recommend(points, reference)
    if recommended is not None:
        recommended["policy_diff"] = policy_diff(policy_text, source, recommended[BUDGET_KEY])
    return {
        "points": points,
        "reference": reference,
        "recommended": recommended,
        "advice": advice,
        "warnings": warnings_for(points, policy, warmup_s),
        "trace": trace_info,
        "model": model,
        "warmup_hours": warmup_s / 3600.0,
        "scored_from": scored_from,
        "wall_s": round(wall_s, 3),
    }
