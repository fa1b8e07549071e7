#!/usr/bin/env bash
# The one test command: installs everything the tests need, lints and type-checks, then runs every test.
# pytest exits non-zero when a test fails and when no test was collected.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --test
# The linter and the type checker first (pinned in constraints.txt; configured in pyproject.toml).
.venv/bin/ruff check .
.venv/bin/mypy
# Three test processes (pytest-xdist) on two cores: most of a live test waits on real processes, so
# the suite takes about 10 minutes instead of 14. Each process has its own PostgreSQL and ports.
# worksteal: a process that runs out of tests takes some from another's queue, so the long live
# tests do not all end up at the tail of one process.
exec .venv/bin/python -m pytest -q -n 3 --dist worksteal --durations=15 "$@"
