"""What a simple reactor reaches: the oracle's per-minute need followed without foreknowledge, a
bound on the oracle's bar for that family of reactors (not for every controller).

The oracle (docs/interfaces.md) starts each group one start-up time *before* a stretch of minutes
that needs it. This replays the same per-minute need (the busiest moment of each minute with
unlimited slots, in whole groups, known at the minute's start) with the start at the stretch's
first minute instead, and each group drained only after H minutes without need (stretches at most
H apart merged), with S spare groups above the need (0 or 1). For each (H, S) it reports node-hours
against the oracle's and SLO attainment against always-on's, on the same arrivals with the real
replay. The replay drains only ready groups: a drain planned while its group is still starting
(H under a start-up) is ignored, so short holds cost more than the schedule says.

    nice -n 5 .venv/bin/python bench/reactive_bound.py --only servegen-m-small,servegen-m-mid \
        --seeds 0 --pu 0.35,0.5,0.7 [--ceiling 5] [--holds 0,15,60,240,1440] [--spares 0,1]

If no (H, S) keeps the SLO within 0.5 pp of always-on at node-hours within 1.10 x the oracle's,
no reactor of this family meets that cell's targets, even tuned for the cell after the fact.

``--need rate`` (ServeGen only) follows the rate oracle's need instead (docs/interfaces.md, "Rate
oracle": the largest of eight other draws' per-minute need, the future rate and shape of each
window but not its draws), known at each minute's start: a reactor that reads each window's rate
the moment it changes, exactly, which no controller that counts arrivals can. Its bar is the rate
oracle's node-hours (issue 33's target 2): a cell where no (H, S) keeps the SLO within 0.5 pp at
node-hours at or under the rate oracle's is out of reach of such a reactor, tuned after the fact.
The summed saving of each cell's cheapest (H, S) within the SLO, over the cells, set against the
rate oracle's summed saving, bounds issue 33's target 1 for this family.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cv_matrix import trace_path, with_ceiling  # noqa: E402

from autoscaler.policy import Policy  # noqa: E402
from autoscaler.sim.backtest import prepare_trace, request_columns, run_one  # noqa: E402
from autoscaler.sim.controllers import (  # noqa: E402
    OracleController,
    RateOracleController,
    StaticController,
    groups_needed,
    oracle_schedule,
    rate_oracle_demand,
)


class ReactiveController:
    """Group k starts at the first minute of each stretch that needs k groups (ready a start-up
    later) and drains ``hold_min`` minutes after the stretch ends; stretches at most that far apart merge.
    ``spare`` groups more than the minute needs (within the ceiling) are kept on throughout."""

    uses_signals = False

    def __init__(self, trace, policy: Policy, hold_min: int, spare: int = 0, needed: np.ndarray | None = None):
        self.period_s = 15.0
        t0 = trace.span_s[0]
        if needed is None:
            _, needed = oracle_schedule(trace, policy)
        needed = needed + spare
        names = policy.fleet.group_names()
        self.actions: list[tuple[float, str, str]] = []
        for k in range(1, policy.fleet.ceiling_groups + 1):
            on = needed >= k
            on[0] = True
            stretches: list[list[int]] = []
            idx = np.flatnonzero(np.diff(np.concatenate([[0], on.astype(np.int8), [0]])))
            for s, e in zip(idx[::2].tolist(), idx[1::2].tolist()):
                if stretches and s - stretches[-1][1] <= hold_min:
                    stretches[-1][1] = e
                else:
                    stretches.append([s, e])
            for i, (s, e) in enumerate(stretches):
                if i > 0:
                    self.actions.append((t0 + s * 60.0, "start", names[k - 1]))
                if e + hold_min < len(on):
                    self.actions.append((t0 + (e + hold_min) * 60.0, "drain", names[k - 1]))
        self.actions.sort()
        self.next = 0

    tick = OracleController.tick
    on_ready = OracleController.on_ready


def bound_cell(job: tuple) -> dict:
    """Always-on, the oracle and the reactive schedule at every (hold, spare) on one cell."""
    policy, path, name, seed, pu, holds, need = job
    tr, factor, _ = prepare_trace(path, "auto", policy, pu, seed)
    cols = request_columns(tr, policy)

    def replay(label: str, ctl) -> dict:
        return run_one(label, tr, policy, ctl, factor, seed, None, cols, 0.0).summary

    static = replay("static", StaticController(policy))
    needed = None
    if need == "rate":
        draws = rate_oracle_demand(tr, policy)
        if draws is None:
            raise SystemExit(f"{name}: --need rate needs a ServeGen trace (rate windows)")
        oracle = replay("oracle_rate", RateOracleController(tr, policy, draws))
        minutes = len(oracle_schedule(tr, policy)[1])
        level = draws.max(axis=0)[:minutes]
        needed = groups_needed(np.concatenate([level, np.full(minutes - len(level), level[-1])]), policy)
        bar = 1.0  # node-hours at or under the rate oracle's
    else:
        oracle = replay("oracle", OracleController(tr, policy))
        bar = 1.10
    cells = []
    for h, sp in holds:
        s = replay(f"reactive@{h}+{sp}", ReactiveController(tr, policy, h, sp, needed))
        cells.append({"hold_min": h, "spare": sp, "x_oracle": round(s["node_hours"] / oracle["node_hours"], 4),
                      "gap_pp": round(100 * (static["slo_attainment"] - s["slo_attainment"]), 3),
                      "node_hours": s["node_hours"]})
    ok = [c for c in cells if c["gap_pp"] <= 0.5]
    best = min(ok, key=lambda c: c["x_oracle"]) if ok else None
    return {"trace": name, "seed": seed, "pu": pu, "need": need, "oracle_node_hours": oracle["node_hours"],
            "static_node_hours": static["node_hours"], "oracle_gap_pp": round(
                100 * (static["slo_attainment"] - oracle["slo_attainment"]), 3),
            "static_slo": static["slo_attainment"], "reactive": cells, "best": best,
            "meets": best is not None and best["x_oracle"] <= bar + 1e-9}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="policies/default.yaml")
    ap.add_argument("--traces", default="/work/shared/traces")
    ap.add_argument("--only", default="servegen-m-small,servegen-m-mid")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--pu", default="0.35,0.5,0.7")
    ap.add_argument("--ceiling", type=int, default=None)
    ap.add_argument("--holds", default="0,5,10,15,30,45,60,90,120,240,1440",
                    help="minutes without need before a drain")
    ap.add_argument("--spares", default="0,1", help="groups kept above the need")
    ap.add_argument("--need", choices=("oracle", "rate"), default="oracle",
                    help="follow the oracle's per-minute need (bar: 1.10 x its node-hours) or the rate oracle's "
                         "(bar: its node-hours; ServeGen only)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    data = yaml.safe_load(Path(args.policy).read_text())
    if args.ceiling is not None:
        data = with_ceiling(data, args.ceiling)
    policy = Policy.model_validate(data)
    holds = [(int(h), int(sp)) for sp in args.spares.split(",") for h in args.holds.split(",")]
    jobs = [(policy, trace_path(Path(args.traces), name), name, int(seed), float(pu), holds, args.need)
            for name in args.only.split(",") for seed in args.seeds.split(",") for pu in args.pu.split(",")]
    print("| trace | seed | peak use | oracle node-h | always-on SLO % | the cheapest (hold, spare) within "
          "0.5 pp of always-on: x oracle, gap pp | meets the oracle's bar |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    with mp.get_context("fork").Pool(args.workers) as pool:
        for r in pool.imap(bound_cell, jobs):
            rows.append(r)
            b = r["best"]
            best = f"hold {b['hold_min']} min +{b['spare']}: x{b['x_oracle']:.3f}, {b['gap_pp']:+.3f}" if b else "none"
            print(f"| {r['trace']} | {r['seed']} | {r['pu']} | {r['oracle_node_hours']:,.1f} | "
                  f"{100 * r['static_slo']:.3f} | {best} | {'yes' if r['meets'] else 'no'} |", flush=True)
    bar = "at or under the rate oracle's" if args.need == "rate" else "within 1.10 x the oracle's"
    print(f"\ncells a reactor meets (SLO within 0.5 pp, node-hours {bar}, the best (hold, "
          f"spare) of {len(holds)} for each cell): {sum(r['meets'] for r in rows)} of {len(rows)}")
    static = sum(r["static_node_hours"] for r in rows)
    ref = sum(r["oracle_node_hours"] for r in rows)
    kept = [r for r in rows if r["best"] is not None]
    best = sum(r["best"]["node_hours"] for r in kept)
    print(f"summed saving of always-on's node-hours: the {'rate oracle' if args.need == 'rate' else 'oracle'} "
          f"{100 * (1 - ref / static):.2f}%; each cell's cheapest (hold, spare) within the SLO "
          f"{100 * (1 - best / sum(r['static_node_hours'] for r in kept)):.2f}% over the {len(kept)} cells that have one"
          + (f" (the {'rate oracle' if args.need == 'rate' else 'oracle'} over those: "
             f"{100 * (1 - sum(r['oracle_node_hours'] for r in kept) / sum(r['static_node_hours'] for r in kept)):.2f}%)"
             if len(kept) < len(rows) else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
