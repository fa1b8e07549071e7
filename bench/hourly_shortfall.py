"""Where ours' shortfall against the rate oracle lies by hour of day: mean active groups of ours and of
the rate oracle for each hour of the day, and each one's capacity misses above always-on's.

    .venv/bin/python bench/hourly_shortfall.py [--trace servegen-m-small] [--seed 0] [--pu 0.35]
        [--ceiling 8] [--traces /work/shared/traces]

Replays ours, the rate oracle and always-on once each (``run_one``, as ``simulate --compare`` does)
on the default policy at the ceiling asked (``bench/cv_matrix.py``'s ``with_ceiling``), and prints
one line per hour of day over all the trace's days: the mean active groups (ready, starting or
draining) of each, their difference, and the capacity misses each adds to always-on's. The share of
the difference that falls in a set of hours says where the node-hours are lost (docs/matrix.md,
"Why not more").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import yaml  # noqa: E402
from cv_matrix import trace_path, with_ceiling  # noqa: E402

from autoscaler.policy.model import Policy  # noqa: E402
from autoscaler.sim.backtest import (  # noqa: E402
    _reference_controller,
    met_and_capacity_misses,
    prepare_trace,
    request_columns,
    run_one,
)
from autoscaler.sim.controllers import CoreController  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default="/work/shared/traces")
    ap.add_argument("--trace", default="servegen-m-small")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pu", type=float, default=0.35)
    ap.add_argument("--ceiling", type=int, default=8)
    args = ap.parse_args()
    data = yaml.safe_load((ROOT / "policies/default.yaml").read_text())
    policy = Policy.model_validate(with_ceiling(data, args.ceiling))
    trace, factor, _ = prepare_trace(trace_path(Path(args.traces), args.trace), "auto", policy, args.pu, args.seed)
    columns = request_columns(trace, policy)
    runs = {}
    for name in ("ours", "oracle_rate", "static"):
        controller = (CoreController(policy, False, trace.start_epoch_s) if name == "ours"
                      else _reference_controller(name, trace, policy))
        runs[name] = run_one(name, trace, policy, controller, factor, args.seed, None, columns, 0.0)
    hours = int(trace.span_s[1] // 3600) + 1

    def active(run) -> np.ndarray:
        r = run.result
        h = (r.tick_t // 3600).astype(int)
        total, count = np.zeros(hours), np.zeros(hours)
        np.add.at(total, h, r.tick_ready + r.tick_starting + r.tick_draining)
        np.add.at(count, h, 1)
        return total / np.maximum(count, 1)

    def misses(run) -> np.ndarray:
        _, m = met_and_capacity_misses(run.result, policy)
        out = np.zeros(hours)
        np.add.at(out, (trace.t_s // 3600).astype(int), m)
        return out

    ours, rate = active(runs["ours"]), active(runs["oracle_rate"])
    m_ours, m_rate, m_static = misses(runs["ours"]), misses(runs["oracle_rate"]), misses(runs["static"])
    hod = np.arange(hours) % 24
    print(f"{args.trace} seed {args.seed} peak use {args.pu}, {args.ceiling} groups: by hour of day (UTC)")
    print("hour  ours groups  rate oracle groups  difference  ours' added misses  rate oracle's added misses")
    diff = np.zeros(24)
    for d in range(24):
        s = hod == d
        diff[d] = (ours[s] - rate[s]).mean()
        print(f"{d:4d}  {ours[s].mean():11.2f}  {rate[s].mean():18.2f}  {diff[d]:10.2f}  "
              f"{int((m_ours - m_static)[s].sum()):18,d}  {int((m_rate - m_static)[s].sum()):26,d}")
    night = [23, 0, 1, 2, 3, 4]
    print(f"\nthe difference in group-hours a day: {diff.sum():.1f}; from 23:00 to 05:00: {diff[night].sum():.1f} "
          f"({100 * diff[night].sum() / diff.sum():.0f}%)")
    for name, run in runs.items():
        s = run.summary
        print(f"{name}: {s['node_hours']:,.1f} node-hours, SLO attainment {100 * s['slo_attainment']:.3f}%, "
              f"{s['capacity_misses']:,} capacity misses")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
