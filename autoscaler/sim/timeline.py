"""Per-minute timeline of a replay (CSV) and a plot of demand against active nodes (HTML/SVG or PNG)."""

from __future__ import annotations

import csv
import html
import math
import struct
import zlib
from pathlib import Path

import numpy as np

from autoscaler.core.types import iso
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
            "time": iso(trace.start_epoch_s + t0 + 60.0 * m),
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
    """Demand (requests in the system) against active nodes, on one time axis."""
    pts = _downsample(rows, 1200)
    w, h, left, right, top, bottom = 1200, 360, 60, 60, 30, 40
    iw, ih = w - left - right, h - top - bottom
    n = max(1, len(pts) - 1)
    dmax = max(1.0, max(p["demand"] for p in pts), max_nodes * requests_per_node)

    def x(i: int) -> float:
        return left + iw * i / n

    def y_demand(v: float) -> float:
        return top + ih * (1 - v / dmax)

    def y_nodes(v: float) -> float:
        return top + ih * (1 - v / max_nodes)

    demand_path = " ".join(f"{x(i):.1f},{y_demand(p['demand']):.1f}" for i, p in enumerate(pts))
    node_path = []
    for i, p in enumerate(pts):
        yy = y_nodes(p["active_nodes"])
        if i:
            node_path.append(f"{x(i):.1f},{y_nodes(pts[i - 1]['active_nodes']):.1f}")
        node_path.append(f"{x(i):.1f},{yy:.1f}")
    ticks = "".join(
        f'<text x="{w - right + 6}" y="{y_nodes(k) + 4:.1f}" font-size="11">{k}</text>'
        for k in range(0, max_nodes + 1, 2)
    )
    dticks = "".join(
        f'<text x="{left - 8}" y="{y_demand(v) + 4:.1f}" font-size="11" text-anchor="end">{v:.0f}</text>'
        for v in np.linspace(0, dmax, 5)
    )
    labels = (f'<text x="{left}" y="{h - 10}" font-size="11">{html.escape(pts[0]["time"])}</text>'
              f'<text x="{w - right}" y="{h - 10}" font-size="11" text-anchor="end">{html.escape(pts[-1]["time"])}</text>')
    return f"""<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">
<rect width="{w}" height="{h}" fill="white"/>
<text x="{left}" y="18" font-size="14" font-family="sans-serif">{html.escape(title)}</text>
<rect x="{left}" y="{top}" width="{iw}" height="{ih}" fill="none" stroke="#ccc"/>
<polyline fill="none" stroke="#e07b00" stroke-width="1" points="{demand_path}"/>
<polyline fill="none" stroke="#1f5fbf" stroke-width="2" points="{' '.join(node_path)}"/>
<g font-family="sans-serif" fill="#1f5fbf">{ticks}</g><g font-family="sans-serif" fill="#e07b00">{dticks}</g>
<g font-family="sans-serif" fill="#555">{labels}</g>
<text x="{left + 10}" y="{top + 16}" font-size="12" font-family="sans-serif" fill="#e07b00">demand: requests running + queued (left axis)</text>
<text x="{left + 10}" y="{top + 32}" font-size="12" font-family="sans-serif" fill="#1f5fbf">active nodes (right axis)</text>
</svg>"""


def _png(width: int, height: int, pixels: bytearray) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + bytes(pixels[y * width * 3:(y + 1) * width * 3]) for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def png_plot(rows: list[dict], max_nodes: int, requests_per_node: float, width: int = 1200, height: int = 300) -> bytes:
    """A plain raster of the same chart (no text): demand in orange, active nodes in blue, on white."""
    pts = _downsample(rows, width)
    pix = bytearray(b"\xff" * width * height * 3)
    dmax = max(1.0, max(p["demand"] for p in pts), max_nodes * requests_per_node)

    def put(x: int, y: int, rgb: tuple[int, int, int]) -> None:
        if 0 <= x < width and 0 <= y < height:
            o = (y * width + x) * 3
            pix[o:o + 3] = bytes(rgb)

    for gx in range(width):  # node grid lines
        for k in range(0, max_nodes + 1, 2):
            put(gx, int((height - 1) * (1 - k / max_nodes)), (225, 225, 225))
    n = max(1, len(pts) - 1)
    for i in range(len(pts) - 1):
        x0, x1 = int((width - 1) * i / n), int((width - 1) * (i + 1) / n)
        for series, scale, rgb, thick in (("demand", dmax, (224, 123, 0), 1), ("active_nodes", max_nodes, (31, 95, 191), 2)):
            y0 = int((height - 1) * (1 - pts[i][series] / scale))
            y1 = int((height - 1) * (1 - pts[i + 1][series] / scale))
            yy0, yy1 = (y0, y1) if series == "demand" else (y0, y0)
            for xx in range(x0, x1 + 1):
                frac = (xx - x0) / max(1, x1 - x0)
                yy = int(yy0 + (yy1 - yy0) * frac)
                for d in range(thick):
                    put(xx, yy + d, rgb)
            if series == "active_nodes" and y1 != y0:  # the step
                for yy in range(min(y0, y1), max(y0, y1) + 1):
                    put(x1, yy, rgb)
            elif series == "demand":
                for yy in range(min(y0, y1), max(y0, y1) + 1):
                    put(x1, yy, rgb)
    return _png(width, height, pix)


def write_plot(path: str, rows: list[dict], title: str, max_nodes: int, requests_per_node: float) -> None:
    suffix = Path(path).suffix.lower()
    try:
        if suffix == ".png":
            Path(path).write_bytes(png_plot(rows, max_nodes, requests_per_node))
        elif suffix in (".html", ".htm", ".svg"):
            svg = svg_plot(rows, title, max_nodes, requests_per_node)
            text = svg if suffix == ".svg" else (
                f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
                f"<body style='font-family:sans-serif'>{svg}</body></html>")
            Path(path).write_text(text, encoding="utf-8")
        else:
            raise BadInput(f"--plot {path}: unknown kind {suffix or '(none)'}; use .png, .html or .svg")
    except OSError as exc:
        raise BadInput(f"{path}: cannot write: {exc.strerror}") from exc
