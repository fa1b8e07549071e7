"""``autoscaler why``: why the fleet looked the way it did at an instant, or what acted in a range."""

from __future__ import annotations

import argparse
import sys

from autoscaler.cli.common import LEDGER_SOURCES, check_range, print_json, time_arg
from autoscaler.errors import BadInput
from autoscaler.settings import load_settings

SOURCES = LEDGER_SOURCES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("why", help="explain the fleet at an instant (--at) or the decisions that acted in a range")
    p.add_argument("--db", metavar="URL", help="ledger database (default: $AUTOSCALER_DATABASE_URL, "
                   "else sqlite:///autoscaler.db)")
    p.add_argument("--at", type=time_arg, metavar="T", help="the instant (ISO 8601; UTC without a zone)")
    p.add_argument("--from", dest="start", type=time_arg, metavar="T", help="start of a range")
    p.add_argument("--to", dest="end", type=time_arg, metavar="T", help="end of a range")
    p.add_argument("--group", metavar="NAME", help="only this group")
    p.add_argument("--source", default="live", metavar="{live,advisory,simulation,all}",
                   help="which runs: live (default), advisory, simulation or all")
    p.add_argument("--run", type=int, metavar="ID", help="this run (needed when several simulations cover --at)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `autoscaler --help` and the other commands need not load them.
    from autoscaler.ledger.store import Ledger
    from autoscaler.ledger.why import render_at, render_range, why_at, why_range
    if args.source not in SOURCES:
        raise BadInput(f"--source: {args.source!r} is not one of {', '.join(SOURCES)}")
    ranged = args.start is not None or args.end is not None
    if args.at is None and not ranged:
        raise BadInput("give --at T, or --from T --to T")
    if args.at is not None and ranged:
        raise BadInput("give either --at or --from/--to, not both")
    if ranged and (args.start is None or args.end is None):
        raise BadInput("a range needs both --from and --to")
    check_range(args.start, args.end)
    settings = load_settings(db=args.db, uses=("database",))
    # A read: the database is opened read-only and never created or migrated.
    with Ledger(settings.database_url, read_only=True, flag=settings.database_url_from) as ledger:
        if args.at is not None:
            answer = why_at(ledger, args.at, source=args.source, group=args.group, run_id=args.run)
            text = render_at(answer)
        else:
            answer = why_range(ledger, args.start, args.end, source=args.source, group=args.group, run_id=args.run)
            text = render_range(answer)
    if args.json:
        print_json(answer)
    else:
        sys.stdout.write(text)
    return 0
