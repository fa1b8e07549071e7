"""Keeps an LLM serving fleet of multi-node groups as large as its load needs: decide, backtest, report.

For developers: each subcommand lives in its own module with a ``register(subparsers)``.
``--json`` prints exactly one JSON object on stdout; logs and progress go to stderr.
Exit codes: 0 success, 1 runtime failure, 2 bad input (see ``autoscaler.errors``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from autoscaler import __version__
from autoscaler.cli.common import Parser
from autoscaler.errors import AutoscalerError

# Subcommand modules, in the order --help lists them. Each exposes register(subparsers).
COMMAND_MODULES = [
    "autoscaler.cli.policy_cmd",
    "autoscaler.cli.decide_cmd",
    "autoscaler.cli.simulate_cmd",
    "autoscaler.cli.report_cmd",
    "autoscaler.cli.why_cmd",
    "autoscaler.cli.ledger_cmd",
    "autoscaler.cli.emulate_cmd",
    "autoscaler.cli.signals_cmd",
    "autoscaler.cli.run_cmd",
    "autoscaler.cli.demo_cmd",
    "autoscaler.cli.control_cmd",
    "autoscaler.cli.completion_cmd",
]


DESCRIPTION = """\
Keeps an expensive LLM serving fleet exactly as large as its load needs. The fleet is made of
groups (nodes running one model together, behind the SGLang Model Gateway); the autoscaler reads
load from Prometheus, starts and drains groups between a floor and a ceiling, and records every
decision and what it cost in a ledger.

Ops: write a policy (policy validate), ask what it would do (decide), backtest it on recorded
traffic (simulate), check the live signals (signals), ask why a group was on (why).
Finance: what the fleet cost against always on, by day, week or month (report).
"""
EPILOG = ("Exit codes: 0 success, 1 a runtime failure (a service or the database), 2 bad input. "
          "Errors are one line on stderr. 'autoscaler COMMAND --help' for a command's flags.")


_Parser = Parser  # the old private name


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="autoscaler", description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"autoscaler {__version__}",
                        help="print the version and exit")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more log output on stderr (-v: info, -vv: debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    _verbose_everywhere(sub)
    return parser


def _verbose_everywhere(sub: argparse._SubParsersAction) -> None:
    """``-v`` after the subcommand too (``autoscaler run -v``, as people type it): the same count.
    SUPPRESS as the default, so a subcommand without it keeps what was given before it."""
    for command in dict.fromkeys(sub.choices.values()):
        command.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                             help="more log output on stderr (-v: info, -vv: debug)")
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                _verbose_everywhere(action)


def run(args: argparse.Namespace) -> int:
    """Run a parsed subcommand; map the project's errors to their exit codes."""
    try:
        return int(args.func(args) or 0)
    except AutoscalerError as exc:
        # One line naming the file, line or field (docs/interfaces.md), as the error says it. An
        # invalid policy may have several: the first, and how to see them all (policy validate
        # prints every one, one per line).
        lines = str(exc).splitlines() or [type(exc).__name__]
        if len(lines) > 1 and args.command != "policy":
            more = f" (and {len(lines) - 1} more: autoscaler policy validate FILE lists them)"
            lines = [lines[0] + more]
        print("\n".join(lines), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
