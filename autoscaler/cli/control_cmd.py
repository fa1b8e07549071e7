"""Operator controls and status: ``pin``, ``unpin``, ``pause``, ``resume``, ``cordon``,
``uncordon`` (written to the ledger, obeyed by the running leader within one tick) and
``status`` (the ``/status`` object, from the database or from a running service).

They need only ``--db`` (or ``AUTOSCALER_DATABASE_URL``). Each control is recorded with who
(``--by``, default the login name from ``getpass.getuser()``) and why (``--reason``, required).
A control goes only into a ledger a controller uses: one with its fleet, a live or advisory run
and a leader recorded; any other (a fresh path, a ledger of backtests, the default
``./autoscaler.db`` when the controller runs elsewhere) is refused, naming the ledger looked at,
and nothing is created. ``--new-ledger`` prepares a ledger before the first run (to start it
paused). It never writes into a database that is not a ledger. ``status`` only reads: it never
creates, migrates or writes the database.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from typing import Any

from autoscaler.cli.common import print_json
from autoscaler.core.types import iso, parse_time
from autoscaler.errors import BadInput, RuntimeFailure
from autoscaler.settings import load_settings, redact_url, status_token

CONTROLS = {
    "pin": "hold exactly N groups until T (overrides the policy's schedules.pin; expires by itself)",
    "unpin": "end the operator's pin now",
    "pause": "make the running controller advisory: it decides and records, and acts on nothing",
    "resume": "end a pause: the controller acts again",
    "cordon": "take GROUP out of service: drained and never started until uncordoned",
    "uncordon": "return a cordoned GROUP (also one cordoned after failed starts)",
}
MAX_GROUPS = 64
MAX_PIN_DAYS = 31  # a pin is an override for an event (a launch, an incident), not a standing rule
STATUS_TIMEOUT_S = 5.0


def _db_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", metavar="URL", help="ledger database (default: $AUTOSCALER_DATABASE_URL, "
                   "else sqlite:///autoscaler.db)")


def register(sub: argparse._SubParsersAction) -> None:
    for kind, words in CONTROLS.items():
        p = sub.add_parser(kind, help=words, description=words)
        if kind in ("cordon", "uncordon"):
            p.add_argument("group", metavar="GROUP", help="the group's name, as in the policy")
        if kind == "pin":
            p.add_argument("--groups", metavar="N",
                           help=f"how many groups to hold, 0..{MAX_GROUPS} (no policy is read here: the running "
                                "controller clamps the pin to its floor and ceiling)")
            p.add_argument("--until", metavar="T", help="when the pin expires (ISO 8601, in the future, at most "
                                                         f"{MAX_PIN_DAYS} days ahead; UTC without a zone)")
        _db_arg(p)
        p.add_argument("--by", metavar="NAME", help="who (default: your login name)")
        p.add_argument("--reason", metavar="TEXT", help="why (required; recorded with the control)")
        p.add_argument("--json", action="store_true", help="print one JSON object")
        p.add_argument("--new-ledger", action="store_true",
                       help="record into a ledger no controller has used yet (created if need be), e.g. to "
                            "pause before the first run; without it such a ledger is refused")
        p.set_defaults(func=_run_control, kind=kind)

    p = sub.add_parser("status", help="what the controller is doing: leader, epoch, pause, pin, groups, last decision")
    _db_arg(p)
    p.add_argument("--server", metavar="URL", help="ask a running service (GET URL/status; bearer "
                   "$AUTOSCALER_STATUS_TOKEN when set) instead of the database")
    p.add_argument("--json", action="store_true", help="print the /status object")
    p.set_defaults(func=_run_status)


# ------------------------------------------------------------------------------ validation


def _who(by: str | None) -> str:
    if by is not None:
        if not by.strip():
            raise BadInput("--by: empty; give a name")
        return _one_line("--by", by.strip())
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no USER/LOGNAME and no passwd entry (a bare container)
        raise BadInput("--by: cannot tell who you are (no login name); give --by NAME") from None


def _reason(reason: str | None) -> str:
    if reason is None or not reason.strip():
        raise BadInput("--reason is required: say why (it is recorded with who and when)")
    return _one_line("--reason", reason.strip())


def _one_line(flag: str, text: str) -> str:
    """A reason or a name goes into one log line and one table cell: no line break or control character
    (a newline split the controller's log line in two)."""
    bad = next((c for c in text if c in "\n\r\x85\u2028\u2029" or (ord(c) < 32 and c != "\t") or ord(c) == 127), None)
    if bad is not None:
        raise BadInput(f"{flag}: holds a line break or control character ({bad!r}); give one line")
    return text


def _pin_args(groups: str | None, until: str | None, now: float) -> tuple[int, float]:
    if groups is None:
        raise BadInput("pin: --groups N is required")
    if until is None:
        raise BadInput("pin: --until T is required (a pin always expires)")
    digits = groups.strip()
    if not digits.isdigit() or not 0 <= int(digits) <= MAX_GROUPS:
        raise BadInput(f"--groups: {groups!r} is not a whole number from 0 to {MAX_GROUPS} (no policy is read here: "
                       "the running controller clamps the pin to its floor and ceiling)")
    n = int(digits)
    try:
        t = parse_time(until)
    except ValueError:
        raise BadInput(f"--until: {until!r} is not an ISO 8601 time (e.g. 2026-12-01T18:00:00Z)") from None
    if t <= now:
        raise BadInput(f"--until: {iso(t)} is not in the future (now {iso(float(int(now)))})")
    if t > now + MAX_PIN_DAYS * 86400:
        raise BadInput(f"--until: {iso(t)} is more than {MAX_PIN_DAYS} days ahead: a pin is a temporary override "
                       "that expires by itself; a standing rule belongs in the policy (schedules)")
    return n, t


def _group(group: str | None) -> str:
    if group is None or not group.strip():
        raise BadInput("GROUP: empty; give the group's name, as in the policy")
    return group.strip()


# ------------------------------------------------------------------------------- databases


def _tables(engine) -> set[str]:
    from sqlalchemy import inspect

    with engine.connect() as conn:
        return set(inspect(conn).get_table_names())


def _open_for_write(url: str):
    """A Ledger to write controls into: created on a fresh path or an empty database, upgraded if
    older; a database with other tables and no ledger is refused (exit 2)."""
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError

    from autoscaler.ledger.schema import make_engine, one_line
    from autoscaler.ledger.store import Ledger

    engine = make_engine(url)
    try:
        tables = _tables(engine)
    except (DBAPIError, SQLAlchemyError) as exc:
        raise RuntimeFailure(f"ledger database {redact_url(url)}: {one_line(exc)}") from exc
    finally:
        engine.dispose()
    if tables and "alembic_version" not in tables:
        names = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise BadInput(f"--db: {redact_url(url)} is not an autoscaler ledger (it has other tables: {names}); "
                       "refusing to write into it")
    return Ledger(url)


def _where(url: str, source: str) -> str:
    given = {"--db": "given by --db", "default": "the default: neither --db nor AUTOSCALER_DATABASE_URL is set"}
    return f"{redact_url(url)} ({given.get(source, 'from ' + source)})"


def _refuse_a_ledger_without_a_controller(kind: str, url: str, source: str) -> None:
    """BadInput, before anything is created or written, unless a controller has used this ledger: its fleet,
    a live or advisory run and a leader are recorded there. A control elsewhere would be obeyed by no one,
    yet say "the running leader obeys it" and exit 0 (a pause without --db went into ./autoscaler.db
    while the controller ran on fleet.db)."""

    from sqlalchemy import func, inspect, select
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError

    from autoscaler.ledger.models import FleetGroupRow, LeaseRow, Run
    from autoscaler.ledger.schema import make_engine, one_line

    where = _where(url, source)
    advice = ("nothing was recorded; give the controller's ledger with --db or AUTOSCALER_DATABASE_URL (as its "
              "'autoscaler run' has it), or --new-ledger to prepare this one before a first run")
    if _missing_sqlite_file(url):
        raise BadInput(f"{kind}: no ledger at {where}: no controller has run there; {advice}")
    engine = make_engine(url, read_only=True)
    try:
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
            if tables and "alembic_version" not in tables:
                return  # not a ledger at all: _open_for_write names it and refuses
            missing = []
            controller_runs = 0
            if "runs" in tables:
                controller_runs = conn.execute(
                    select(func.count()).select_from(Run).where(Run.source.in_(("live", "advisory")))).scalar() or 0
            # The fleet: the groups an acting controller keeps in fleet_groups, or (an advisory controller
            # keeps its shadow fleet in memory) the fleet recorded with a live or advisory run's policy.
            groups = conn.execute(select(func.count()).select_from(FleetGroupRow)).scalar() \
                if "fleet_groups" in tables else 0
            if not groups and not controller_runs:
                missing.append("no fleet")
            if not controller_runs:
                missing.append("no live or advisory run")
            if "leases" not in tables or not conn.execute(select(func.count()).select_from(LeaseRow)).scalar():
                missing.append("no leader")
    except (DBAPIError, SQLAlchemyError) as exc:
        raise RuntimeFailure(f"ledger database {redact_url(url)}: {one_line(exc)}") from exc
    finally:
        engine.dispose()
    if missing:
        said = missing[0] if len(missing) == 1 else ", ".join(missing[:-1]) + " and " + missing[-1]
        raise BadInput(f"{kind}: the ledger {where} has {said} recorded: no controller uses it; {advice}")


def _missing_sqlite_file(url: str) -> str | None:
    """The file of a SQLite ledger URL when it does not exist (opening it would create it), else None."""
    from pathlib import Path

    from autoscaler.service.leadership import sqlite_path

    path = sqlite_path(url) if url.startswith("sqlite") else None
    return path if path is not None and not Path(path).exists() else None


def _open_for_read(url: str):
    """An engine on an existing ledger at this code's schema revision; never creates or migrates."""
    from autoscaler.ledger.schema import check_schema, make_engine

    path = _missing_sqlite_file(url)
    if path:
        raise RuntimeFailure(f"no ledger database at {path} ({redact_url(url)}): no controller has run there")
    # Opened read-only (SQLite mode=ro, PostgreSQL read-only transactions) and checked without
    # creating or migrating anything: a file that is not a ledger is named and left untouched.
    engine = make_engine(url, read_only=True)
    try:
        check_schema(engine, url)
    except Exception:
        engine.dispose()
        raise
    return engine


# ---------------------------------------------------------------------------------- commands


def _run_control(args: argparse.Namespace) -> int:
    from autoscaler.service.controls import effective_controls, record_control

    now = time.time()
    kind = args.kind
    reason = _reason(args.reason)
    by = _who(args.by)
    groups = until = group = None
    if kind == "pin":
        groups, until = _pin_args(args.groups, args.until, now)
    if kind in ("cordon", "uncordon"):
        group = _group(args.group)
    settings = load_settings(db=args.db, uses=("database",))
    notes: list[str] = []
    if not args.new_ledger:
        _refuse_a_ledger_without_a_controller(kind, settings.database_url, settings.database_url_from)
    with _open_for_write(settings.database_url) as ledger:
        before = effective_controls(ledger, now)
        if group is not None:
            known = _fleet_groups(ledger)
            if not known:
                notes.append(f"no controller has recorded the fleet in this ledger yet: {group!r} was not checked "
                             "against it")
            elif group not in known:
                raise BadInput(f"{kind}: no group {group!r} in the fleet the controller recorded "
                               f"(known: {', '.join(known)})")
        if kind == "unpin" and before.pin is None:
            notes.append("no operator pin was in force")
        if kind == "resume" and not before.paused:
            notes.append("the controller was not paused")
        if kind == "pause" and before.paused and before.pause is not None:
            notes.append(f"already paused by {before.pause.by} at {iso(before.pause.at)}")
        if kind == "cordon" and group is not None and group in before.cordoned:
            notes.append(f"{group} was already cordoned by {before.cordoned[group].by}")
        if kind == "uncordon" and group not in before.cordoned:
            notes.append(f"{group} had no operator cordon (this also clears a cordon after failed starts)")
        record = record_control(ledger, kind, by=by, reason=reason, group=group, groups=groups, until=until, at=now)
        after = effective_controls(ledger, now)
        if kind == "pin" and groups is not None:
            from autoscaler.service.status import pin_in_effect

            with ledger.engine.connect() as conn:
                clamp = pin_in_effect(conn, groups)
            if clamp["clamped"]:
                notes.append(f"the running policy clamps this pin: {groups} is {clamp['clamped']}")
    if args.json:
        print_json({"control": record.to_dict(), "in_force": after.to_dict(), "notes": notes})
        return 0
    what = {"pin": f"pinned at {groups} groups until {iso(until)}", "unpin": "unpinned", "pause": "paused",
            "resume": "resumed", "cordon": f"cordoned {group}", "uncordon": f"uncordoned {group}"}[kind]
    at = iso(float(int(now)))
    out = [f"{what} by {by}: {reason} (control #{record.id} at {at}; the running leader obeys it within one tick)"]
    out += [f"note: {n}" for n in notes]
    in_force = after.lines()
    out.append("in force now: " + ("; ".join(in_force) if in_force else "no operator controls"))
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def _fleet_groups(ledger) -> list[str]:
    from sqlalchemy import select

    from autoscaler.ledger.models import FleetGroupRow

    with ledger.engine.connect() as conn:
        return list(conn.execute(select(FleetGroupRow.name).order_by(FleetGroupRow.name)).scalars())


def _run_status(args: argparse.Namespace) -> int:
    if args.server and args.db:
        raise BadInput("status: give either --db or --server, not both")
    if args.server:
        status = _status_from_server(args.server)
    else:
        from sqlalchemy.exc import DBAPIError, SQLAlchemyError

        from autoscaler.ledger.schema import one_line
        from autoscaler.service.status import build_status

        settings = load_settings(db=args.db, uses=("database",))
        engine = _open_for_read(settings.database_url)
        try:
            status = build_status(engine, time.time())
        except (DBAPIError, SQLAlchemyError) as exc:
            raise RuntimeFailure(f"ledger database {redact_url(settings.database_url)}: {one_line(exc)}") from exc
        finally:
            engine.dispose()
    if args.json:
        print_json(status)
    else:
        from autoscaler.service.status import render_status

        sys.stdout.write(render_status(status))
    return 0


def _status_from_server(base: str) -> dict[str, Any]:
    import urllib.error
    import urllib.request

    from autoscaler.settings import check_http_url

    base = check_http_url("--server", base, "http://127.0.0.1:9108")
    request = urllib.request.Request(base.rstrip("/") + "/status", headers={"Accept": "application/json"})
    token = status_token()
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=STATUS_TIMEOUT_S) as response:
            body = response.read(1_000_000)
    except urllib.error.HTTPError as exc:
        hint = " (set AUTOSCALER_STATUS_TOKEN)" if exc.code in (401, 403) else ""
        raise RuntimeFailure(f"--server {base}: GET /status answered {exc.code}{hint}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RuntimeFailure(f"--server {base}: cannot reach it: {reason}") from None
    try:
        status = json.loads(body)
    except ValueError:
        raise RuntimeFailure(f"--server {base}: /status did not answer JSON") from None
    if not isinstance(status, dict):
        raise RuntimeFailure(f"--server {base}: /status did not answer a JSON object")
    return status
