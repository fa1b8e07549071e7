#!/usr/bin/env python3
"""Check an HTML page in a real browser and take the docs' screenshot of it.

    .venv/bin/python scripts/report_screenshot.py out/servegen-report.html docs/servegen-report.png
    .venv/bin/python scripts/report_screenshot.py out/servegen.html docs/servegen-plot.png --height 480

Runs Debian's headless Chromium (`apt-get install -y chromium`) at a 1280 px wide window:
1. loads a copy of the page with a small script that measures the layout (the page's width
   against the window's, the right edge of every table cell and SVG against the window, and
   whether the chart's legend box meets its plot area), reads the result with --dump-dom, and
   exits 1 naming what overflows or overlaps;
2. takes the screenshot of the page itself (no script) into the PNG named.

No network: the page is self-contained, Chromium runs with a fresh profile and every background
service off.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--force-device-scale-factor=1"]

MEASURE = """
<script>
window.addEventListener('load', () => {
  const vw = window.innerWidth, out = {viewport: vw, page: document.documentElement.scrollWidth, over: []};
  for (const el of document.querySelectorAll('th, td, svg, .big, h1, p')) {
    const r = el.getBoundingClientRect();
    if (r.right > vw + 0.5) out.over.push(el.tagName + ' "' + el.textContent.trim().slice(0, 30) + '" ends at ' + Math.round(r.right));
  }
  for (const box of document.querySelectorAll('.table')) {
    if (box.scrollWidth > box.clientWidth + 0.5) out.over.push('table scrolls: ' + box.scrollWidth + ' > ' + box.clientWidth);
  }
  out.overlap = [];
  for (const svg of document.querySelectorAll('svg')) {
    const plot = svg.querySelector('#plot-area');
    if (!plot) continue;
    const p = plot.getBoundingClientRect();
    for (const t of svg.querySelectorAll('.legend, .legend *')) {
      const r = t.getBoundingClientRect();
      if (r.bottom > p.top && r.top < p.bottom && r.right > p.left && r.left < p.right) out.overlap.push(t.textContent);
    }
  }
  const pre = document.createElement('pre'); pre.id = 'layout-result'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("chromium is not installed: apt-get install -y chromium")


def run(args: list[str], profile: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=timeout)


def measure(page: Path, width: int, height: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.html"
        probe.write_text(page.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8")
        p = run([f"--window-size={width},{height}", "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
                str(Path(tmp) / "profile"))
    found = re.search(r'<pre id="layout-result">(.*?)</pre>', p.stdout, re.S)
    if not found:
        sys.exit(f"chromium gave no layout result (exit {p.returncode}): {p.stderr.strip()[-300:]}")
    import html

    return json.loads(html.unescape(found.group(1)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", type=Path, help="the HTML page")
    ap.add_argument("png", type=Path, nargs="?", help="write the screenshot here")
    ap.add_argument("--width", type=int, default=1280, help="window width in px (default 1280)")
    ap.add_argument("--height", type=int, default=1400, help="window height in px (default 1400)")
    args = ap.parse_args()
    result = measure(args.page, args.width, args.height)
    problems = []
    if result["page"] > result["viewport"]:
        problems.append(f"the page is {result['page']} px wide in a {result['viewport']} px window")
    problems += result["over"] + [f"legend meets the plot: {t}" for t in result["overlap"]]
    if args.png:
        with tempfile.TemporaryDirectory() as tmp:
            p = run([f"--window-size={args.width},{args.height}", f"--screenshot={args.png.resolve()}",
                     args.page.resolve().as_uri()], str(Path(tmp) / "profile"))
        if p.returncode != 0 or not args.png.exists():
            sys.exit(f"chromium screenshot failed (exit {p.returncode}): {p.stderr.strip()[-300:]}")
    if problems:
        print(f"{args.page}: layout problems at {args.width} px:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    print(f"{args.page}: fits {args.width} px (page {result['page']} px), legend clear of the plot"
          + (f"; screenshot {args.png}" if args.png else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
