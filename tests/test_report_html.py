"""The HTML report and the backtest plot as a reader sees them (issue 12): the table fits the page,
the legend stays off the lines, ticks are round, times have no seconds, PNG is refused.

The real browser check is scripts/report_screenshot.py (Debian's headless Chromium at 1280 px; it
regenerates docs/servegen-report.png). Here, for CI, a model of the same layout: the table's
narrowest width from its text and the page's own CSS, against the page's content width.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from autoscaler.charts import nice_step, nice_ticks, time_ticks
from autoscaler.cli import main
from autoscaler.ledger.store import Ledger
from tests.support.ledger_runs import T0, record_live

ROOT = Path(__file__).resolve().parents[1]
AZURE = ROOT / "examples/traces/azure-2023-conv/AzureLLMInferenceTrace_conv.csv"


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('html') / 'ledger.db'}"
    with Ledger(url) as ledger:
        record_live(ledger)
    out = tmp_path_factory.mktemp("page") / "r.html"
    assert main(["report", "--db", url, "--from", "2026-01-05", "--to", "2026-01-19", "--format", "html",
                 "--output", str(out)]) == 0
    return out.read_text()


# ----------------------------------------------------------------------------- ticks
@pytest.mark.parametrize("vmax, ticks", [
    (88, [0, 25, 50, 75, 100]),  # not 0/22/44/66/88 nor 0/30/59/88
    (118, [0, 50, 100, 150]),
    (6, [0, 2, 4, 6]),
    (0.3, [0, 0.1, 0.2, 0.3]),
    (1500, [0, 500, 1000, 1500]),
])
def test_value_ticks_are_round_numbers(vmax, ticks):
    assert nice_ticks(vmax, 4) == pytest.approx(ticks)
    assert nice_step(vmax, 4) == pytest.approx(ticks[1])


def test_time_ticks_fall_on_round_local_times_and_have_no_seconds():
    lo = T0 + 37.123456  # an odd start, as a trace's first arrival is
    # 14 days: ticks at local midnights (Berlin), every 2 days
    ticks = time_ticks(lo, lo + 14 * 86400, ZoneInfo("Europe/Berlin"), 7)
    assert 4 <= len(ticks) <= 7
    for t, label in ticks:
        local = datetime.fromtimestamp(t, ZoneInfo("Europe/Berlin"))
        assert (local.hour, local.minute, local.second, local.microsecond) == (0, 0, 0, 0)
        assert re.fullmatch(r"\w{3} \d{2} \w{3}", label), label
    # one hour: every 10 minutes, labelled HH:MM
    ticks = time_ticks(lo, lo + 3600, timezone.utc, 7)
    assert [label for _, label in ticks] == ["00:10", "00:20", "00:30", "00:40", "00:50", "01:00"]
    assert all(t % 600 == 0 for t, _ in ticks)


def _svg_numbers(svg: str, cls: str) -> list[str]:
    return re.findall(rf'class="{cls}"[^>]*>([^<]+)<', svg)


def test_the_report_chart_has_round_ticks_a_clear_legend_and_no_seconds(page):
    svg = page[page.index("<svg"):page.index("</svg>")]
    load = [float(v.replace(",", "")) for v in _svg_numbers(svg, "tick-load")]
    step = load[1] - load[0]
    assert load[0] == 0 and all(abs(b - a - step) < 1e-9 for a, b in zip(load, load[1:]))
    mantissa = step / 10 ** int(f"{step:e}".split("e")[1])
    assert round(mantissa, 6) in (1, 2, 2.5, 5)
    times = _svg_numbers(svg, "tick-time")
    assert times and all(re.fullmatch(r"\w{3} \d{2} \w{3}|\d{2} \w{3}( \d{2}:00)?|\d{2}:\d{2}", t) for t in times), times
    _legend_above_the_plot(svg)


def _legend_above_the_plot(svg: str) -> None:
    plot_top = float(re.search(r'id="plot-area"[^>]* y="([\d.]+)"', svg).group(1))
    legend = svg[svg.index('class="legend"'):]
    legend = legend[:legend.index("</g>")]
    ys = [float(y) for y in re.findall(r'\by[12]?="([\d.]+)"', legend)]
    heights = [float(h) for h in re.findall(r'height="([\d.]+)"', legend)]
    assert ys and max(ys) + (max(heights) if heights else 0) < plot_top  # text baselines and boxes above it


# ----------------------------------------------------------------------------- the table fits
def _css(page: str, selector: str) -> str:
    found = re.search(rf"(?m)^\s*{re.escape(selector)}\s*\{{([^}}]*)\}}", page)
    return found.group(1) if found else ""


def _em(css: str, prop: str, default: float) -> list[float]:
    found = re.search(rf"{prop}:\s*([^;]+);", css)
    if not found:
        return [default]
    return [float(v[:-2]) if v.endswith("em") else float(v.removesuffix("px") or 0) / 16
            for v in found.group(1).split()]


def table_min_width_px(page: str) -> float:
    """The narrowest the table can be: per column, its widest unbreakable text (a header breaks
    between words only if the CSS lets it), at generous average glyph widths (0.56 em for the
    digits of a cell, 0.62 em for a bold header), plus the cells' horizontal padding."""
    font = 16 * _em(_css(page, "table"), "font-size", 1.0)[0]
    pad = _em(_css(page, "th, td"), "padding", 0.0)
    horizontal = 2 * (pad[1] if len(pad) > 1 else pad[0]) * font
    th_wraps = "white-space: normal" in _css(page, "th")
    head = re.findall(r"<th>([^<]*)</th>", page)
    body = [re.findall(r"<td>([^<]*)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", page, re.S)]
    body = [r for r in body if r]
    total = 0.0
    for i, title in enumerate(head):
        words = title.split() if th_wraps else [title]
        head_w = max(len(w) for w in words) * 0.62 * font
        cell_w = max(len(r[i]) for r in body) * 0.56 * font
        total += max(head_w, cell_w) + horizontal
    return total


