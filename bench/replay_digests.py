"""Digests of backtest replays, to show that a change (a speed-up, a refactor) moves no result.

    .venv/bin/python bench/replay_digests.py [--cells servegen:0:0.5,azure:1:0.35,...] [--baseline REV]
                                             [--package DIR] [--json FILE]

Each cell is one trace at one seed and one peak use, replayed as `simulate --compare` replays it
(``backtest``: ours and the seven references, in parallel for the 14-day trace) with every decision
of ours kept. Per replay, a SHA-256 over everything the replay produced: the per-request TTFT,
queue wait and cut flags (their bytes), the node intervals, the tick rows, the events, the counts,
the summary (without its wall time); for ours also every decision (``Decision.to_dict``, in order)
and the core's final memory. One line per replay is printed.

``--baseline REV`` extracts that revision's package (``git archive``), computes the same digests
with it in a subprocess and compares: exit status 1 if any replay differs. ``--package DIR``
imports ``autoscaler`` from DIR instead of this tree (what ``--baseline`` uses).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = {
    "servegen": ROOT / "examples/traces/servegen-m-small",
    "azure": ROOT / "examples/traces/azure-2023-conv/AzureLLMInferenceTrace_conv.csv",
    "mooncake": ROOT / "examples/traces/mooncake-fast25-conversation/conversation_trace.jsonl",
}
DEFAULT_CELLS = ("servegen:0:0.5,servegen:1:0.35,servegen:2:0.7,azure:0:0.5,azure:1:0.35,azure:2:0.7,"
                 "mooncake:0:0.5,mooncake:1:0.35,mooncake:2:0.7")


def _digest(run, keep_wall: bool = False) -> str:
    import numpy as np

    r = run.result
    h = hashlib.sha256()
    for arr in (r.ttft_s, r.queue_s, r.cut, r.tick_t, r.tick_demand, r.tick_ready, r.tick_starting,
                r.tick_draining):
        a = np.ascontiguousarray(arr)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    h.update(repr((sorted(r.group_intervals.items()), r.span_s, r.scale_ups, r.scale_downs,
                   r.requests_cut_by_drain, r.events)).encode())
    summary = {k: v for k, v in run.summary.items() if keep_wall or k != "wall_s"}
    h.update(json.dumps(summary, sort_keys=True).encode())
    decisions = getattr(run.controller, "decisions", None)
    if decisions is not None:  # ours: every decision and the final memory
        h.update(json.dumps(run.controller.counts, sort_keys=True).encode())
        for t, d in decisions:
            h.update(repr(t).encode())
            h.update(json.dumps(d.to_dict(), sort_keys=True, default=repr).encode())
        h.update(json.dumps(run.controller.memory.to_dict(), sort_keys=True, default=repr).encode())
    return h.hexdigest()


def compute(cells: list[str]) -> dict[str, str]:
    import autoscaler
    from autoscaler.policy import load_policy
    from autoscaler.sim.backtest import backtest, prepare_trace

    print(f"autoscaler from {Path(autoscaler.__file__).parent}", file=sys.stderr, flush=True)
    policy = load_policy(str(ROOT / "policies/default.yaml")).policy
    out = {}
    for cell in cells:
        key, seed, peak = cell.split(":")
        trace, factor, _ = prepare_trace(str(TRACES[key]), "auto", policy, float(peak), int(seed))
        runs = backtest(trace, factor, policy, compare=True, seed=int(seed), keep_decisions=True)
        for name, run in runs.items():
            out[f"{cell} {name}"] = _digest(run)
            print(f"{cell} {name:8s} {out[f'{cell} {name}']}", file=sys.stderr, flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", default=DEFAULT_CELLS, help="comma-separated TRACE:SEED:PEAK (traces: "
                    f"{', '.join(TRACES)})")
    ap.add_argument("--baseline", metavar="REV", help="compare with this git revision's package")
    ap.add_argument("--package", metavar="DIR", help="import autoscaler from DIR")
    ap.add_argument("--json", metavar="FILE", help="write the digests here ('-': stdout)")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.package).resolve() if args.package else ROOT))
    cells = args.cells.split(",")

    base: dict[str, str] | None = None
    if args.baseline:
        with tempfile.TemporaryDirectory(prefix="replay-digests-") as tmp:
            archive = subprocess.run(["git", "archive", args.baseline, "autoscaler"], cwd=ROOT, check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            print(f"baseline {args.baseline}:", file=sys.stderr, flush=True)
            done = subprocess.run([sys.executable, __file__, "--cells", args.cells, "--package", tmp, "--json", "-"],
                                  check=True, stdout=subprocess.PIPE, cwd=tmp)
            base = json.loads(done.stdout)
        print("this tree:" if not args.package else f"{args.package}:", file=sys.stderr, flush=True)
    now = compute(cells)
    if args.json:
        text = json.dumps(now, indent=1)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    if base is None:
        return 0
    differ = [k for k in now if base.get(k) != now[k]]
    for k in now:
        print(f"{'same' if k not in differ else 'DIFFERENT'}  {k}  {now[k][:16]}")
    print(f"{len(now) - len(differ)} of {len(now)} replays identical to {args.baseline}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
