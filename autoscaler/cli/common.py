"""Helpers shared by subcommands: JSON output, time arguments, policy loading."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

from autoscaler.core.types import parse_time
from autoscaler.errors import BadInput


def one_line_usage_error(message: str) -> str:
    """argparse's messages in the project's style, ``FLAG: what is wrong``:
    "argument --at: 'x' is not ..." -> "--at: 'x' is not ..."."""
    found = re.match(r"argument ([^:]+?): (.*)", message, re.S)
    if found:
        flag = found.group(1).split("/")[-1]
        return f"{flag}: {found.group(2)}"
    found = re.match(r"the following arguments are required: (.*)", message)
    if found:
        return f"{found.group(1)}: required"
    found = re.match(r"unrecognized arguments: (.*)", message)
    if found:
        return f"{found.group(1)}: unknown argument (see --help)"
    return message


class Parser(argparse.ArgumentParser):
    """The parser of every command: a usage error is bad input (exit 2) in one line, no usage block."""

    def error(self, message: str) -> NoReturn:
        print(one_line_usage_error(message).replace("\n", " "), file=sys.stderr)
        sys.exit(2)


def print_json(obj: Any) -> None:
    """The one JSON object a --json command prints on stdout."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def time_arg(text: str) -> float:
    """argparse type for --at/--from/--to: ISO 8601, UTC without a zone -> epoch seconds."""
    try:
        return parse_time(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time (e.g. 2026-01-05T09:00:00Z)") from None


def check_range(start: float | None, end: float | None) -> None:
    if start is not None and end is not None and end <= start:
        raise BadInput("--to must be after --from")


# Where ledger reads (report, why) take their runs from (docs/interfaces.md, "The ledger").
LEDGER_SOURCES = ("live", "advisory", "simulation", "all")


def check_output(flag: str, path: str | None, *, ledger_url: str | None = None) -> None:
    """An output path must be writable before any work starts (bad input, exit 2, if it is not).

    Tried for real, not guessed from permission bits (root passes those): an existing file is
    opened for writing without truncating it; a new one is created and removed again.

    An output never goes onto a database: not onto the ledger (``ledger_url``, by default the
    ledger the settings name), its ``-wal``/``-shm``/``-journal``/``.lock`` companions, or any
    existing SQLite database. Writing a report over a running controller's ledger destroyed it
    while the controller carried on, healthy to all appearances."""
    if not path:
        return
    target = Path(path)
    if target.is_dir():
        raise BadInput(f"{flag}: {path} is a directory, not a file")
    _refuse_database(flag, path, ledger_url)
    _check_writable(flag, path)


def _check_writable(flag: str, path: str) -> None:
    target = Path(path)
    try:
        if target.exists():
            with open(target, "r+b"):
                pass
        else:
            with open(target, "xb"):
                pass
            os.unlink(target)
    except OSError as exc:
        raise BadInput(f"{flag}: cannot write {path}: {exc.strerror or exc}") from None


SQLITE_MAGIC = b"SQLite format 3\x00"
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal", ".lock")


def is_sqlite_file(path: str | Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def _refuse_database(flag: str, path: str, ledger_url: str | None) -> None:
    from autoscaler.settings import load_settings, redact_url

    target = Path(path).resolve()
    if ledger_url is None:
        try:
            ledger_url = load_settings(uses=()).database_url
        except BadInput:  # an unreadable AUTOSCALER_DATABASE_URL_FILE is the database commands' to report
            ledger_url = None
    ledger = sqlite_file(ledger_url) if ledger_url else None
    if ledger is not None:
        ledger_path = Path(ledger).resolve()
        for suffix in ("", *SQLITE_COMPANIONS):
            if target == Path(str(ledger_path) + suffix):
                what = "the ledger database" if not suffix else f"the ledger's {suffix.lstrip('-.')} file"
                raise BadInput(f"{flag}: {path} is {what} ({redact_url(ledger_url or '')}); refusing to write over it")
    if is_sqlite_file(target):
        raise BadInput(f"{flag}: {path} is a SQLite database; refusing to write over it (name a new file)")
    for suffix in SQLITE_COMPANIONS:
        if str(target).endswith(suffix) and is_sqlite_file(str(target)[: -len(suffix)]):
            raise BadInput(f"{flag}: {path} belongs to the SQLite database {str(target)[: -len(suffix)]}; "
                           "refusing to write over it")


def sqlite_file(url: str) -> str | None:
    """The file of a SQLite URL (``sqlite:///x.db``), or None (another database, in memory, a URI form)."""
    if not url.startswith("sqlite") or "://" not in url:
        return None
    rest = url.split("://", 1)[1]
    if not rest.startswith("/"):
        return None
    path = rest[1:].split("?", 1)[0]
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    return path


def check_seed(seed: int) -> None:
    if seed < 0:
        raise BadInput(f"--seed: {seed} is negative; a seed is a whole number, 0 or more")


def check_db_output(flag: str, url: str | None) -> None:
    """A ledger URL a command will write to, checked before the work: a URL at all, and for
    SQLite a file that can be written (the work must not end in "cannot open the database")."""
    if not url:
        return
    from autoscaler.settings import load_settings

    load_settings(db=url, uses=("database",))  # the URL's form (BadInput naming the flag)
    path = sqlite_file(url)
    if path is not None:
        if Path(path).is_dir():
            raise BadInput(f"{flag}: {path} is a directory, not a file")
        _check_writable(flag, path)
