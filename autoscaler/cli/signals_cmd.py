"""``autoscaler signals``: the load signals Prometheus reports now, and every problem with them.

Exit 0 with a snapshot even when it has problems (they are the output); exit 1 when Prometheus
is unreachable or answers no query at all, e.g. a plain web server (the snapshot is still printed,
its problems say so); exit 2 for a bad policy or flags. ``--json`` prints exactly one object:
``{"at", "groups": {NAME: {signal: value}}, "fleet": {signal: value}, "problems": [...]}``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from autoscaler.cli.common import print_json
from autoscaler.core.types import SignalSnapshot
from autoscaler.errors import BadInput
from autoscaler.policy.loader import load_policy
from autoscaler.policy.model import SIGNAL_NAMES
from autoscaler.settings import load_settings


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "signals",
        help="show the current load signals from Prometheus and their problems",
        description="Query Prometheus once with the policy's signal queries and print the snapshot: "
        "one value per group and signal, fleet totals, and every problem (unreachable, http_error, "
        "empty, multiple_series, not_a_number, stale, absent, out_of_range). Exit 0 even with problems; "
        "1 when Prometheus is unreachable or answers no query (not a Prometheus); 2 for a bad policy or flags.",
    )
    parser.add_argument("--policy", required=True, metavar="FILE", help="the policy YAML file")
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        help="Prometheus base URL (default: $AUTOSCALER_PROMETHEUS_URL, else http://127.0.0.1:9090)",
    )
    parser.add_argument(
        "--expected-groups",
        metavar="G1,G2",
        help="groups that should be serving (default: all); a missing series of another group is no problem",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument(
        "--show-queries", action="store_true", help="print the PromQL that would run (rendered) and exit"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `autoscaler --help` and the other commands need not load them.
    from autoscaler.adapters.prometheus import answered_nothing, is_unreachable, plan_queries, read_signals
    loaded = load_policy(args.policy)
    policy = loaded.policy
    if args.show_queries:
        plan = plan_queries(policy.signals, policy.slo.ttft_percentile, [g.metrics_instance for g in policy.fleet.groups])
        queries = {name: dict(q.items()) for name, q in plan.items()}
        if args.json:
            print_json(queries)
        else:
            for name, roles in queries.items():
                for role, text in roles.items():
                    print(f"{name:<17} {role:<13} {text}")
        return 0
    expected = None
    if args.expected_groups is not None:
        expected = [g.strip() for g in args.expected_groups.split(",") if g.strip()]
        unknown = sorted(set(expected) - set(policy.fleet.group_names()))
        if unknown:
            raise BadInput(f"--expected-groups: {unknown[0]!r} is not a group of {loaded.path}")
    settings = load_settings(prometheus=args.prometheus, uses=("prometheus",))
    snapshot = read_signals(policy, settings.prometheus_url, expected_groups=expected)
    if args.json:
        print_json(snapshot.to_dict())
    else:
        print_table(snapshot, settings.prometheus_url, sys.stdout)
    if is_unreachable(snapshot):
        slow = next((p for p in snapshot.problems if p.kind == "slow"), None)
        if slow is not None and not any(p.kind == "unreachable" for p in snapshot.problems):
            print(f"prometheus at {settings.prometheus_url} is slow: {slow.detail}", file=sys.stderr)
        else:
            print(f"prometheus at {settings.prometheus_url} is unreachable", file=sys.stderr)
        return 1
    if answered_nothing(snapshot):
        first = next(p for p in snapshot.problems if p.kind == "http_error")
        print(f"prometheus at {settings.prometheus_url} answered no query: {first.detail}", file=sys.stderr)
        return 1
    return 0


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def print_table(snapshot: SignalSnapshot, url: str, out: TextIO) -> None:
    """A readable table: one row per group and the fleet, '-' for an unknown value, then problems."""
    data = snapshot.to_dict()
    print(f"signals at {data['at']} from {url}", file=out)
    rows = [(name, g) for name, g in data["groups"].items()] + [("fleet", data["fleet"])]
    width = max(5, *(len(name) for name, _ in rows))
    print(f"{'group':<{width}}  " + "  ".join(f"{s:>{max(len(s), 7)}}" for s in SIGNAL_NAMES), file=out)
    for name, values in rows:
        cells = "  ".join(f"{_cell(values[s]):>{max(len(s), 7)}}" for s in SIGNAL_NAMES)
        print(f"{name:<{width}}  {cells}", file=out)
    if not snapshot.problems:
        print("problems: none", file=out)
        return
    print(f"problems ({len(snapshot.problems)}):", file=out)
    for p in snapshot.problems:
        print(f"  {p.signal:<17} {p.group or 'fleet':<{width}}  {p.kind:<15} {p.detail}", file=out)
