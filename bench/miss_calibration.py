"""Is the drain's risk in requests calibrated? Each drain's expected added misses against the true ones.

    .venv/bin/python bench/miss_calibration.py [--traces /work/shared/traces] [--only servegen-m-small]
        [--seed 0] [--pu 0.35,0.5,0.7] [--policy policies/default.yaml]

A drain is taken when the capacity misses it is expected to add, per arrival over one lead time, are
within what the budget allows (core/risk.py ``expected_miss_share``; docs/core.md). A replay knows
the truth. For every drain ours takes it pairs two replays of the same arrivals, ours and always-on,
and counts over the requests that arrive within one lead time after the drain:

- ``expected``: the drain's ``inputs.expected_misses.share`` x those arrivals;
- ``true``: ours' capacity misses among them less always-on's (what scaling added: a burst that
  swamps the whole fleet misses in both);
- ``ratio`` true / expected, summed over the drains: 1.0 is calibrated; above 1 the core believes a
  drain costs less than it does. The windows of drains closer than a lead time overlap, and a
  later drain's misses are counted in both: a bound from above, not a split.

A drain in a silence (core/risk.py ``return_risk``; no arrival for ``scale_down.silence_s``) stakes
the misses a return of the traffic would add against always-on over one lead time: for each return
that followed such drains, ``expected`` is the last (deepest) drain's ``inputs.return_risk.misses``
and ``true`` ours' capacity misses less always-on's among the requests of the lead time after the
first arrival (the return). Printed after the table.

Only ``expected_misses`` and ``return_risk`` are read from the decisions (replayed with ``keep_decisions``): no decision
changes. Results: docs/core.md ("Is the risk in requests calibrated?").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cv_matrix import SHORT, TRACE_NAMES, trace_path  # noqa: E402

from autoscaler.core import Action  # noqa: E402
from autoscaler.policy.loader import load_policy  # noqa: E402
from autoscaler.sim.backtest import met_and_capacity_misses, prepare_trace, run_one  # noqa: E402
from autoscaler.sim.controllers import CoreController, StaticController  # noqa: E402
from autoscaler.sim.engine import request_columns  # noqa: E402


def calibrate(path: str, policy, pu: float, seed: int) -> dict:
    """Per cell: drains judged in requests, their expected and true added misses, and the ratio."""
    tr, factor, _ = prepare_trace(path, "auto", policy, pu, seed)
    columns = request_columns(tr, policy)
    ours = CoreController(policy, True, tr.start_epoch_s)
    run = run_one("ours", tr, policy, ours, factor, seed, None, columns, 0.0)
    base = run_one("static", tr, policy, StaticController(policy), factor, seed, None, columns, 0.0)
    _, miss_ours = met_and_capacity_misses(run.result, policy)
    _, miss_base = met_and_capacity_misses(base.result, policy)
    t = tr.t_s
    expected = true = 0.0
    drains = 0
    returns: dict[int, float] = {}  # the return's first request -> the deepest silence drain's stake
    lead = 0.0
    for now, d in ours.decisions:
        if d.action is not Action.SCALE_DOWN:
            continue
        if d.inputs.get("return_risk"):
            lead = float(d.inputs["lead_time_s"]) + policy.scaling.tick_interval_s
            returns[int(np.searchsorted(t, now))] = d.inputs["return_risk"]["misses"]
        if not d.inputs.get("expected_misses"):
            continue
        lead = float(d.inputs["lead_time_s"]) + policy.scaling.tick_interval_s
        lo, hi = np.searchsorted(t, [now, now + lead])
        expected += d.inputs["expected_misses"]["share"] * (hi - lo)
        true += float(miss_ours[lo:hi].sum()) - float(miss_base[lo:hi].sum())
        drains += 1
    ret_true = 0.0
    for lo in returns:
        hi = int(np.searchsorted(t, t[lo] + lead)) if lo < len(t) else lo
        ret_true += float(miss_ours[lo:hi].sum()) - float(miss_base[lo:hi].sum())
    return {"drains": drains, "expected": expected, "true": true,
            "ratio": true / expected if expected > 0 else None,
            "returns": len(returns), "return_expected": sum(returns.values()), "return_true": ret_true}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default="/work/shared/traces")
    ap.add_argument("--only", default="servegen-m-small,servegen-m-mid,servegen-mm-image")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pu", default="0.35,0.5,0.7")
    ap.add_argument("--policy", default=str(ROOT / "policies/default.yaml"))
    args = ap.parse_args()
    policy = load_policy(args.policy).policy
    root = Path(args.traces)
    print("| trace | peak use | drains judged in requests | expected added misses | true added misses | true / expected |")
    print("|---|---|---|---|---|---|")
    tot_e = tot_t = 0.0
    silences = []
    for name in TRACE_NAMES:
        if name not in args.only.split(","):
            continue
        for pu in (float(p) for p in args.pu.split(",")):
            c = calibrate(trace_path(root, name), policy, pu, args.seed)
            tot_e += c["expected"]
            tot_t += c["true"]
            ratio = "-" if c["ratio"] is None else f"{c['ratio']:.2f}"
            print(f"| {SHORT[name]} | {pu} | {c['drains']} | {c['expected']:.1f} | {c['true']:.0f} | {ratio} |",
                  flush=True)
            silences.append((SHORT[name], pu, c))
    print(f"\nall: expected {tot_e:.1f}, true {tot_t:.0f}, true / expected "
          f"{(tot_t / tot_e if tot_e else float('nan')):.2f}")
    print("\n| trace | peak use | returns after a silence drain | misses staked (deepest drain) | true added misses |")
    print("|---|---|---|---|---|")
    for short, pu, c in silences:
        print(f"| {short} | {pu} | {c['returns']} | {c['return_expected']:.1f} | {c['return_true']:.0f} |")
    e, tr = sum(c["return_expected"] for *_, c in silences), sum(c["return_true"] for *_, c in silences)
    print(f"\nreturns: staked {e:.1f}, true {tr:.0f}, true / staked {(tr / e if e else float('nan')):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
