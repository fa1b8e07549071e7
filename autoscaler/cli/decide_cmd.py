"""``autoscaler decide``: one decision, offline, from a JSON snapshot. "What would it do now, and why?\""""

from __future__ import annotations

import argparse

from autoscaler.adapters.snapshot_file import load_snapshot
from autoscaler.cli.common import print_json, time_arg
from autoscaler.core import decide
from autoscaler.core.types import iso
from autoscaler.policy import load_policy


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("decide", help="run one decision offline from a snapshot (signals + fleet state + memory)")
    p.add_argument("--policy", required=True, metavar="FILE")
    p.add_argument("--snapshot", required=True, metavar="FILE.json")
    p.add_argument("--at", type=time_arg, metavar="T", help="decide as of this time (default: the snapshot's 'at')")
    p.add_argument("--json", action="store_true", help="print the decision as one JSON object")
    p.add_argument("--memory-out", metavar="FILE.json", help="write the next memory here (to chain decisions)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    policy = load_policy(args.policy).policy
    signals, fleet, memory, now = load_snapshot(args.snapshot, policy, args.at)
    decision, next_memory = decide(signals, fleet, policy, memory, now)
    if args.memory_out:
        import json
        from pathlib import Path

        Path(args.memory_out).write_text(json.dumps(next_memory.to_dict(), indent=2) + "\n")
    if args.json:
        print_json(decision.to_dict())
        return 0
    inputs = decision.inputs
    print(f"at {iso(now)}: {decision.action} -> {decision.target_groups} groups"
          + (f" ({', '.join(decision.groups)})" if decision.groups else ""))
    print(f"reason: {decision.reason}")
    print(f"detail: {decision.detail}")
    print(f"fleet:  {inputs['ready']} ready, {inputs['starting']} starting, {inputs['draining']} draining; "
          f"floor {inputs['floor']} ({inputs['floor_source']}), ceiling {inputs['ceiling']} ({inputs['ceiling_source']})")
    for p in inputs["problems"]:
        print(f"problem: {p['signal']} {p['group'] or 'fleet'} {p['kind']}: {p['detail']}")
    return 0
