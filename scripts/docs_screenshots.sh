#!/usr/bin/env bash
# Regenerates the docs' pictures from the current code, checked in a real browser (Debian's
# headless Chromium at 1280 px, which `apt-get install -y chromium` brings):
#   docs/servegen-report.png  the HTML cost report of the 14-day backtest (README, docs/ledger.md)
#   docs/servegen-plot.png    the backtest's --plot (docs/traces.md)
#   docs/servegen-frontier.png  simulate --frontier --plot of the 14-day trace (docs/backtest.md)
# Uses out/backtest.db and out/servegen.html from scripts/backtest.sh, running it first when missing.
# Exits 1 when a page overflows the window or a legend meets its plot (scripts/report_screenshot.py).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f out/backtest.db ] || [ ! -f out/servegen.html ]; then
  scripts/backtest.sh >/dev/null
fi
.venv/bin/autoscaler report --db sqlite:///out/backtest.db --source simulation \
  --from 2026-01-05 --to 2026-01-19 --by day --format html --output out/servegen-report.html
.venv/bin/python scripts/report_screenshot.py out/servegen-report.html docs/servegen-report.png --height 1560
.venv/bin/python scripts/report_screenshot.py out/servegen.html docs/servegen-plot.png --height 420
.venv/bin/autoscaler simulate --policy policies/default.yaml --trace examples/traces/servegen-m-small \
  --frontier --plot out/frontier.html >/dev/null
.venv/bin/python scripts/report_screenshot.py out/frontier.html docs/servegen-frontier.png --height 800
