"""Helpers shared by subcommands: JSON output, time arguments, policy loading."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from autoscaler.core.types import parse_time
from autoscaler.errors import BadInput


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
