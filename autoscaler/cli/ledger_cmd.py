"""``autoscaler ledger compact|upgrade``: maintenance of the ledger database."""

from __future__ import annotations

import argparse
import sys
import time

from autoscaler.cli.common import LEDGER_SOURCES, print_json
from autoscaler.errors import BadInput
from autoscaler.settings import load_settings

DB_HELP = "ledger database URL (default: $AUTOSCALER_DATABASE_URL, else sqlite:///autoscaler.db)"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ledger", help="ledger maintenance: fold old hold decisions, upgrade the schema",
                       description="Maintenance of the ledger database (the record of runs, decisions and "
                                   "node-hours that report and why read).")
    what = p.add_subparsers(dest="ledger_command", metavar="WHAT", parser_class=type(p))
    what.required = True
    c = what.add_parser("compact", help="fold hold decisions older than N days into hourly counts per reason",
                        description="Fold hold decisions older than --older-than-days into hourly counts per "
                                    "reason (why still counts them). Decisions that acted, and any decision a "
                                    "group event points at, are kept. Costs are unchanged: they come from the "
                                    "node intervals, which are kept.")
    c.add_argument("--db", metavar="URL", help=DB_HELP)
    c.add_argument("--older-than-days", type=float, default=30.0, metavar="DAYS",
                   help="fold holds older than this many days before now (default 30; 0 folds every hold)")
    c.add_argument("--source", default="all", metavar="{" + ",".join(LEDGER_SOURCES) + "}",
                   help="only runs of this source (default all)")
    c.add_argument("--json", action="store_true", help='print {"folded", "summaries"} as one JSON object')
    c.set_defaults(func=_compact)
    u = what.add_parser("upgrade", help="create the ledger's tables or bring them to this version's schema",
                        description="Create the ledger's tables, or upgrade an older ledger to this version's "
                                    "schema revision (commands that record do it by themselves; report and why "
                                    "only read, and ask for this).")
    u.add_argument("--db", metavar="URL", help=DB_HELP)
    u.set_defaults(func=_upgrade)


def _compact(args: argparse.Namespace) -> int:
    if args.source not in LEDGER_SOURCES:
        raise BadInput(f"--source: {args.source!r} is not one of {', '.join(LEDGER_SOURCES)}")
    if not args.older_than_days >= 0 or args.older_than_days == float("inf"):
        raise BadInput(f"--older-than-days: {args.older_than_days} must be a number of days, 0 or more")
    settings = load_settings(db=args.db, uses=("database",))
    from autoscaler.ledger.store import Ledger

    with Ledger(settings.database_url, create=False, flag=settings.database_url_from) as ledger:
        result = ledger.compact(args.older_than_days * 86400, now=time.time(),
                                source=None if args.source == "all" else args.source)
    if args.json:
        print_json({"folded": result.folded, "summaries": result.summaries})
    else:
        print(f"folded {result.folded:,} hold decisions older than {args.older_than_days:g} days into "
              f"{result.summaries:,} hourly summaries")
    return 0


def _upgrade(args: argparse.Namespace) -> int:
    settings = load_settings(db=args.db, uses=("database",))
    from autoscaler.ledger.schema import code_head
    from autoscaler.ledger.store import Ledger

    Ledger(settings.database_url, flag=settings.database_url_from).close()
    print(f"{settings.database_url if '@' not in settings.database_url else 'the ledger'}: at schema revision "
          f"{code_head()}", file=sys.stderr)
    return 0
