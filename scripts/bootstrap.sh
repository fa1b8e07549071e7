#!/usr/bin/env bash
# Creates .venv and installs the project with the pinned versions in constraints.txt.
# With --test it also installs what the tests need: the test extras (sglang-router 0.3.2,
# psycopg2) and, when missing and running as root, Debian's prometheus and chromium (the frontier
# page's check in a real headless browser, tests/test_frontier.py).
set -euo pipefail
cd "$(dirname "$0")/.."
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".${extras}" >&2
if [ "${1:-}" = "--test" ] && ! command -v prometheus >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing Debian's prometheus (for the signal tests)" >&2
    (apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1 \
      || { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1; }) \
      || echo "warning: could not install prometheus; its tests will fail" >&2
  else
    echo "warning: prometheus is not installed and this is not root; its tests will fail" >&2
  fi
fi
if [ "${1:-}" = "--test" ] && ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing Debian's chromium (for the headless-browser check of the frontier page)" >&2
    (apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 \
      || { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends chromium >/dev/null 2>&1; }) \
      || echo "warning: could not install chromium; the frontier page's browser test will fail" >&2
  else
    echo "warning: chromium is not installed and this is not root; the frontier page's browser test will fail" >&2
  fi
fi