def test_the_table_fits_the_page_at_1280_px(page):
    body = _css(page, "body")
    max_width = float(re.search(r"max-width:\s*(\d+)px", body).group(1))
    padding = 2 * 16 * _em(body, "padding", 0.0)[-1]  # "0 1em": left and right
    content = min(max_width, 1280 - 2 * 16) - padding
    assert len(re.findall(r"<th>", page)) == 12
    assert table_min_width_px(page) <= content
    assert '<div class="table">' in page and ".table { overflow-x: auto" in page  # never off the page


# ----------------------------------------------------------------------------- the backtest plot
def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autoscaler", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)


def test_the_backtest_plot_has_round_ticks_times_without_seconds_and_a_clear_legend(tmp_path):
    plot, tl = tmp_path / "p.svg", tmp_path / "t.csv"
    p = run_cli("simulate", "--policy", "policies/default.yaml", "--trace", str(AZURE), "--plot", str(plot),
                "--timeline-out", str(tl))
    assert p.returncode == 0, p.stderr
    svg = plot.read_text()
    times = _svg_numbers(svg, "tick-time")
    assert len(times) >= 3 and all(re.fullmatch(r"\d{2}:\d{2}", t) for t in times), times
    demand = [float(v) for v in _svg_numbers(svg, "tick-demand")]
    assert demand == nice_ticks(demand[-1], 4) and demand[0] == 0
    _legend_above_the_plot(svg)
    assert not re.search(r"T\d{2}:\d{2}:\d{2}\.\d+Z", tl.read_text())  # no microseconds in the timeline either


def test_a_png_plot_is_refused_before_any_work(tmp_path):
    started = time.monotonic()
    png = tmp_path / "p.png"
    p = run_cli("simulate", "--policy", "policies/default.yaml", "--trace", "examples/traces/servegen-m-small",
                "--compare", "--plot", str(png))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "PNG is not drawn; use .html or .svg" in p.stderr
    assert not png.exists() and time.monotonic() - started < 8  # the 14-day replay (10+ s) never ran
