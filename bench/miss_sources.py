"""Where ours' SLO budget goes and what holds its groups, against the rate oracle, on ServeGen cells.

    nice -n 10 .venv/bin/python bench/miss_sources.py [--traces DIR] [--only m-small,m-mid,mm-image]
        [--seeds 0] [--pu 0.35,0.5,0.7] [--ceiling N] [--jump 1.5] [--json FILE]
    .venv/bin/python bench/miss_sources.py --summarise FILE   # the totals of a --json output again

The question it answers: why does ours, which spends most of the 0.5 pp budget at five and eight
groups, save less than the rate oracle, which spends a fifth of it? Per cell, ours (every decision
explained), always-on and the rate oracle are replayed as ``simulate --compare`` does, and:

1. **Each one's added capacity misses** (per request, its capacity miss less always-on's: what the
   SLO gap counts) are split by when they arrive:
   - ``return``: within one lead time and a window after a collection gap ends (the traces' all-zero
     windows: hours without a request, then the traffic at once);
   - ``jump``: in a window whose need (the rate oracle's: the busiest minute of the most demanding
     of eight draws of the window's rate and shape) is at least ``--jump`` times the window before's.
     A ServeGen window's rate and inter-arrival spread are set before it starts and only the
     arrivals inside are drawn: the rate oracle knows the jump a window ahead, a causal controller
     sees it as it comes, a ten-minute start-up late;
   - ``other``.
2. **Ours' group-hours above the rate oracle's**, by what held them: the reason of each tick's
   decision, and for a steady hold the bar it failed (the risk in requests above what the budget
   allows, with the budget burning faster than allowed or not; the exceedance risk; the evidence
   floor; the utilisation cap; in a silence, the risk of the traffic's return).

What a jump costs a causal controller is the point: no rule on past signals can start a group ten
minutes before a window whose rate nothing before it shows.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gap_savings import SERVEGEN, add_cell_args, default_policy  # noqa: E402

from autoscaler.core.risk import lead_minutes  # noqa: E402
from autoscaler.policy.model import Policy  # noqa: E402
from autoscaler.sim.backtest import (  # noqa: E402
    _reference_controller,
    met_and_capacity_misses,
    prepare_trace,
    request_columns,
    run_one,
)
from autoscaler.sim.controllers import CoreController  # noqa: E402
from autoscaler.sim.traces import load_trace  # noqa: E402

SOURCES = ("return", "jump", "other")


def arrival_sources(t: np.ndarray, rate: np.ndarray, need: np.ndarray, window_s: float, after_gap_s: float,
                    jump: float) -> np.ndarray:
    """Per arrival time ``t`` (seconds since the trace's start): 0 ``return`` (within ``after_gap_s``
    of the end of a run of zero-rate windows), 1 ``jump`` (its window's need at least ``jump`` x the
    window before's, which is not zero), 2 ``other``. ``rate``, ``need``: each window's.

    E.g. windows of 600 s at rates and needs [2, 0, 0, 2, 6, 6], 900 s after a gap: t = 1,900 (window
    3, 100 s after the gap) is a return, t = 2,700 (window 4, need 3 x window 3's) a jump at 1.5,
    t = 3,100 (window 5, need as window 4's) other."""
    w = np.clip((t // window_s).astype(int), 0, len(rate) - 1)
    gap = rate <= 0
    # the end of each gap: the start of a window with traffic after a zero one
    ends = np.nonzero(~gap[1:] & gap[:-1])[0] + 1
    out = np.full(len(t), 2, dtype=np.int8)
    prev = np.concatenate(([np.nan], need[:-1]))
    with np.errstate(invalid="ignore"):
        jumped = (prev > 0) & (need >= jump * prev)
    out[jumped[w]] = 1
    for e in ends:
        start = e * window_s
        out[(t >= start) & (t < start + after_gap_s)] = 0
    return out


def hold_bar(decision, policy: Policy) -> str:
    """What held a group: the decision's reason, and for a steady hold the bar the drain failed."""
    reason = str(decision.reason)
    if reason != "steady":
        return reason
    inp = decision.inputs
    if "return_risk" in inp:  # a silence's drain (core/decide.py, _silent_surplus): a return's misses too dear
        return "steady: silence, a return's risk"
    util, room = inp.get("utilization_after_scale_down"), max(1.0, inp.get("headroom") or 1.0)
    if util is not None and util * room >= policy.scaling.scale_down.utilization_below:
        return "steady: utilisation cap"
    misses, risk, allowed = inp.get("expected_misses"), inp.get("risk") or {}, inp.get("risk_allowed") or 0.0
    burning = (inp.get("budget_burn") or 0.0) > 1.0
    if misses is not None and misses["share"] > min(allowed, policy.slo.capacity_miss_budget_pct / 100.0):
        return "steady: risk in requests, budget burning" if burning else "steady: risk in requests"
    if risk.get("probability", 0.0) > allowed:
        return "steady: exceedance risk"
    if (inp.get("risk_evidence_floor") or 0.0) > allowed:
        return "steady: evidence floor"
    return "steady: other"


def cell(path: str, policy: Policy, pu: float, seed: int, jump: float) -> dict:
    src = load_trace(path, "auto")
    rate = np.asarray(src.total_rate, dtype=float)
    trace, factor, _ = prepare_trace(path, "auto", policy, pu, seed)
    columns = request_columns(trace, policy)
    core = CoreController(policy, True, trace.start_epoch_s)
    runs = {"ours": run_one("ours", trace, policy, core, factor, seed, None, columns, 0.0)}
    rate_oracle = _reference_controller("oracle_rate", trace, policy)
    for name, controller in (("static", _reference_controller("static", trace, policy)), ("oracle_rate", rate_oracle)):
        runs[name] = run_one(name, trace, policy, controller, factor, seed, None, columns, 0.0)
    # each window's need: the rate oracle's busiest minute in it
    per_window = int(round(src.window_s / 60.0))
    minutes = np.asarray(rate_oracle.demand, dtype=float)
    padded = np.concatenate((minutes, np.zeros(len(rate) * per_window - len(minutes)))) \
        if len(minutes) < len(rate) * per_window else minutes[:len(rate) * per_window]
    need = padded.reshape(len(rate), per_window).max(axis=1)
    t = np.asarray(columns.t_s)
    # a return's misses: within a start-up and the tick that notices it (the lead time), and a window
    lead_s = policy.fleet.startup_expected_s + policy.scaling.tick_interval_s
    sources = arrival_sources(t, rate, need, src.window_s, lead_minutes(lead_s) * 60.0 + src.window_s, jump)
    static = met_and_capacity_misses(runs["static"].result, policy)[1].astype(np.int64)
    row: dict = {"requests": len(t), "arrivals": {s: int((sources == i).sum()) for i, s in enumerate(SOURCES)}}
    for name in ("ours", "oracle_rate"):
        added = met_and_capacity_misses(runs[name].result, policy)[1].astype(np.int64) - static
        row[name] = {"added_misses": int(added.sum()),
                     **{s: int(added[sources == i].sum()) for i, s in enumerate(SOURCES)},
                     "node_hours": round(runs[name].summary["node_hours"], 2)}
    row["static_node_hours"] = round(runs["static"].summary["node_hours"], 2)
    rr = runs["oracle_rate"].result
    oracle_active = rr.tick_ready + rr.tick_starting
    step = policy.scaling.tick_interval_s
    held: Counter = Counter()
    for now, d in core.decisions:
        j = min(int(np.searchsorted(rr.tick_t, now)), len(rr.tick_t) - 1)
        above = d.inputs.get("active", 0) - int(oracle_active[j])
        if above > 0:
            held[hold_bar(d, policy)] += above * step / 3600.0
    row["ours_group_hours_above_rate_oracle"] = {k: round(v, 2) for k, v in held.most_common()}
    return row


def summarise(rows: list[dict]) -> None:
    """The totals over the cells: each source's share of the arrivals and of the added misses, the
    added misses per arrival of each source, and what held ours' group-hours above the rate oracle's."""
    n = sum(r["requests"] for r in rows)
    arrivals = {s: sum(r["arrivals"][s] for r in rows) for s in SOURCES}
    static = sum(r["static_node_hours"] for r in rows)
    print(f"\n{len(rows)} cells, {n:,} requests ({', '.join(f'{s} {100 * arrivals[s] / n:.1f}%' for s in SOURCES)} "
          f"of arrivals). Saved of always-on's node-hours, added misses (of all arrivals; of the source's):")
    for name in ("ours", "oracle_rate"):
        d = {k: sum(r[name][k] for r in rows) for k in ("added_misses", *SOURCES)}
        saved = 100 * (1 - sum(r[name]["node_hours"] for r in rows) / static)
        print(f"  {name}: saves {saved:.2f}%, {d['added_misses']} added misses ({100 * d['added_misses'] / n:.3f} pp): "
              + ", ".join(f"{s} {d[s]} ({100 * d[s] / max(d['added_misses'], 1):.0f}%; "
                          f"{100 * d[s] / max(arrivals[s], 1):.3f}% of its arrivals)" for s in SOURCES))
    held: Counter = Counter()
    for r in rows:
        held.update(r["ours_group_hours_above_rate_oracle"])
    total = sum(held.values())
    print(f"  ours' group-hours above the rate oracle's: {total:.1f}: " + ", ".join(
        f"{k} {v:.1f} ({100 * v / max(total, 1e-9):.0f}%)" for k, v in held.most_common()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cell_args(ap)
    ap.add_argument("--jump", type=float, default=1.5)
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--summarise", metavar="FILE", help="print the totals of a --json output, replaying nothing")
    args = ap.parse_args()
    if args.summarise:
        summarise(json.loads(Path(args.summarise).read_text())["rows"])
        return 0
    policy = default_policy(args.ceiling)
    rows = []
    for short in args.only.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            for pu in (float(p) for p in args.pu.split(",")):
                row = {"trace": short, "seed": seed, "pu": pu,
                       **cell(str(Path(args.traces) / SERVEGEN[short]), policy, pu, seed, args.jump)}
                rows.append(row)
                o, r = row["ours"], row["oracle_rate"]
                print(f"{short} s{seed} {pu}: added misses ours {o['added_misses']} (return {o['return']}, jump "
                      f"{o['jump']}, other {o['other']}), rate oracle {r['added_misses']} (return {r['return']}, "
                      f"jump {r['jump']}, other {r['other']}); node-hours ours {o['node_hours']}, rate oracle "
                      f"{r['node_hours']}, always-on {row['static_node_hours']}", flush=True)
                print("   ours' group-hours above the rate oracle's: " + ", ".join(
                    f"{k} {v}" for k, v in row["ours_group_hours_above_rate_oracle"].items()), flush=True)
    summarise(rows)
    if args.json:
        Path(args.json).write_text(json.dumps({"jump": args.jump, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
