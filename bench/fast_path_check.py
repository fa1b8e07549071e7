"""Does a replay's fast path decide as the explained core does? Whole replays, both ways.

    .venv/bin/python bench/fast_path_check.py [--cells servegen:0:0.5,azure:1:0.35,...] [--policy FILE]

``simulate`` without ``--db``, ``--compare``, the frontier and the matrix replay ours without a
hold's numbers (``decide(..., explain=False)``: ``CoreController(keep=False)``), and the risk may
stop counting once its answer is known (``stop_above``); the live controller and ``simulate --db``
explain every decision. Both must take the same decisions. Per cell: ours replayed both ways; the
summary (wall time aside), the decision counts, every drain and start with its numbers, and the
core's final memory must be equal. Exit 1 if any cell differs, with the first differing action.
(``bench/replay_digests.py`` compares revisions on the explained path; this compares the two paths
of one revision. tests/test_core_fast_path.py does the same on 30 hours; this on whole traces.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from replay_digests import TRACES  # noqa: E402

DEFAULT_CELLS = "servegen:0:0.5,servegen:0:0.35,servegen:1:0.7"


def check(cell: str, policy_path: str) -> bool:
    from autoscaler.policy import load_policy
    from autoscaler.sim.backtest import prepare_trace, run_one
    from autoscaler.sim.controllers import CoreController

    key, seed, peak = cell.split(":")
    policy = load_policy(policy_path).policy
    path = TRACES.get(key, key)
    trace, factor, _ = prepare_trace(str(path), "auto", policy, float(peak), int(seed))
    t0 = time.perf_counter()
    full = CoreController(policy, True, trace.start_epoch_s)
    fast = CoreController(policy, False, trace.start_epoch_s)
    a = run_one("ours", trace, policy, full, factor, int(seed)).summary
    b = run_one("ours", trace, policy, fast, factor, int(seed)).summary
    acted = [(at, d) for at, d in full.decisions if str(d.action) != "hold"]
    same = ({k: v for k, v in a.items() if k != "wall_s"} == {k: v for k, v in b.items() if k != "wall_s"}
            and full.counts == fast.counts and acted == fast.decisions
            and json.dumps(full.memory.to_dict(), sort_keys=True, default=repr)
            == json.dumps(fast.memory.to_dict(), sort_keys=True, default=repr))
    line = (f"{cell}: {'same' if same else 'DIFFERENT'} ({a['node_hours']} / {b['node_hours']} node-hours, "
            f"{len(acted)} / {len(fast.decisions)} acts; {time.perf_counter() - t0:.0f} s)")
    if not same:
        first = next(((x, y) for x, y in zip(acted, fast.decisions) if x != y), None)
        if first is not None:
            (t1, d1), (t2, d2) = first
            line += f"\n  first difference: explained {t1:.0f} s {d1.action} ({d1.detail[:160]}), fast {t2:.0f} s {d2.action}"
    print(line, flush=True)
    return same


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", default=DEFAULT_CELLS,
                    help=f"TRACE:SEED:PEAK_USE, comma-separated; TRACE is one of {', '.join(TRACES)} or a path")
    ap.add_argument("--policy", default=str(ROOT / "policies/default.yaml"))
    args = ap.parse_args()
    results = [check(cell, args.policy) for cell in args.cells.split(",")]
    print(f"{sum(results)} of {len(results)} cells decide the same both ways")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
