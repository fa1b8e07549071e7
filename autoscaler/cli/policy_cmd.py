"""``autoscaler policy validate FILE...`` and ``autoscaler policy show FILE``."""

from __future__ import annotations

import argparse
import sys

from autoscaler.cli.common import print_json
from autoscaler.policy import PolicyInvalid, load_policy
from autoscaler.policy.loader import policy_to_dict


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("policy", help="validate or show scaling policies",
                       description="Check policy files, or print a policy with every default filled in.")
    psub = p.add_subparsers(dest="policy_command", metavar="ACTION", parser_class=type(p))
    psub.required = True

    v = psub.add_parser("validate", help="check policy files; exit 0 if all are valid, 2 otherwise")
    v.add_argument("files", nargs="+", metavar="FILE", help="policy files (YAML); every error is one line")
    v.add_argument("--json", action="store_true", help="print {file: [errors]} as JSON")
    v.set_defaults(func=_validate)

    s = psub.add_parser("show", help="print the effective policy with every default filled in, each field "
                                     "with its description")
    s.add_argument("file", metavar="FILE", help="a policy file (YAML)")
    s.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    s.set_defaults(func=_show)


def _validate(args: argparse.Namespace) -> int:
    results: dict[str, list[str]] = {}
    for path in args.files:
        try:
            load_policy(path)
            results[path] = []
        except PolicyInvalid as exc:
            results[path] = exc.errors
    if args.json:
        print_json({"valid": not any(results.values()), "errors": results})
    else:
        for path, errors in results.items():
            if errors:
                for line in errors:
                    print(line, file=sys.stderr)
            else:
                print(f"{path}: ok")
    return 2 if any(results.values()) else 0


def _show(args: argparse.Namespace) -> int:
    loaded = load_policy(args.file)
    data = policy_to_dict(loaded.policy)
    if args.json:
        print_json(data)
    else:
        from autoscaler.policy.describe import commented_yaml

        sys.stdout.write(f"# effective policy of {loaded.path} (sha256 {loaded.sha256[:12]}), every default filled\n"
                         "# in; each field's description above it (in a list, on its first item only)\n")
        sys.stdout.write(commented_yaml(loaded.policy))
    return 0
