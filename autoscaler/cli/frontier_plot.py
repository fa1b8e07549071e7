"""The frontier as a picture: saving against SLO gap, one curve a controller (``simulate --frontier
--plot``), as an SVG, or an HTML page in the cost report's style (its template and CSS).

x: SLO attainment below always-on's, in percentage points (right is worse; the SLO's bar is a
dashed line); y: node-hours saved against always-on, in percent (up is cheaper). Ours is the thick
line with its budgets written at the points: a filled point is one that nothing dominates, a
hollow one is dominated, the ringed one is recommended. References far to the right (peers that
lose many points of SLO) would squash ours into the corner: the axis stops at a round value past
ours and the bar, and what lies beyond it is named at the bottom.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from autoscaler.charts import nice_step, tick_label
from autoscaler.errors import BadInput
from autoscaler.ledger.html_template import PAGE
from autoscaler.sim.backtest import PEER_NAMES, peer_knob
from autoscaler.sim.frontier import BUDGET_KEY, SLO_BAR_PP, budget_text

OURS = "#1f5fa8"
COLORS = ("#c0620b", "#2e8b57", "#8e44ad", "#b03a2e", "#7f8c8d", "#d4a017", "#16a085", "#34495e")
NAMES = {"hpa": "HPA", "kpa": "Knative KPA", "apa": "AIBrix APA", "ray_serve": "Ray Serve",
         "dynamo_planner": "Dynamo planner", "aibrix_kpa": "AIBrix KPA"}


def curves(fr: dict[str, Any]) -> list[dict[str, Any]]:
    """The controllers to draw: name, colour, points [(gap pp, saving %, label)], in legend order.
    Ours first; then HPA's sweep and each peer's (its sweep, or its default alone); the oracles and
    always-on as single points."""
    ref = fr["reference"]
    static_slo = ref["static"]["slo_attainment"]

    def xy(p: dict[str, Any], label: str) -> tuple[float, float, str]:
        return 100 * (static_slo - p["slo_attainment"]), p["savings_pct"], label

    out = [{"name": "ours (budget %)", "color": OURS, "ours": True,
            "points": [xy(p, budget_text(p[BUDGET_KEY])) for p in fr["points"]]}]
    others = [("hpa", [(p, f"{p['target_utilization']:g}") for p in ref["hpa_sweep"]])]
    for peer in PEER_NAMES:
        sweep = ref.get(f"{peer}_sweep")
        if sweep:
            knob = peer_knob(peer)
            # (a time-constant grid's point is labelled by both values: 0.5/300)
            others.append((peer, [(p, f"{p[knob]:g}" + (f"/{p[tk]:g}" if (tk := p.get("time_knob")) and tk in p else ""))
                                  for p in sweep]))
        elif ref.get(peer):
            others.append((peer, [(ref[peer], "")]))
    for i, (name, pts) in enumerate(others):
        out.append({"name": NAMES.get(name, name), "color": COLORS[i % len(COLORS)], "ours": False,
                    "points": _efficient([xy(p, label) for p, label in pts])})
    singles = [("always-on (0, 0)", ref["static"]), ("oracle", ref["oracle"])]
    if ref.get("oracle_rate"):
        singles.append(("rate oracle", ref["oracle_rate"]))
    for name, p in singles:
        out.append({"name": name, "color": "#444", "ours": False, "single": True, "points": [xy(p, "")]})
    return out


def svg_frontier(fr: dict[str, Any], title: str, show_title: bool = True) -> str:
    w, h, ml, mr, mt, mb = 900, 480, 60, 24, 74, 72
    pw, ph = w - ml - mr, h - mt - mb
    lines = curves(fr)
    ours_x = [x for x, _, _ in lines[0]["points"]]
    # The x axis: from the best SLO (0 or below) to a round value past ours and the bar (x 1.25).
    reach = max([*ours_x, 2 * SLO_BAR_PP]) * 1.25
    x_step = nice_step(reach - min(0.0, *ours_x), 5)
    # Left: 0, or a step further when some point beats always-on's SLO by more than a tenth of a step
    # (the oracle's -0.001 pp is drawn on the axis, not given a whole empty step).
    best = min([0.0, *(x for c in lines for x, _, _ in c["points"])])
    x_lo = 0.0 if best > -0.1 * x_step else x_step * _floor(best / x_step)
    x_hi = x_step * _ceil(reach / x_step)
    shown = [(c, p) for c in lines for p in c["points"] if p[0] <= x_hi + 1e-9]
    ys = [y for _, (_, y, _) in shown] + [0.0]
    y_step = nice_step(max(ys) - min(ys) or 1.0, 5)
    y_lo, y_hi = y_step * _floor(min(ys) / y_step), y_step * _ceil(max(ys) / y_step + 1e-9)
    if y_hi <= y_lo:
        y_hi = y_lo + y_step

    def px(x: float) -> float:
        return ml + (x - x_lo) / (x_hi - x_lo) * pw

    def py(y: float) -> float:
        return mt + ph - (y - y_lo) / (y_hi - y_lo) * ph

    esc = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="100%" role="img" '
             f'aria-label="{esc(title)}" font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{h}" fill="white"/>']
    if show_title:
        parts.append(f'<text x="{ml}" y="16" font-size="14">{esc(title)}</text>')
    # The legend: a band above the plot area, two rows, never over a line.
    parts.append('<g class="legend">')
    lx, ly = ml, 36
    for c in lines:
        label = c["name"]
        width = 26 + 7 * len(label)
        if lx + width > w - mr:
            lx, ly = ml, ly + 18
        if c.get("single"):
            parts.append(f'<circle cx="{lx + 7}" cy="{ly - 4}" r="4" fill="{c["color"]}"/>')
        else:
            sw = 3 if c["ours"] else 1.5
            parts.append(f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 16}" y2="{ly - 4}" stroke="{c["color"]}" '
                         f'stroke-width="{sw}"/>')
        parts.append(f'<text x="{lx + 20}" y="{ly}" fill="{c["color"]}">{esc(label)}</text>')
        lx += width
    parts.append("</g>")
    parts.append(f'<rect id="plot-area" x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#ccc"/>')
    # Grid and ticks.
    for v in _steps(x_lo, x_hi, x_step):
        parts.append(f'<line x1="{px(v):.1f}" y1="{mt}" x2="{px(v):.1f}" y2="{mt + ph}" stroke="#eee"/>'
                     f'<text x="{px(v):.1f}" y="{mt + ph + 16}" text-anchor="middle" fill="#555">{tick_label(v)}</text>')
    for v in _steps(y_lo, y_hi, y_step):
        parts.append(f'<line x1="{ml}" y1="{py(v):.1f}" x2="{ml + pw}" y2="{py(v):.1f}" stroke="#eee"/>'
                     f'<text x="{ml - 6}" y="{py(v) + 4:.1f}" text-anchor="end" fill="#555">{tick_label(v)}</text>')
    parts.append(f'<text x="{ml + pw / 2:.0f}" y="{mt + ph + 34}" text-anchor="middle" fill="#333">SLO attainment '
                 f'below always-on (percentage points; right is worse)</text>')
    parts.append(f'<text transform="translate(14 {mt + ph / 2:.0f}) rotate(-90)" text-anchor="middle" '
                 f'fill="#333">node-hours saved (%)</text>')
    bar = px(SLO_BAR_PP)
    parts.append(f'<line id="slo-bar" x1="{bar:.1f}" y1="{mt}" x2="{bar:.1f}" y2="{mt + ph}" stroke="#b03a2e" '
                 f'stroke-dasharray="5 4"/><text x="{bar + 4:.1f}" y="{mt + 14}" fill="#b03a2e">the SLO\'s '
                 f'{SLO_BAR_PP:g} pp</text>')
    # The curves: references under ours.
    recommended = (fr.get("recommended") or {}).get(BUDGET_KEY)
    for c in lines[1:] + lines[:1]:
        pts = [(x, y, label) for x, y, label in c["points"] if x <= x_hi + 1e-9]
        if len(pts) > 1:
            ordered = sorted(pts) if not c["ours"] else pts
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _ in ordered)
            parts.append(f'<polyline fill="none" stroke="{c["color"]}" stroke-width="{3 if c["ours"] else 1.5}" '
                         f'points="{path}"/>')
        pts = [(max(x, x_lo), y, label) for x, y, label in pts]
        labels = _point_labels([(px(x), py(y), label) for x, y, label in pts]) if c["ours"] else {}
        for i, (x, y, label) in enumerate(pts):
            if c["ours"]:
                point = fr["points"][[budget_text(p[BUDGET_KEY]) for p in fr["points"]].index(label)]
                fill = OURS if point["non_dominated"] else "white"
                cls = "ours non-dominated" if point["non_dominated"] else "ours dominated"
                parts.append(f'<circle class="{cls}" cx="{px(x):.1f}" cy="{py(y):.1f}" r="5" fill="{fill}" '
                             f'stroke="{OURS}" stroke-width="2"/>')
                if recommended is not None and point[BUDGET_KEY] == recommended:
                    parts.append(f'<circle id="recommended" cx="{px(x):.1f}" cy="{py(y):.1f}" r="10" fill="none" '
                                 f'stroke="{OURS}" stroke-width="1.5"/>')
                if i in labels:
                    parts.append(f'<text x="{px(x) + 8:.1f}" y="{py(y) - 8:.1f}" fill="{OURS}" font-weight="bold">'
                                 f'{esc(labels[i])}</text>')
            else:
                parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{c["color"]}"/>')
                if c.get("single") and not c["name"].startswith("always-on"):  # always-on is (0, 0), the corner
                    parts.append(f'<text x="{px(x) + 6:.1f}" y="{py(y) + 14:.1f}" fill="#444">{esc(c["name"])}</text>')
    beyond = []
    for c in lines:
        far = [x for x, _, _ in c["points"] if x > x_hi + 1e-9]
        if far:
            lost = f"{min(far):.0f}-{max(far):.0f}" if len(far) > 1 else f"{far[0]:.0f}"
            beyond.append(f"{c['name']} {len(far)} of {len(c['points'])} ({lost} pp)")
    if beyond:
        text = "right of the chart: " + ", ".join(beyond)
        cut = text.rfind(", ", 0, 130) if len(text) > 130 else len(text)
        for k, part in enumerate((text[:cut], text[cut + 2:])):
            if part:
                parts.append(f'<text class="beyond" x="{ml}" y="{h - 22 + 14 * k}" fill="#555" font-size="11">'
                             f'{esc(_shorten(part, 140))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _efficient(pts: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """A reference's settings that none of its others beats (as much saving or more for no more SLO
    lost), by SLO lost: its own frontier, the line drawn for it. A grid of targets x time constants
    drawn whole zigzags between its time constants; every setting stays in the table."""
    out: list[tuple[float, float, str]] = []
    for p in sorted(pts, key=lambda q: (q[0], -q[1])):
        if not out or p[1] > out[-1][1]:
            out.append(p)
    return out


def _point_labels(pts: list[tuple[float, float, str]]) -> dict[int, str]:
    """Our budgets written once per place (``pts`` in pixels): neighbouring points closer than a
    label's height share one label, e.g. '0.1-4%' when all six keep the ceiling on."""
    out: dict[int, str] = {}
    i = 0
    while i < len(pts):
        j = i
        while j + 1 < len(pts) and math.hypot(pts[j + 1][0] - pts[j][0], pts[j + 1][1] - pts[j][1]) < 14:
            j += 1
        out[i] = f"{pts[i][2]}%" if j == i else f"{pts[i][2]}-{pts[j][2]}%"
        i = j + 1
    return out


