"""Per-minute timeline of a replay (CSV) and a plot of demand against active nodes (HTML or SVG)."""

from __future__ import annotations

import csv
import html
import math
from datetime import timezone
from pathlib import Path

import numpy as np

from autoscaler.charts import nice_ticks, tick_label, time_ticks
from autoscaler.core.types import iso, parse_time
from autoscaler.errors import BadInput
from autoscaler.sim.engine import SimResult
from autoscaler.sim.traces import Trace

TIMELINE_COLUMNS = ("time", "arrivals", "demand", "groups_ready", "groups_starting", "groups_draining",
                    "active_nodes", "ttft_p99_s")


def minute_rows(trace: Trace, result: SimResult, nodes_per_group: int) -> list[dict]:
    """One row per minute of the span: arrivals, peak demand (running + queued), groups at the
    minute's last tick, TTFT p99 of the requests that arrived in it."""
    t0, t1 = result.span_s
    minutes = max(1, math.ceil((t1 - t0) / 60.0))
    idx = np.minimum(((trace.t_s - t0) // 60).astype(np.int64), minutes - 1)
    arrivals = np.bincount(idx, minlength=minutes)
    order = np.argsort(idx, kind="stable")
    bounds = np.searchsorted(idx[order], np.arange(minutes + 1))
    ttft_sorted = result.ttft_s[order]
    tick_idx = np.minimum(((result.tick_t - t0) // 60).astype(np.int64), minutes - 1)
    demand = np.zeros(minutes)
    np.maximum.at(demand, tick_idx, result.tick_demand)
    last_tick = np.full(minutes, -1)
    last_tick[tick_idx] = np.arange(len(tick_idx))  # later ticks overwrite earlier ones
    rows = []
    prev = 0
    for m in range(minutes):
        k = last_tick[m] if last_tick[m] >= 0 else prev
        prev = k
        seg = ttft_sorted[bounds[m]:bounds[m + 1]]
        ready = int(result.tick_ready[k]) if len(result.tick_ready) else 0
        starting = int(result.tick_starting[k]) if len(result.tick_starting) else 0
        draining = int(result.tick_draining[k]) if len(result.tick_draining) else 0
        rows.append({
            "time": iso(round(trace.start_epoch_s + t0 + 60.0 * m)),  # whole seconds: no microseconds
            "arrivals": int(arrivals[m]),
            "demand": float(demand[m]),
            "groups_ready": ready,
            "groups_starting": starting,
            "groups_draining": draining,
            "active_nodes": nodes_per_group * (ready + starting + draining),
            "ttft_p99_s": round(float(np.percentile(seg, 99)), 3) if len(seg) else "",
        })
    return rows


def write_timeline(path: str, rows: list[dict]) -> None:
    try:
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=TIMELINE_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    except OSError as exc:
        raise BadInput(f"{path}: cannot write: {exc.strerror}") from exc


def _downsample(rows: list[dict], width: int) -> list[dict]:
    """At most ``width`` points: each keeps the peak demand and the most nodes of its minutes."""
    if len(rows) <= width:
        return rows
    step = math.ceil(len(rows) / width)
    out = []
    for i in range(0, len(rows), step):
        chunk = rows[i:i + step]
        out.append({"time": chunk[0]["time"], "demand": max(r["demand"] for r in chunk),
                    "active_nodes": max(r["active_nodes"] for r in chunk)})
    return out


def svg_plot(rows: list[dict], title: str, max_nodes: int, requests_per_node: float) -> str:
    """Demand (requests in the system, left axis) against active nodes (right axis) over time.

    The legend sits in a band above the plot (it never covers a line); both value axes have round
    ticks and the time axis ticks on round UTC times without seconds (``autoscaler.charts``)."""
    pts = _downsample(rows, 1200)
    w, h, left, right, top, bottom = 1200, 380, 64, 64, 52, 40
    iw, ih = w - left - right, h - top - bottom
    times = [parse_time(p["time"]) for p in pts]
    lo, hi = times[0], times[-1] if times[-1] > times[0] else times[0] + 60
    demand_ticks = nice_ticks(max(1.0, max(p["demand"] for p in pts), max_nodes * requests_per_node), 4)
    node_ticks = nice_ticks(max(1, max_nodes), 6)
    dmax, nmax = demand_ticks[-1], node_ticks[-1]

    def x(t: float) -> float:
        return left + iw * (t - lo) / (hi - lo)

    def y_demand(v: float) -> float:
        return top + ih * (1 - v / dmax)

    def y_nodes(v: float) -> float:
        return top + ih * (1 - v / nmax)

    demand_path = " ".join(f"{x(t):.1f},{y_demand(p['demand']):.1f}" for t, p in zip(times, pts))
    node_path = []
    for i, (t, p) in enumerate(zip(times, pts)):
        if i:
            node_path.append(f"{x(t):.1f},{y_nodes(pts[i - 1]['active_nodes']):.1f}")
        node_path.append(f"{x(t):.1f},{y_nodes(p['active_nodes']):.1f}")
    grid = "".join(f'<line x1="{left}" y1="{y_demand(v):.1f}" x2="{w - right}" y2="{y_demand(v):.1f}" stroke="#eee"/>'
                   for v in demand_ticks)
    nticks = "".join(
        f'<text class="tick-nodes" x="{w - right + 8}" y="{y_nodes(k) + 4:.1f}" font-size="11">{tick_label(k)}</text>'
        for k in node_ticks
    )
    dticks = "".join(
        f'<text class="tick-demand" x="{left - 8}" y="{y_demand(v) + 4:.1f}" font-size="11" text-anchor="end">'
        f'{tick_label(v)}</text>'
        for v in demand_ticks
    )
    tticks = "".join(
        f'<line x1="{x(t):.1f}" y1="{top + ih}" x2="{x(t):.1f}" y2="{top + ih + 5}" stroke="#999"/>'
        f'<text class="tick-time" x="{x(t):.1f}" y="{top + ih + 18}" font-size="11" text-anchor="middle">'
        f'{html.escape(label)}</text>'
        for t, label in time_ticks(lo, hi, timezone.utc, 8)
    )
    legend = (f'<line x1="{left}" y1="36" x2="{left + 16}" y2="36" stroke="#e07b00" stroke-width="2"/>'
              f'<text x="{left + 22}" y="40" font-size="12" fill="#e07b00">demand: requests running + queued '
              f'(left axis)</text>'
              f'<line x1="{left + 330}" y1="36" x2="{left + 346}" y2="36" stroke="#1f5fbf" stroke-width="2"/>'
              f'<text x="{left + 352}" y="40" font-size="12" fill="#1f5fbf">active nodes (right axis)</text>'
              f'<text x="{w - right}" y="40" font-size="11" fill="#555" text-anchor="end">time (UTC)</text>')
    return f"""<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">
<rect width="{w}" height="{h}" fill="white"/>
<text x="{left}" y="18" font-size="14" font-family="sans-serif">{html.escape(title)}</text>
<g class="legend" font-family="sans-serif">{legend}</g>
<rect id="plot-area" x="{left}" y="{top}" width="{iw}" height="{ih}" fill="none" stroke="#ccc"/>
{grid}
<polyline id="demand" fill="none" stroke="#e07b00" stroke-width="1" points="{demand_path}"/>
<polyline id="active-nodes" fill="none" stroke="#1f5fbf" stroke-width="2" points="{' '.join(node_path)}"/>
<g font-family="sans-serif" fill="#1f5fbf">{nticks}</g><g font-family="sans-serif" fill="#e07b00">{dticks}</g>
<g font-family="sans-serif" fill="#555">{tticks}</g>
</svg>"""


PLOT_KINDS = (".html", ".htm", ".svg")


def check_plot_path(path: str) -> None:
    """Bad input before any work: the kind of plot must be one we draw."""
    suffix = Path(path).suffix.lower()
    if suffix == ".png":
        raise BadInput(f"--plot {path}: PNG is not drawn; use .html or .svg (a chart with axes and labels)")
    if suffix not in PLOT_KINDS:
        raise BadInput(f"--plot {path}: unknown kind {suffix or '(none)'}; use .html or .svg")


def write_plot(path: str, rows: list[dict], title: str, max_nodes: int, requests_per_node: float) -> None:
    check_plot_path(path)
    suffix = Path(path).suffix.lower()
    try:
        svg = svg_plot(rows, title, max_nodes, requests_per_node)
        text = svg if suffix == ".svg" else (
            f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
            f"<body style='font-family:sans-serif'>{svg}</body></html>")
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"{path}: cannot write: {exc.strerror}") from exc
