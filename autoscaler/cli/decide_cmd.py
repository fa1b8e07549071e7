"""``autoscaler decide``: one decision, offline, from a JSON snapshot. "What would it do now, and why?\""""

from __future__ import annotations

import argparse

from autoscaler.adapters.snapshot_file import load_snapshot
from autoscaler.cli.common import check_output, print_json, time_arg
from autoscaler.core import decide
from autoscaler.core.types import iso
from autoscaler.policy import load_policy


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("decide", help="run one decision offline from a snapshot (signals + fleet state + memory)")
    p.add_argument("--policy", required=True, metavar="FILE", help="the policy (YAML)")
    p.add_argument("--snapshot", required=True, metavar="FILE.json",
                   help="signals, fleet state and (optionally) memory as JSON (README, 'Ask the core offline')")
    p.add_argument("--at", type=time_arg, metavar="T", help="decide as of this time (default: the snapshot's 'at')")
    p.add_argument("--json", action="store_true", help="print the decision as one JSON object")
    p.add_argument("--memory-out", metavar="FILE.json", help="write the next memory here (to chain decisions)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    check_output("--memory-out", args.memory_out)
    policy = load_policy(args.policy).policy
    signals, fleet, memory, now = load_snapshot(args.snapshot, policy, args.at)
    decision, next_memory = decide(signals, fleet, policy, memory, now)
    if args.memory_out:
        import json
        from pathlib import Path

        try:
            Path(args.memory_out).write_text(json.dumps(next_memory.to_dict(), indent=2) + "\n", encoding="utf-8")
        except OSError as exc:  # checked before the work: the disk failed in between
            from autoscaler.errors import RuntimeFailure

            raise RuntimeFailure(f"--memory-out: cannot write {args.memory_out}: {exc.strerror or exc}") from exc
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