def _steps(lo: float, hi: float, step: float) -> list[float]:
    """The round values from ``lo`` to ``hi`` (both multiples of ``step``)."""
    return [round(lo + i * step, 10) for i in range(round((hi - lo) / step) + 1)]


def _floor(v: float) -> int:
    return math.floor(v + 1e-9)


def _ceil(v: float) -> int:
    return math.ceil(v - 1e-9)


def _shorten(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def html_frontier(fr: dict[str, Any], title: str, rows: list[list[str]], header: list[str]) -> str:
    """The frontier page: the recommendation, the chart, the table of points and references, the
    warnings and the policy diff, in the cost report's template."""
    esc = html.escape
    rec = fr.get("recommended")
    headline = f"<p><b>{esc(fr['advice'][0].upper() + fr['advice'][1:])}.</b></p>"
    chart = (f"<figure>{svg_frontier(fr, title, show_title=False)}<figcaption>Each line is one controller swept over its "
             "settings (a reference's line joins those none of its others beats; the table has them all); ours over the SLO error budget (filled: no other point reaches its SLO for fewer "
             "node-hours; ringed: recommended). Up is cheaper, right loses more SLO.</figcaption></figure>")
    table = ["<table><thead><tr>" + "".join(f"<th>{esc(t)}</th>" for t in header) + "</tr></thead><tbody>"]
    # The setting (a time-constant grid's is long: "target 0.5, scale_down_delay_s 300", which may break
    # after an underscore) and the last column (what dominates a point) may wrap: the report's cells do not.
    wrap = "<td style='white-space: normal'>"
    table += ["<tr>" + f"<td>{esc(r[0])}</td>{wrap}{esc(r[1]).replace('_', '_<wbr>')}</td>"
              + "".join(f"<td>{esc(c)}</td>" for c in r[2:-1]) + f"{wrap}{esc(r[-1])}</td></tr>" for r in rows]
    table.append("</tbody></table>")
    notes = "".join(f"<li>{esc(n)}</li>" for n in fr["warnings"])
    if rec is not None and rec.get("policy_diff"):
        notes += f"<li>The policy diff that sets it:<pre style='white-space: pre-wrap'>{esc(rec['policy_diff'])}</pre></li>"
    return PAGE.substitute(title=esc(title), headline=headline, chart=chart, table="\n".join(table),
                           notes=f"<ul class='notes'>{notes}</ul>")


def write_frontier_plot(path: str, fr: dict[str, Any], title: str, rows: list[list[str]], header: list[str]) -> None:
    suffix = Path(path).suffix.lower()
    text = svg_frontier(fr, title) if suffix == ".svg" else html_frontier(fr, title, rows, header)
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"{path}: cannot write: {exc.strerror}") from exc
