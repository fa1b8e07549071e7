"""``autoscaler report``: what the fleet cost, what it would have cost always on, and the saving."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from autoscaler.cli.common import LEDGER_SOURCES, check_output
from autoscaler.errors import BadInput, RuntimeFailure
from autoscaler.settings import load_settings

SOURCES = LEDGER_SOURCES
BY = ("day", "week", "month")
FORMATS = ("table", "csv", "json", "md", "html")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="cost report from the ledger: cost, always-on baseline and saving by period",
                       description="What the fleet cost, what it would have cost always on at its ceiling, and "
                                   "the saving, by day, week or month. Reads the ledger; never changes it.")
    p.add_argument("--db", metavar="URL", help="ledger database (default: $AUTOSCALER_DATABASE_URL, "
                   "else sqlite:///autoscaler.db)")
    p.add_argument("--from", dest="start", metavar="T",
                   help="start: a date (midnight in --tz) or an ISO 8601 time (without --from/--to/--run: the "
                        "ledger's only run, if it holds one)")
    p.add_argument("--to", dest="end", metavar="T", help="end (exclusive), like --from")
    p.add_argument("--by", default="day", metavar="{day,week,month}",
                   help="one row per day, week (from Monday) or month (default day)")
    p.add_argument("--source", metavar="{live,advisory,simulation,all}",
                   help="which runs: live (default), advisory, simulation or all; sources are never mixed unasked")
    p.add_argument("--run", type=int, metavar="ID", help="only this run (then --from/--to default to its span)")
    p.add_argument("--tz", default="UTC", help="IANA time zone of the periods and dates (default UTC)")
    p.add_argument("--format", default="table", metavar="{table,csv,json,md,html}",
                   help="table (default), csv, json, md or html")
    p.add_argument("--output", metavar="FILE", help="write here instead of stdout")
    p.set_defaults(func=_run)


# Rows a report may have: 27 years by day, 190 by week. From 0001-01-01 by day was 739,000 rows and
# more than a minute of work before the first line; a range that long is a typing slip, not a question.
MAX_PERIODS = 10_000
_PERIOD_S = {"day": 86_400, "week": 7 * 86_400, "month": 28 * 86_400}  # the shortest of each: an upper count


def _check_periods(start: float, end: float, by: str, now: float) -> None:
    """Bad input, before any work, for a range of more than MAX_PERIODS rows up to ``now`` (periods
    after the data's last moment have no rows: a report to 9999-12-31 stops at now, or at the end
    of a backtest dated after now: checked again once the runs are known)."""
    def rows(per: str) -> int:
        return int((min(end, now) - start) // _PERIOD_S[per]) + 1

    count = rows(by)
    if count > MAX_PERIODS:
        fits = [per for per in BY[BY.index(by) + 1:] if rows(per) <= MAX_PERIODS]
        coarser = f" or --by {fits[0]}" if fits else ""
        raise BadInput(f"--from: about {count:,} {by}s up to now is more than {MAX_PERIODS:,} rows; "
                       f"narrow --from/--to{coarser}")


def _only_run(ledger, source: str | None) -> int:
    """Without --from/--to/--run: the ledger's only run (of --source, when given), else bad input
    that lists the runs to choose from."""
    from autoscaler.core.types import iso

    runs = ledger.runs(source=source or "all")
    if len(runs) == 1:
        return runs[0].id
    where = f" {source}" if source else ""
    if not runs:
        raise BadInput(f"--from and --to are required: the ledger holds no{where} run to report by default")
    listed = "; ".join(f"{r.id} ({r.source}{' ' + repr(r.label) if r.label else ''}, {iso(r.started_at)} to "
                       f"{iso(r.ended_at) if r.ended_at is not None else 'now'})" for r in runs[:5])
    more = f"; and {len(runs) - 5} more" if len(runs) > 5 else ""
    raise BadInput(f"--from and --to are required: the ledger holds {len(runs)}{where} runs ({listed}{more}); "
                   f"give a range or one run with --run")


def _run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `autoscaler --help` and the other commands need not load them.
    from autoscaler.ledger.cost import moment
    from autoscaler.ledger.report import (
        build_report,
        data_horizon,
        empty_message,
        left_out_notes,
        parse_when,
        render,
        zone,
    )
    from autoscaler.ledger.store import Ledger
    if args.format not in FORMATS:
        raise BadInput(f"--format: {args.format!r} is not one of {', '.join(FORMATS)}")
    if args.by not in BY:
        raise BadInput(f"--by: {args.by!r} is not one of {', '.join(BY)}")
    if args.source is not None and args.source not in SOURCES:
        raise BadInput(f"--source: {args.source!r} is not one of {', '.join(SOURCES)}")
    tz = zone(args.tz)
    start = parse_when(args.start, tz, "--from") if args.start else None
    end = parse_when(args.end, tz, "--to") if args.end else None
    if args.run is None and (start is None) != (end is None):
        raise BadInput("--from and --to go together (or give neither: the ledger's only run, or name one with --run)")
    if start is not None and end is not None and end <= start:
        raise BadInput("--to must be after --from")
    if start is not None and end is not None:
        _check_periods(start, end, args.by, time.time())
    settings = load_settings(db=args.db, uses=("database",))
    check_output("--output", args.output, ledger_url=settings.database_url)
    now = time.time()
    # A read: the database is opened read-only and never created or migrated.
    with Ledger(settings.database_url, read_only=True, flag=settings.database_url_from) as ledger:
        source = args.source or "live"
        if args.run is None and start is None:
            args.run = _only_run(ledger, args.source)
        if args.run is not None:
            found = ledger.runs(run_id=args.run)
            if not found:
                raise BadInput(f"--run: there is no run {args.run}")
            run = found[0]
            if args.source not in (None, "all", run.source):
                raise BadInput(f"--run: run {run.id} is a {run.source} run, not {args.source}")
            if run.incomplete:
                raise BadInput(f"--run: {run.incomplete_text()}; run the backtest again")
            source = run.source
            start = run.started_at if start is None else start
            end = (run.ended_at or now) if end is None else end
            if end <= start:
                raise BadInput("--to must be after --from")
        assert start is not None and end is not None  # given, or the run's span
        runs = ledger.runs(source=source if args.run is None else "all", start=start, end=end, run_id=args.run)
        others: dict[str, list[int]] = {}
        if not runs and args.run is None:  # say which other sources cover the range, and how to see them
            for r in ledger.runs(source="all", start=start, end=end):
                others.setdefault(r.source, []).append(r.id)
        # Rows run to now, or to the end of a backtest dated after it: count them again with that end.
        _check_periods(start, end, args.by, float(data_horizon(runs, moment(now))))
        data = ledger.period_data(runs, start, end, with_load=args.format == "html")
    report = build_report(data, start, end, by=args.by, tz=tz, source=source, now=now, run_id=args.run,
                          other_sources=others)
    text = render(report, args.format)
    if args.format in ("json", "csv"):  # the page formats say these inside; these two on stderr
        for line in ([empty_message(report)] if report.empty else []) + left_out_notes(report):
            print(line, file=sys.stderr)
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8", newline="")
        except OSError as exc:  # checked before the work; this is the disk failing in between
            raise RuntimeFailure(f"--output: cannot write {args.output}: {exc.strerror or exc}") from exc
        print(f"wrote {args.output} ({args.format}, {len(report.rows)} rows)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
