"""The ``autoscaler`` command. Each subcommand lives in its own module with a ``register``.

``--json`` prints exactly one JSON object on stdout; logs and progress go to stderr.
Exit codes: 0 success, 1 runtime failure, 2 bad input (see ``autoscaler.errors``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

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
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors are bad input: exit 2, one line
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="autoscaler", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run a parsed subcommand; map the project's errors to their exit codes."""
    try:
        return int(args.func(args) or 0)
    except AutoscalerError as exc:
        # One line per problem, naming the file, line or field (INTERFACES.md): as the error says it.
        print(str(exc), file=sys.stderr)
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
