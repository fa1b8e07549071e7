#!/usr/bin/env bash
# The one test command: installs everything the tests need, lints and type-checks, then runs every test.
# pytest exits non-zero when a test fails and when no test was collected.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --test
# The linter and the type checker first (pinned in constraints.txt; configured in pyproject.toml).
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/python -m pytest -q --durations=15 "$@"
