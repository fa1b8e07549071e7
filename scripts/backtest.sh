#!/usr/bin/env bash
# The backtest, one command after the demo: install, then backtest the shipped default policy on the
# 14-day production trace against always-on, Kubernetes HPA and the clairvoyant oracle, record it
# in a ledger of its own (SQLite, out/backtest.db) and print finance's report of it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
mkdir -p out
rm -f out/backtest.db  # one backtest per ledger file, so the report shows exactly this run
.venv/bin/autoscaler simulate --policy policies/default.yaml --trace examples/traces/servegen-m-small \
  --compare --plot out/servegen.html --timeline-out out/servegen-timeline.csv --db sqlite:///out/backtest.db "$@"
.venv/bin/autoscaler report --db sqlite:///out/backtest.db --source simulation \
  --from 2026-01-05 --to 2026-01-19 --by week --format table
.venv/bin/autoscaler report --db sqlite:///out/backtest.db --source simulation \
  --from 2026-01-05 --to 2026-01-19 --by day --format html --output out/servegen-report.html
echo "plot: out/servegen.html, timeline: out/servegen-timeline.csv, report: out/servegen-report.html" >&2
