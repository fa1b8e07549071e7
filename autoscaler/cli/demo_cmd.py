"""``autoscaler demo``: the controller live on an emulated fleet behind the real gateway."""

from __future__ import annotations

import argparse

from autoscaler.cli.common import check_db_output, print_json
from autoscaler.errors import BadInput


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="watch the controller scale a live emulated fleet behind the real gateway, then its cost report",
        description="Starts the SGLang Model Gateway, Prometheus (when installed) and `autoscaler run` under "
        "policies/demo.yaml; the controller starts and drains three emulated groups while a day of real "
        "traffic is replayed through the gateway, sped up to --minutes. Ends with the cost report of the "
        "run and a one-line summary. Everything it started is stopped on exit, Ctrl-C included.",
    )
    p.add_argument("--minutes", type=float, default=2.0,
                   help="length of the load phase in minutes (default 2; the whole run takes at most 2 more)")
    p.add_argument("--db", metavar="URL", help="ledger to record into (default: a fresh temporary SQLite ledger)")
    p.add_argument("--json", action="store_true",
                   help="print only the summary object on stdout; the live view, logs and report go to stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not 1.0 <= args.minutes <= 600:
        raise BadInput(f"--minutes: {args.minutes:g} is outside 1..600")
    if args.db is not None and not args.db.startswith("sqlite:///"):
        from autoscaler.settings import redact_url

        raise BadInput(f"--db: the demo records into a SQLite ledger (sqlite:///FILE), not "
                       f"{redact_url(args.db).split(':', 1)[0]}")
    if args.db is not None:
        check_db_output("--db", args.db)
    from autoscaler.demo.app import run_demo

    summary = run_demo(minutes=args.minutes, db=args.db, json_out=args.json)
    if args.json:
        print_json(summary)
    return 0 if summary.get("requests_failed") == 0 else 1
