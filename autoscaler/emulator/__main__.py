"""``python -m autoscaler.emulator worker|load ...``: the same as ``autoscaler emulate ...``.

It builds a parser with only the emulate subcommands, so a test or a demo can start workers
without importing every other subcommand of the CLI.
"""

import logging
import sys

from autoscaler.cli import emulate_cmd, run
from autoscaler.cli.common import Parser


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="autoscaler emulate")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    emulate_cmd.register(sub)
    args = parser.parse_args(["emulate", *(sys.argv[1:] if argv is None else argv)])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(args)


sys.exit(main())
