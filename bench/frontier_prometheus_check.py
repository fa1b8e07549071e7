"""The frontier on a Prometheus history of the whole 14-day trace equals single `simulate` runs
(issue 37's check at full length; tests/test_frontier.py runs the same check on the first day).

    .venv/bin/python bench/frontier_prometheus_check.py [--hours 336] [--budgets 0.4,1]

Builds the recorded counters of the vendored ServeGen trace's first ``--hours`` (g1's worker's three
counters every 15 s, as docs/backtest-from-prometheus.md makes them), serves them from a real
Prometheus (Debian's, as the tests start it, stopped by its PID at the end), runs `simulate
--from-prometheus ... --frontier BUDGETS --compare --json` and, per budget, a single `simulate
--compare --json` of the policy with that budget, and compares every key but the wall times.
Exit 0 when every point equals its single run. Prints the times taken.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autoscaler.sim import frontier as fr  # noqa: E402
from tests.support.prometheus import prepare  # noqa: E402
from tests.test_backtest_parallel import without_wall  # noqa: E402
from tests.test_docs import build_history  # noqa: E402


def simulate(*args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "autoscaler", "simulate", *args, "--json"], capture_output=True,
                          text=True, cwd=ROOT, timeout=3000)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return json.loads(done.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=int, default=336)
    ap.add_argument("--budgets", default="0.4,1")
    args = ap.parse_args()
    budgets = [float(b) for b in args.budgets.split(",")]
    text = (ROOT / "policies/default.yaml").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        build_history(folder, hours=args.hours)
        prom = prepare(folder, [])
        prom.start()
        try:
            built = time.perf_counter() - t0
            span = ("--from-prometheus", prom.url, "--from", "2026-01-05T00:00:00Z", "--to",
                    time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1767571200 + args.hours * 3600)))
            t1 = time.perf_counter()
            out = simulate("--policy", str(ROOT / "policies/default.yaml"), *span, "--frontier", args.budgets,
                           "--compare")
            frontier_s = time.perf_counter() - t1
            ok = True
            for budget in budgets:
                path = folder / f"budget-{budget:g}.yaml"
                path.write_text(fr.policy_text_with_budget(text, budget))
                single = simulate("--policy", str(path), *span, "--compare")
                point = next(p for p in out["points"] if p["capacity_miss_budget_pct"] == budget)
                p = {k: v for k, v in point.items()
                     if k not in ("capacity_miss_budget_pct", "money", "dominated_by_budget", "non_dominated")}
                same = without_wall(p) == without_wall({k: v for k, v in single.items() if k not in fr.SHARED_KEYS})
                same_refs = without_wall(out["reference"]) == without_wall(single["reference"])
                ok = ok and same and same_refs
                print(f"budget {budget:g}%: {p['requests']:,} requests, {p['node_hours']:,.2f} node-hours, SLO "
                      f"{100 * p['slo_attainment']:.3f}%: {'equal' if same else 'DIFFERENT'} to the single run; "
                      f"references {'equal' if same_refs else 'DIFFERENT'}")
        finally:
            prom.close()
    print(f"history of {args.hours} h built and served in {built:.0f} s; the frontier ({len(budgets)} budgets, the "
          f"references replayed) {frontier_s:.0f} s; {'every point equals its single run' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
