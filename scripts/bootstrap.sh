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
# Debian packages the tests need, installed as root (apt-get update only when the first try fails).
install_debian() {  # PACKAGE WHAT-NEEDS-IT
  if [ "$(id -u)" = 0 ]; then
    echo "installing Debian's $1 (for $2)" >&2
    (apt-get install -y --no-install-recommends "$1" >/dev/null 2>&1 \
      || { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends "$1" >/dev/null 2>&1; }) \
      || echo "warning: could not install $1; $2 will fail" >&2
  else
    echo "warning: $1 is not installed and this is not root; $2 will fail" >&2
  fi
}
if [ "${1:-}" = "--test" ] && ! command -v prometheus >/dev/null 2>&1; then
  install_debian prometheus "the signal tests"
fi
if [ "${1:-}" = "--test" ] && ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  install_debian chromium "the headless-browser check of the frontier page"
fi
