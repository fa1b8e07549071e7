"""Is the error budget's burn calibrated? The core's own count of capacity misses against the true ones.

    .venv/bin/python bench/burn_calibration.py [--traces /work/shared/traces] [--seed 0] [--pu 0.35,0.5,0.7]

The live controller cannot see which requests missed because of capacity; it estimates them each tick
from its signals (core/risk.py ``burn_changes``: arrivals x the share whose queue wait reaches the
TTFT target, while fewer groups than the ceiling allows are ready). A replay knows the truth: every
request's TTFT and queue wait. For each trace this replays ours and prints both, as a share of all
requests:

- ``true``: capacity misses (docs/interfaces.md) of requests that arrived while fewer than the
  ceiling's groups were ready, the misses scaling can cause;
- ``counted``: what the core's estimate added up over the same replay (undecayed);
- ``ratio`` counted / true: 1.0 is calibrated; below 1 the controller believes it spends less of
  the budget than it does, and takes risk the budget does not allow.

The count is read by wrapping ``burn_changes`` for the replay: it does not change any decision.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cv_matrix import SHORT, TRACE_NAMES, trace_path  # noqa: E402

from autoscaler.core.risk import BURN_HALF_LIFE_S  # noqa: E402
from autoscaler.policy.loader import load_policy  # noqa: E402
from autoscaler.sim.backtest import met_and_capacity_misses, prepare_trace, run_one  # noqa: E402
from autoscaler.sim.controllers import CoreController  # noqa: E402

decide_module = importlib.import_module("autoscaler.core.decide")


def measure(path: str, policy, pu: float, seed: int) -> tuple[int, float, float]:
    """(requests, true below-ceiling capacity misses, the core's counted misses)."""
    counted = [0.0]
    original = decide_module.burn_changes

    def counting(memory, policy, now, arrivals_per_s, queued, queue_wait_s, below_ceiling=True):
        changes = original(memory, policy, now, arrivals_per_s, queued, queue_wait_s, below_ceiling)
        if changes:
            before = memory.budget_burn
            if before is None:
                counted[0] += changes["budget_burn"][0]
            else:
                decay = 0.5 ** (max(0.0, now - before[2]) / BURN_HALF_LIFE_S)
                counted[0] += changes["budget_burn"][0] - before[0] * decay
        return changes

    tr, factor, _ = prepare_trace(path, "auto", policy, pu, seed)
    decide_module.burn_changes = counting
    try:
        run = run_one("ours", tr, policy, CoreController(policy, epoch_s=tr.start_epoch_s), factor, seed)
    finally:
        decide_module.burn_changes = original
    r = run.result
    _, capacity_miss = met_and_capacity_misses(r, policy)
    tick = np.clip(np.searchsorted(r.tick_t, tr.t_s, side="right") - 1, 0, len(r.tick_t) - 1)
    below = r.tick_ready[tick] < policy.fleet.ceiling_groups
    return len(tr.t_s), float((capacity_miss & below).sum()), counted[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default=str(ROOT / "policies/default.yaml"))
    ap.add_argument("--traces", default="/work/shared/traces")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pu", default="0.35,0.5,0.7")
    args = ap.parse_args()
    policy = load_policy(args.policy).policy
    root = Path(args.traces)
    names = TRACE_NAMES if all((root / t).is_dir() for t in TRACE_NAMES) else \
        tuple(sorted(p.name for p in root.iterdir() if p.is_dir()))
    print("| trace | peak use | requests | true % | counted % | ratio |")
    print("|---|---|---|---|---|---|")
    for name in names:
        for pu in (float(p) for p in args.pu.split(",")):
            n, true, counted = measure(trace_path(root, name), policy, pu, args.seed)
            ratio = f"{counted / true:.2f}" if true else "-"
            print(f"| {SHORT.get(name, name)} | {pu} | {n:,} | {100 * true / n:.3f} | {100 * counted / n:.3f} | {ratio} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
