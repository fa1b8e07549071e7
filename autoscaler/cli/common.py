"""Helpers shared by subcommands: JSON output, time arguments, policy loading."""

from __future__ import annotations

import argparse
import json
import sys
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
