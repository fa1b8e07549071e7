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


def check_output(flag: str, path: str | None) -> None:
    """An output path must be writable before any work starts (bad input, exit 2, if it is not).

    Tried for real, not guessed from permission bits (root passes those): an existing file is
    opened for writing without truncating it; a new one is created and removed again."""
    if not path:
        return
    target = Path(path)
    if target.is_dir():
        raise BadInput(f"{flag}: {path} is a directory, not a file")
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


def check_seed(seed: int) -> None:
    if seed < 0:
        raise BadInput(f"--seed: {seed} is negative; a seed is a whole number, 0 or more")


def check_db_output(flag: str, url: str | None) -> None:
    """A ledger URL a command will write to, checked before the work: a URL at all, and for
    SQLite a file that can be written (the work must not end in "cannot open the database")."""
    if not url:
        return
    from autoscaler.settings import load_settings

    load_settings(db=url)  # the URL's form (BadInput naming the flag)
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:") and "?" not in url:
        path = url[len("sqlite:///"):]
        if path and not path.startswith("file:"):
            check_output(flag, path)
