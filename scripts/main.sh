#!/usr/bin/env bash
# The main job, on a fresh machine: install, then run `autoscaler demo`: the real SGLang Model
# Gateway, three emulated TP=2 groups started and drained by the controller (`autoscaler run`
# under policies/demo.yaml), Prometheus when Debian's package is installed, a day of real traffic
# replayed through the gateway in a few minutes, and the cost report of that live run.
# Arguments go to the demo (e.g. --minutes 6, --json). The backtest is scripts/backtest.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/autoscaler demo "$@"
