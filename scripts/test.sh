#!/usr/bin/env bash
# The one test command: installs everything the tests need, then runs them all.
# pytest exits non-zero when a test fails and when no test was collected.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --test
exec .venv/bin/python -m pytest -q "$@"
