"""Where the rate oracle's saving lies: inside a ServeGen trace's collection gaps or outside them.

    nice -n 10 .venv/bin/python bench/gap_savings.py [--traces DIR] [--only m-small,m-mid] [--seeds 0]
        [--pu 0.35,0.5,0.7] [--ceiling N] [--json FILE]

A ServeGen trace's all-zero windows are gaps in its collection, not idle time (the traces' README;
``RateTrace.gap_windows``): no request arrives for hours. The rate oracle knows the next windows'
rate, so it drains a group at a gap's first minute and starts it again a start-up before the gap
ends; a causal controller sees only that nothing arrives. Per cell (trace, seed, peak use), ours and
the rate oracle are replayed (``run_one``, as ``simulate --compare`` does) and each one's saving
of always-on's group-hours is split by the window each tick falls in: a gap window or not. The
totals say how much of the rate oracle's lead over ours is the gaps'.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import yaml  # noqa: E402
from cv_matrix import with_ceiling  # noqa: E402

from autoscaler.policy.model import Policy  # noqa: E402
from autoscaler.sim.backtest import _reference_controller, prepare_trace, request_columns, run_one  # noqa: E402
from autoscaler.sim.controllers import CoreController  # noqa: E402
from autoscaler.sim.traces import load_trace  # noqa: E402

SERVEGEN = {"m-small": "servegen-m-small", "m-mid": "servegen-m-mid", "mm-image": "servegen-mm-image"}


def split_saving(run, gap: np.ndarray, window_s: float, ceiling: int) -> tuple[float, float]:
    """Group-hours saved against ``ceiling`` groups always on, (in gap windows, outside them)."""
    t = run.result.tick_t
    active = run.result.tick_ready + run.result.tick_starting + run.result.tick_draining
    step = np.diff(t, append=t[-1] + (t[-1] - t[-2] if len(t) > 1 else 0.0))
    saved = (ceiling - active) * step / 3600.0
    window = np.clip((t // window_s).astype(int), 0, len(gap) - 1)
    inside = gap[window]
    return float(saved[inside].sum()), float(saved[~inside].sum())


def add_cell_args(ap: argparse.ArgumentParser) -> None:
    """The cells' options of a ServeGen bench (this one, miss_sources.py): the traces' folder, which
    traces, seeds, peak uses and the fleet's ceiling."""
    ap.add_argument("--traces", default="/work/shared/traces")
    ap.add_argument("--only", default="m-small,m-mid,mm-image")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--pu", default="0.35,0.5,0.7")
    ap.add_argument("--ceiling", type=int, default=None)


def default_policy(ceiling: int | None) -> Policy:
    """The shipped default policy, at ``ceiling`` groups when given (cv_matrix's ``with_ceiling``)."""
    data = yaml.safe_load((ROOT / "policies/default.yaml").read_text())
    if ceiling is not None:
        data = with_ceiling(data, ceiling)
    return Policy.model_validate(data)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cell_args(ap)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    policy = default_policy(args.ceiling)
    ceiling = policy.fleet.ceiling_groups
    rows = []
    for short in args.only.split(","):
        path = str(Path(args.traces) / SERVEGEN[short])
        src = load_trace(path, "auto")
        gap = np.asarray(src.total_rate) <= 0
        for seed in (int(s) for s in args.seeds.split(",")):
            for pu in (float(p) for p in args.pu.split(",")):
                trace, factor, _ = prepare_trace(path, "auto", policy, pu, seed)
                columns = request_columns(trace, policy)
                ours = run_one("ours", trace, policy, CoreController(policy, False, trace.start_epoch_s), factor, seed,
                               None, columns, 0.0)
                rate = run_one("oracle_rate", trace, policy, _reference_controller("oracle_rate", trace, policy),
                               factor, seed, None, columns, 0.0)
                row = {"trace": short, "seed": seed, "pu": pu, "gap_windows": int(gap.sum()), "windows": len(gap),
                       "always_on_group_hours": ceiling * (trace.span_s[1] - trace.span_s[0]) / 3600.0}
                for name, run in (("ours", ours), ("oracle_rate", rate)):
                    inside, outside = split_saving(run, gap, src.window_s, ceiling)
                    row[name] = {"saved_in_gaps": round(inside, 2), "saved_outside": round(outside, 2)}
                rows.append(row)
                print(f"{short} seed {seed} pu {pu}: group-hours saved in gaps / outside: ours "
                      f"{row['ours']['saved_in_gaps']:.1f} / {row['ours']['saved_outside']:.1f}, rate oracle "
                      f"{row['oracle_rate']['saved_in_gaps']:.1f} / {row['oracle_rate']['saved_outside']:.1f}",
                      flush=True)
    tot = {n: {k: sum(r[n][k] for r in rows) for k in ("saved_in_gaps", "saved_outside")} for n in ("ours", "oracle_rate")}
    base = sum(r["always_on_group_hours"] for r in rows)
    print(f"\n{len(rows)} cells, {base:,.0f} always-on group-hours. Saved in gaps / outside them: ours "
          f"{tot['ours']['saved_in_gaps']:.1f} / {tot['ours']['saved_outside']:.1f}, rate oracle "
          f"{tot['oracle_rate']['saved_in_gaps']:.1f} / {tot['oracle_rate']['saved_outside']:.1f}. Outside the gaps "
          f"ours gets {100 * tot['ours']['saved_outside'] / max(tot['oracle_rate']['saved_outside'], 1e-9):.0f}% of the "
          f"rate oracle's saving; in all {100 * sum(tot['ours'].values()) / max(sum(tot['oracle_rate'].values()), 1e-9):.0f}%.")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "totals": tot, "always_on_group_hours": base}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
