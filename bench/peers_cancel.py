"""Each peer (and HPA, as docs/interfaces.md defines it and as Kubernetes computes it) at its defaults on
one trace, with and without cancellable starts: how much of its SLO loss and of its starts the missing
cancel caused (docs/peers.md, "A start can be cancelled").

    nice -n 10 .venv/bin/python bench/peers_cancel.py [TRACE] [PEAK_UTILIZATION]

Default: the 14-day m-small trace (examples/traces/servegen-m-small) at simulate's default peak
(0.5). One line per controller: node-hours, SLO attainment %, groups started, starts
cancelled, for "cancel" (the replay's rule) and "no cancel" (a peer drains only ready groups).
Replays run one after another in this process (about 1-10 s each here).
"""
from __future__ import annotations

import sys
from pathlib import Path

from autoscaler.policy import load_policy
from autoscaler.sim import backtest as bt
from autoscaler.sim import controllers, peers

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    trace_path = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "examples/traces/servegen-m-small")
    peak = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
    policy = load_policy(ROOT / "policies/default.yaml").policy
    trace, factor, _ = bt.prepare_trace(trace_path, "auto", policy, peak, 0)
    columns = bt.request_columns(trace, policy)
    static = bt.run_one("static", trace, policy, controllers.StaticController(policy), factor, 0,
                        columns=columns).summary
    print(f"always-on: {static['node_hours']:.1f} node-h, SLO {100 * static['slo_attainment']:.3f}%")
    names = [f"hpa@{bt.HPA_DEFAULT_TARGET}", "hpa-kubernetes", *bt.PEER_NAMES, "kpa-15s-scrape"]
    for name in names:
        row = []
        for cancel in (True, False):
            peers._Peer.CANCEL_STARTS = cancel
            controllers.HpaController.CANCEL_STARTS = cancel
            if name == "hpa-kubernetes":  # HPA as Kubernetes sizes it (starting groups as missing metrics)
                ctl = controllers.HpaController(policy, bt.HPA_DEFAULT_TARGET, trace.span_s[0], kubernetes=True)
            elif name == "kpa-15s-scrape":  # Knative's KPA handed Prometheus's 15 s old scrape, as before
                ctl = peers.KpaController(policy, trace.span_s[0], scrape_lag_s=policy.simulation.scrape_interval_s)
            else:
                ctl = bt._reference_controller(name, trace, policy)
            s = bt.run_one(name, trace, policy, ctl, factor, 0, columns=columns).summary
            row.append(f"{'cancel' if cancel else 'no cancel'}: {s['node_hours']:.1f} node-h, "
                       f"SLO {100 * s['slo_attainment']:.3f}%, started {s['scale_ups']}, "
                       f"cancelled {s['starts_cancelled']}, drained {s['scale_downs']}")
        print(f"{name}: " + " | ".join(row), flush=True)


if __name__ == "__main__":
    main()
