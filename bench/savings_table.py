"""The savings table in the README: the default policy, HPA and the oracle on each shared trace at
several peak utilisations, with the three targets checked.

    .venv/bin/python bench/savings_table.py [--policy policies/default.yaml] [--pu 0.35,0.5,0.7] [--json FILE]

Each cell is one `autoscaler simulate --compare` (seed 0). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autoscaler.policy import load_policy  # noqa: E402
from autoscaler.sim.backtest import backtest, prepare_trace, results_json  # noqa: E402

TRACES = {
    "azure-conv (1 h)": ROOT / "examples/traces/azure-2023-conv/AzureLLMInferenceTrace_conv.csv",
    "mooncake (1 h)": ROOT / "examples/traces/mooncake-fast25-conversation/conversation_trace.jsonl",
    "servegen (14 d)": ROOT / "examples/traces/servegen-m-small",
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default=str(ROOT / "policies/default.yaml"))
    ap.add_argument("--pu", default="0.35,0.5,0.7")
    ap.add_argument("--json", metavar="FILE", help="also write every result here")
    args = ap.parse_args()
    policy = load_policy(args.policy).policy
    results = []
    print("| trace | peak util. | requests | ours: saving % / SLO % | HPA 0.7: saving % / SLO % "
          "| oracle: saving % / SLO % | always-on SLO % | ours vs oracle node-h | targets |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, path in TRACES.items():
        for pu in (float(x) for x in args.pu.split(",")):
            started = time.perf_counter()
            trace, factor, info = prepare_trace(str(path), "auto", policy, pu, 0)
            runs = backtest(trace, factor, policy, compare=True)
            out = results_json(runs, policy, info, time.perf_counter() - started)
            ref, v = out["reference"], out["verdict"]
            ok = [v["slo_within_0_5pp_of_static"], v["within_10pct_of_oracle"], not v["dominated_by_hpa"]]
            marks = " ".join(("SLO" if i == 0 else "oracle" if i == 1 else "HPA") + (" ok" if x else " MISS")
                             for i, x in enumerate(ok))
            print(f"| {name} | {pu} | {out['requests']:,} | {out['savings_pct']:.1f} / {100 * out['slo_attainment']:.2f} "
                  f"| {ref['hpa']['savings_pct']:.1f} / {100 * ref['hpa']['slo_attainment']:.2f} "
                  f"| {ref['oracle']['savings_pct']:.1f} / {100 * ref['oracle']['slo_attainment']:.2f} "
                  f"| {100 * ref['static']['slo_attainment']:.2f} | x{v['node_hours_vs_oracle']:.3f} | {marks} |",
                  flush=True)
            results.append({"trace": name, "peak_utilization": pu, **out})
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
