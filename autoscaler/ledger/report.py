"""Cost reports from the ledger: rows by day, week (Monday) or month in a time zone, and totals,
as a table, CSV, JSON, Markdown or one self-contained HTML page.

``build_report`` is pure (it gets the ledger's data and ``now``); the ``render_*`` functions turn
its result into text. Each run is charged with the cost model of the policy in force in it at the
time (``policy_loads``), so a report reads the same later and runs with different cost models can
share a period. Each day's figures are rounded once; weeks, months and totals are the sums of the
days as shown (``report_rows``).
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from autoscaler.charts import nice_ticks, tick_label, time_ticks
from autoscaler.core.types import parse_time
from autoscaler.errors import BadInput
from autoscaler.ledger.cost import (
    Figures,
    FleetSize,
    Prices,
    cost_of,
    moment,
    rounded,
    usage_between,
)
from autoscaler.ledger.html_template import PAGE
from autoscaler.ledger.store import PeriodData, RunInfo

BY = ("day", "week", "month")
FORMATS = ("table", "csv", "json", "md", "html")
ROW_KEYS = (
    "start", "end", "node_hours", "energy_kwh", "variable_cost", "fixed_cost", "total_cost",
    "baseline_variable_cost", "baseline_total_cost", "saving_variable", "saving_pct_variable", "saving_pct_total",
)  # fmt: skip
_DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


# ------------------------------------------------------------------------------ time helpers
def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise BadInput(f"--tz: {name!r} is not an IANA time zone (e.g. UTC, Europe/Berlin)") from None


def parse_when(text: str, tz: ZoneInfo, flag: str) -> float:
    """--from/--to: a bare date is midnight of that day in ``tz`` (a Berlin month is
    --from 2026-01-01 --to 2026-02-01 --tz Europe/Berlin); a time without a zone is UTC."""
    try:
        if _DATE_ONLY.match(text.strip()):
            return datetime.combine(date.fromisoformat(text.strip()), time(0), tzinfo=tz).timestamp()
        return parse_time(text)
    except ValueError:
        raise BadInput(f"{flag}: {text!r} is not a date or ISO 8601 time (e.g. 2026-01-05 or 2026-01-05T09:00:00Z)") from None


def _local_midnight(d: date, tz: ZoneInfo) -> Fraction:
    return moment(datetime.combine(d, time(0), tzinfo=tz).timestamp())


def buckets(start: Fraction, end: Fraction, by: str, tz: ZoneInfo) -> list[tuple[Fraction, Fraction]]:
    """[start, end) cut at local midnights (day), Monday midnights (week) or first-of-month
    midnights (month) in ``tz``; the first and last piece may be partial."""
    return [(lo, hi) for lo, hi, _, _ in periods(start, end, by, tz)]


def periods(start: Fraction, end: Fraction, by: str, tz: ZoneInfo,
            stop: Fraction | None = None) -> list[tuple[Fraction, Fraction, Fraction, Fraction]]:
    """Like ``buckets``, with each piece's whole calendar period: (lo, hi, period start, period end).
    ``stop``: no period starting at or after it (a report's rows end at now, whatever ``end`` says:
    a range to 9999-12-31 must not build the periods of eight thousand years)."""
    if by not in BY:
        raise BadInput(f"--by: {by!r} is not one of {', '.join(BY)}")
    d = datetime.fromtimestamp(float(start), tz).date()
    if by == "week":
        d -= timedelta(days=d.weekday())
    elif by == "month":
        d = d.replace(day=1)
    out = []
    edge = _local_midnight(d, tz)
    while edge < end and (stop is None or edge < stop):
        if by == "day":
            d += timedelta(days=1)
        elif by == "week":
            d += timedelta(days=7)
        else:
            d = (d.replace(day=28) + timedelta(days=4)).replace(day=1)
        nxt = _local_midnight(d, tz)
        lo, hi = max(edge, start), min(nxt, end)
        if hi > lo:
            out.append((lo, hi, edge, nxt))
        edge = nxt
    return out


def local_iso(t: Fraction | float, tz: ZoneInfo) -> str:
    value = datetime.fromtimestamp(float(t), tz)
    if value.microsecond == 0:
        text = value.isoformat()
    else:
        text = value.isoformat(timespec="microseconds")
    return text[:-6] + "Z" if text.endswith("+00:00") and tz.key == "UTC" else text


# ------------------------------------------------------------------------------ the report
@dataclass
class Row:
    start: Fraction
    end: Fraction
    figures: Figures
    runs: set[int] = field(default_factory=set)
    period_start: Fraction | None = None  # the whole calendar period (day, week, month) of the row
    period_end: Fraction | None = None
    # The row's days (in the report's zone; the range's first and last may be partial), each exact:
    # what is rounded, once per day, so a day reads the same in every report (report_rows).
    days: list[Figures] = field(default_factory=list)

    @property
    def period_hours(self) -> Fraction:
        lo = self.start if self.period_start is None else self.period_start
        hi = self.end if self.period_end is None else self.period_end
        return (hi - lo) / 3600


@dataclass
class Report:
    start: Fraction
    end: Fraction
    source: str
    by: str
    tz: ZoneInfo
    now: Fraction
    currency: str | None
    rows: list[Row]
    runs: list[RunInfo]
    open_intervals: int  # intervals still open, counted up to now
    active_nodes: list[tuple[float, int]]  # step points (t, active nodes from t on)
    load: list[tuple[float, float]]  # (t, demand)
    ceiling_nodes: int
    fixed_monthly: list[tuple[str, Decimal]]  # (currency, monthly fixed cost of the fleet) per cost model
    run_id: int | None = None
    # The last moment with data: now, or later when a finished run ends after now (a backtest of a
    # plan dated in the future); rows, coverage and the chart stop here.
    horizon: Fraction | None = None
    # Runs of other sources in the range (source -> run ids): the hint of an empty report.
    other_sources: dict[str, list[int]] = field(default_factory=dict)
    left_out: list[RunInfo] = field(default_factory=list)  # incomplete backtests (RunInfo.incomplete)

    @property
    def empty(self) -> bool:
        return not self.rows

    @property
    def totals(self) -> Figures:
        total = Figures()
        for row in self.rows:
            total = total + row.figures
        return total


def _run_label(run: RunInfo) -> str:
    return f"{run.id} ({run.source}" + (f" {run.label!r})" if run.label else ")")


def overlapping_runs(runs: list[RunInfo], start: float, end: float, now: float) -> list[tuple[RunInfo, RunInfo, float, float]]:
    """Pairs of runs that recorded the same time inside [start, end): (a, b, from, to)."""
    spans = []
    for r in runs:
        lo, hi = max(r.started_at, start), min(now if r.ended_at is None else r.ended_at, end)
        if hi > lo:
            spans.append((lo, hi, r))
    spans.sort(key=lambda s: (s[0], s[2].id))
    out = []
    for i, (_lo, hi, a) in enumerate(spans):
        for lo2, hi2, b in spans[i + 1:]:
            if lo2 >= hi:
                break
            out.append((a, b, lo2, min(hi, hi2)))
    return out


def refuse_overlaps(runs: list[RunInfo], start: float, end: float, now: float, tz: ZoneInfo) -> None:
    """BadInput naming the runs when two of them cover the same time: their hours would be added twice."""
    pairs = overlapping_runs(runs, start, end, now)
    if not pairs:
        return
    a, b, lo, hi = pairs[0]
    ids = sorted({r.id for p in pairs for r in p[:2]})
    more = f" ({len(pairs)} overlapping pairs among runs {', '.join(map(str, ids))})" if len(pairs) > 1 else ""
    raise BadInput(
        f"runs {_run_label(a)} and {_run_label(b)} both cover {local_iso(moment(lo), tz)} to "
        f"{local_iso(moment(hi), tz)}{more}: a report never adds runs that overlap in time; "
        f"report one with --run {a.id} or --run {b.id}"
    )


def _policies_within(policies: list, lo: Fraction, hi: Fraction, now: Fraction) -> list:
    """The policy versions of a run in force at some moment of [lo, hi)."""
    return [p for p in policies if moment(p.start) < hi and (now if p.end is None else moment(p.end)) > lo]


def _currency_advice(data: PeriodData, lo: Fraction, hi: Fraction, now: Fraction, tz: ZoneInfo) -> str:
    """How to report a range whose policies use two currencies: apart by run, or, when one run changed
    currency (a live edit of cost.currency, refused since; ledgers from before may hold one), on either
    side of the change, which --run cannot split."""
    for run in data.runs:
        inside = sorted(_policies_within(data.policies.get(run.id, []), lo, hi, now), key=lambda p: p.start)
        for before, after in zip(inside, inside[1:]):
            if before.cost["currency"] != after.cost["currency"]:
                at = local_iso(moment(after.start), tz)
                return (f"run {run.id} changed from {before.cost['currency']} to {after.cost['currency']} at {at}: "
                        f"report up to it (--to {at}) and from it (--from {at}) apart")
    return "report them apart with --run"


def build_report(
    data: PeriodData, start: float, end: float, *, by: str, tz: ZoneInfo, source: str, now: float,
    run_id: int | None = None, other_sources: dict[str, list[int]] | None = None,
) -> Report:
    """The report of [start, end) from the ledger's data (pure). Refuses overlapping runs; leaves
    out incomplete backtests (``RunInfo.incomplete``), and says so."""
    left_out = [r for r in data.runs if r.incomplete]
    if left_out:
        data = PeriodData([r for r in data.runs if not r.incomplete], data.policies, data.intervals, data.tokens,
                          data.load)
    refuse_overlaps(data.runs, start, end, now, tz)
    lo_all, hi_all, now_f = moment(start), moment(end), moment(now)
    horizon = data_horizon(data.runs, now_f)
    currencies: dict[str, list[int]] = {}
    fixed_monthly: dict[tuple[str, Decimal], None] = {}
    ceiling = 0
    for run in data.runs:
        # Only the policies in force within the range: an hour before a currency edit stays reportable
        # in its own currency, whatever the run did later (a live edit, or one reverted since).
        for p in _policies_within(data.policies.get(run.id, []), lo_all, min(hi_all, horizon), now_f):
            currencies.setdefault(p.cost["currency"], []).append(run.id)
            prices, size = Prices.from_cost(p.cost), FleetSize.from_fleet(p.fleet)
            monthly = prices.fixed_monthly_per_node * size.nodes + prices.fixed_monthly_fleet
            fixed_monthly[(prices.currency, rounded(monthly, "money"))] = None
            ceiling = max(ceiling, size.ceiling_nodes)
    if len(currencies) > 1:
        which = "; ".join(f"{c}: runs {', '.join(map(str, sorted(set(ids))))}" for c, ids in currencies.items())
        raise BadInput(f"the runs in this period use different currencies ({which}); "
                       + _currency_advice(data, lo_all, min(hi_all, horizon), now_f, tz))
    rows: list[Row] = []
    for b0, b1, p0, p1 in periods(lo_all, hi_all, by, tz, stop=horizon):
        if b0 >= horizon:
            break
        row = Row(b0, b1, Figures(), period_start=p0, period_end=p1)
        for d0, d1 in buckets(b0, b1, "day", tz):
            day = Figures()
            for run in data.runs:
                for p in data.policies.get(run.id, []):
                    s0 = moment(p.start)
                    s1 = now_f if p.end is None else moment(p.end)
                    lo, hi = max(d0, s0), min(d1, s1)  # s1: the policy's end, or now while it runs
                    if hi <= lo:
                        continue
                    usage = usage_between(data.intervals.get(run.id, []), data.tokens.get(run.id, []), lo, hi,
                                          now_f)
                    day = day + cost_of(usage, Prices.from_cost(p.cost), FleetSize.from_fleet(p.fleet))
                    row.runs.add(run.id)
            row.days.append(day)
            row.figures = row.figures + day
        # An interval open across several days is one interval of the row, not one per day.
        row.figures.open_intervals = max((d.open_intervals for d in row.days), default=0)
        rows.append(row)
    if not any(r.runs for r in rows):
        rows = []
    open_count = sum(
        1 for ivs in data.intervals.values() for iv in ivs
        if iv.end is None and moment(iv.start) < min(hi_all, now_f)
    )
    return Report(
        start=lo_all, end=hi_all, source=source, by=by, tz=tz, now=now_f,
        currency=next(iter(currencies), None), rows=rows, runs=list(data.runs), open_intervals=open_count,
        active_nodes=_active_steps(data, lo_all, min(hi_all, horizon), now_f), load=list(data.load),
        ceiling_nodes=ceiling, fixed_monthly=list(fixed_monthly), run_id=run_id,
        other_sources=dict(other_sources or {}), left_out=left_out, horizon=horizon,
    )


def data_horizon(runs: list[RunInfo], now: Fraction) -> Fraction:
    """Now, or the latest end of a finished run when it is later: a backtest dated after today (a
    plan for next March, a trace shifted to 2099) is reported like any other; hours after it hold
    nothing, so no rows are built for them (a range to 9999-12-31 stays short)."""
    return max([now] + [moment(r.ended_at) for r in runs if r.ended_at is not None])


def _active_steps(data: PeriodData, lo: Fraction, hi: Fraction, now: Fraction) -> list[tuple[float, int]]:
    """Active nodes over [lo, hi) as step points (t, count from t on)."""
    changes: dict[Fraction, int] = {}
    for ivs in data.intervals.values():
        for iv in ivs:
            if iv.state != "active":
                continue
            s, e = max(moment(iv.start), lo), min(now if iv.end is None else moment(iv.end), hi)
            if e > s:
                changes[s] = changes.get(s, 0) + 1
                changes[e] = changes.get(e, 0) - 1
    points, level = [], 0
    if lo not in changes:
        points.append((float(lo), 0))
    for t in sorted(changes):
        level += changes[t]
        points.append((float(t), level))
    return points


# ------------------------------------------------------------------------------ row values
# The figures kept exact and rounded only when shown, with the places of each (cost.PLACES).
_PRIMITIVES = {
    "node_hours_active": "hours", "node_hours_idle": "hours", "node_hours_off": "hours", "covered_hours": "hours",
    "energy_kwh": "kwh", "variable_cost": "money", "fixed_cost": "money", "baseline_node_hours": "hours",
    "baseline_variable_cost": "money", "prompt_tokens": "tokens", "generation_tokens": "tokens",
}


def _exact(fig: Figures) -> dict[str, Fraction]:
    return {
        "node_hours_active": fig.node_hours_by_state["active"],
        "node_hours_idle": fig.node_hours_by_state["idle"],
        "node_hours_off": fig.node_hours_by_state["off"],
        "covered_hours": fig.span_hours,
        "energy_kwh": fig.energy_kwh,
        "variable_cost": fig.variable_cost,
        "fixed_cost": fig.fixed_cost,
        "baseline_node_hours": fig.baseline_node_hours,
        "baseline_variable_cost": fig.baseline_variable_cost,
        "prompt_tokens": fig.prompt_tokens,
        "generation_tokens": fig.generation_tokens,
    }


def shown_day(day: Figures) -> dict[str, Decimal]:
    """A day's figures as shown: each rounded once, from its exact value, to the places of its kind
    (cost.PLACES). The same day rounds the same way in every report."""
    return {k: rounded(v, _PRIMITIVES[k]) for k, v in _exact(day).items()}


def _sum_parts(parts: list[dict[str, Decimal]]) -> dict[str, Decimal]:
    return {k: sum((p[k] for p in parts), Decimal(0)) for k in _PRIMITIVES}


def _saving_pct_node_hours(fig: Figures) -> Fraction | None:
    """The share of the always-on node-hours not switched on: the saving ``simulate`` and ``demo``
    report. Larger than the saving on variable cost, since stopped nodes still draw idle or off
    power: 14.1% of node-hours can be 13.9% of variable cost."""
    if not fig.baseline_node_hours:
        return None
    return 100 * (fig.baseline_node_hours - fig.node_hours) / fig.baseline_node_hours


def _row_values(start: Fraction, end: Fraction, fig: Figures, tz: ZoneInfo, parts: dict[str, Decimal],
                period_hours: Fraction, coverage_of: str) -> dict[str, Any]:
    """One row for output: ``parts`` are the rounded primitives; the rest is derived from them.
    ``coverage_of``: what ``coverage_pct`` is a share of: the row's whole day, week or month, or
    (the totals) the range asked."""
    total = parts["variable_cost"] + parts["fixed_cost"]
    base_total = parts["baseline_variable_cost"] + parts["fixed_cost"]
    return {
        "start": local_iso(start, tz),
        "end": local_iso(end, tz),
        "node_hours": parts["node_hours_active"],
        "energy_kwh": parts["energy_kwh"],
        "variable_cost": parts["variable_cost"],
        "fixed_cost": parts["fixed_cost"],
        "total_cost": total,
        "baseline_variable_cost": parts["baseline_variable_cost"],
        "baseline_total_cost": base_total,
        "saving_variable": parts["baseline_variable_cost"] - parts["variable_cost"],
        "saving_pct_variable": rounded(fig.saving_pct_variable, "pct"),
        "saving_pct_total": rounded(fig.saving_pct_total, "pct"),
        "saving_pct_node_hours": rounded(_saving_pct_node_hours(fig), "pct"),
        "node_hours_by_state": {
            "active": parts["node_hours_active"], "idle": parts["node_hours_idle"], "off": parts["node_hours_off"],
        },
        "baseline_node_hours": parts["baseline_node_hours"],
        "covered_hours": parts["covered_hours"],
        "period_hours": rounded(period_hours, "hours"),
        # the share of the row's whole calendar period (or of the asked range, for the totals) that
        # the ledger covers: every figure of the row is for these hours only
        "coverage_pct": rounded(fig.span_hours / period_hours * 100, "pct") if period_hours else None,
        "coverage_of": coverage_of,
        "prompt_tokens": int(parts["prompt_tokens"]),
        "generation_tokens": int(parts["generation_tokens"]),
        "cost_per_million_tokens": rounded(fig.cost_per_million_tokens, "per_token"),
        "open_intervals": fig.open_intervals,
        # the exact shares, for formats that show them with fewer places (rounded once, from these)
        "_exact_pct": {
            "saving_pct_variable": fig.saving_pct_variable, "saving_pct_total": fig.saving_pct_total,
            "saving_pct_node_hours": _saving_pct_node_hours(fig),
            "coverage_pct": fig.span_hours / period_hours * 100 if period_hours else None,
        },
    }


def report_rows(report: Report) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows and the totals as output values (Decimals). Each day is rounded once (``shown_day``);
    a week or month row is the sum of its days as shown, and the totals the sum of the rows. So a
    day's figures do not change with the range asked, every column adds up to its total to the last
    digit, and the totals are the same by day, week or month. (The totals may differ from the exact
    sum rounded once by a few cents: 14 days of 21.6986 fixed cost show 21.70 each, 303.80 in total.)
    Shares (%, cost per million tokens) are not sums: each is computed from its row's exact figures."""
    rows, row_parts = [], []
    for row in report.rows:
        parts = _sum_parts([shown_day(day) for day in row.days])
        out = _row_values(row.start, row.end, row.figures, report.tz, parts, row.period_hours, report.by)
        out["runs"] = sorted(row.runs)
        rows.append(out)
        row_parts.append(parts)
    horizon = report.now if report.horizon is None else report.horizon
    asked = (min(report.end, horizon) - report.start) / 3600 if horizon > report.start else Fraction(0)
    totals = _row_values(report.start, report.end, report.totals, report.tz, _sum_parts(row_parts), asked, "range")
    totals["open_intervals"] = report.open_intervals
    totals["runs"] = sorted({r for row in report.rows for r in row.runs})
    return rows, totals


# ------------------------------------------------------------------------------ renderers
def _num(value: Any) -> Any:
    """A Decimal as a JSON number with the digits it has (12.30 -> 12.3)."""
    if isinstance(value, Decimal):
        exponent = value.as_tuple().exponent  # an int, or "n"/"N"/"F" for NaN and infinity
        whole = isinstance(exponent, int) and exponent >= 0 and value == value.to_integral_value()
        return int(value) if whole else float(value)
    if isinstance(value, dict):
        return {k: _num(v) for k, v in value.items()}
    return value


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if not k.startswith("_")}


def render_json(report: Report) -> str:
    rows, totals = report_rows(report)
    doc = {
        "from": local_iso(report.start, report.tz),
        "to": local_iso(report.end, report.tz),
        "source": report.source,
        "currency": report.currency,
        "rows": [_num(_public(r)) for r in rows],
        "totals": _num(_public(totals)),
    }
    return json.dumps(doc, indent=2) + "\n"


CSV_COLUMNS = (
    "period", "start", "end", "node_hours", "node_hours_idle", "node_hours_off", "energy_kwh", "variable_cost",
    "fixed_cost", "total_cost", "baseline_node_hours", "baseline_variable_cost", "baseline_total_cost",
    "saving_variable", "saving_pct_variable", "saving_pct_total", "saving_pct_node_hours", "covered_hours",
    "period_hours", "coverage_pct", "coverage_of", "prompt_tokens", "generation_tokens", "cost_per_million_tokens", "open_intervals", "currency",
)  # fmt: skip


def _period_label(start: Fraction, end: Fraction, by: str, tz: ZoneInfo) -> str:
    s = datetime.fromtimestamp(float(start), tz)
    if by == "month":
        return s.strftime("%Y-%m")
    return s.date().isoformat()


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    out["node_hours_idle"] = row["node_hours_by_state"]["idle"]
    out["node_hours_off"] = row["node_hours_by_state"]["off"]
    return out


def render_csv(report: Report) -> str:
    rows, totals = report_rows(report)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows + [totals]:
        flat = _flat(row)
        flat["currency"] = report.currency or ""
        flat["period"] = "TOTAL" if row is totals else _period_label(
            parse_iso(row["start"]), parse_iso(row["end"]), report.by, report.tz)
        writer.writerow(["" if flat[c] is None else flat[c] for c in CSV_COLUMNS])
    return buf.getvalue()


def parse_iso(text: str) -> Fraction:
    return moment(parse_time(text))


def _money(x: Decimal | None) -> str:
    return "n/a" if x is None else f"{x:,.2f}"


def _pct(x: Fraction | Decimal | None) -> str:
    """A share as shown in tables and pages: one decimal, rounded half-up once from the exact value."""
    return "n/a" if x is None else f"{rounded(Fraction(x), 'pct_shown')}%"


def _hours(x: Decimal | None) -> str:
    """Hours for the totals' note: 336.0; under an hour two decimals (a three-minute demo run is
    0.05 hours, not 0.0)."""
    if x is None:
        return "n/a"
    return f"{x:,.2f}" if 0 < x < 1 else f"{x:,.1f}"


def empty_message(report: Report) -> str:
    what = f"run {report.run_id}" if report.run_id is not None else f"{report.source} runs"
    text = (f"No {what} recorded anything between {local_iso(report.start, report.tz)} and "
            f"{local_iso(report.end, report.tz)}: the report is empty.")
    if report.other_sources:
        hints = []
        for src, ids in sorted(report.other_sources.items()):
            runs = ", ".join(map(str, ids))
            hints.append(f"{src} runs ({runs}) cover this range: see them with --source {src}")
        text += " " + "; ".join(hints) + (" (one run alone: --run ID)." if report.run_id is None else ".")
    return text


def left_out_notes(report: Report) -> list[str]:
    return [f"Left out: {r.incomplete_text()}." for r in report.left_out]


def _notes(report: Report) -> list[str]:
    notes = []
    if report.empty:
        return [empty_message(report)] + left_out_notes(report)
    notes += left_out_notes(report)
    rows, totals = report_rows(report)
    if report.open_intervals:
        notes.append(f"* {report.open_intervals} node interval(s) were still open: they are counted up to "
                     f"{local_iso(report.now, report.tz)} (now), so these rows will still grow.")
    runs = totals["runs"]
    notes.append(
        f"Totals: the sum of the rows, for the {_hours(totals['covered_hours'])} hours that "
        f"{'run' if len(runs) == 1 else 'runs'} {', '.join(map(str, runs))} recorded, of the "
        f"{_hours(totals['period_hours'])} hours asked for ({_pct(totals['_exact_pct']['coverage_pct'])} covered)."
    )
    notes.append(f"Covered: on a row, the share of its whole {report.by} that runs recorded; on TOTAL, the share "
                 f"of the hours asked for (--from to --to, up to the last recorded hour).")
    partial = [r for r in rows if r["coverage_pct"] is None or r["coverage_pct"] < 100]
    if partial:
        notes.append(f"{len(partial)} of {len(rows)} rows cover less than their whole {report.by} (column "
                     f"Covered): every figure, fixed cost included, is for the covered hours only; hours no run "
                     f"recorded are missing from the report, not free.")
    notes.append("Variable cost is what turning nodes off saves (power and node-hour fees); fixed cost "
                 "(capital, support) is paid either way, so the saving on total cost is smaller.")
    notes.append("Baseline = the policy's ceiling always on over the same hours. A month counts as 730 hours. "
                 "Each day is rounded once, from exact figures, so it reads the same in any report; weeks, "
                 "months and the totals are sums of the days as shown, so every column adds up.")
    return notes


_TABLE_COLUMNS = (
    ("period", "Period"), ("node_hours", "Node-h"), ("energy_kwh", "kWh"), ("variable_cost", "Variable"),
    ("fixed_cost", "Fixed"), ("total_cost", "Total"), ("baseline_variable_cost", "Base var"),
    ("baseline_total_cost", "Base total"), ("saving_variable", "Saved var"), ("saving_pct_variable", "Var %"),
    ("saving_pct_total", "Total %"), ("coverage_pct", "Covered"),
)  # fmt: skip


def _cells(report: Report) -> tuple[list[list[str]], list[str]]:
    rows, totals = report_rows(report)
    out = []
    for row in rows + [totals]:
        cells = []
        for key, _ in _TABLE_COLUMNS:
            if key == "period":
                label = "TOTAL" if row is totals else _period_label(parse_iso(row["start"]), parse_iso(row["end"]),
                                                                      report.by, report.tz)
                cells.append(label + ("*" if row is not totals and row["open_intervals"] else ""))
            elif key.startswith("saving_pct") or key == "coverage_pct":
                cells.append(_pct(row["_exact_pct"][key]))
            elif key in ("node_hours",):
                cells.append(f"{row[key]:.2f}")
            elif key == "energy_kwh":
                cells.append(f"{row[key]:.1f}")
            else:
                cells.append(_money(row[key]))
        out.append(cells)
    return out, [title for _, title in _TABLE_COLUMNS]


def _headline(report: Report) -> list[str]:
    _, totals = report_rows(report)
    cur = report.currency or ""
    return [
        f"Cost {_money(totals['total_cost'])} {cur} (variable {_money(totals['variable_cost'])}, fixed "
        f"{_money(totals['fixed_cost'])}); always on at the ceiling: {_money(totals['baseline_total_cost'])} {cur}.",
        f"Saving: {_money(totals['saving_variable'])} {cur} = {_pct(totals['_exact_pct']['saving_pct_variable'])} of variable "
        f"cost, {_pct(totals['_exact_pct']['saving_pct_total'])} of total cost.",
        node_hours_sentence(totals),
    ]


def node_hours_sentence(totals: dict[str, Any]) -> str:
    """How the money saving relates to the node-hours saving that ``simulate`` and ``demo`` print."""
    return (f"Node-hours: {totals['node_hours']:,.2f} switched on of {totals['baseline_node_hours']:,.2f} always on, "
            f"{_pct(totals['_exact_pct']['saving_pct_node_hours'])} fewer (the 'saving' simulate and demo print); "
            f"the saving on variable cost differs because stopped nodes still draw idle or off power.")


def _title(report: Report) -> str:
    what = f"run {report.run_id}" if report.run_id is not None else f"source {report.source}"
    return (f"Fleet cost {local_iso(report.start, report.tz)} to {local_iso(report.end, report.tz)} "
            f"by {report.by} ({report.tz.key}), {what}")


def render_table(report: Report) -> str:
    lines = [_title(report)]
    if report.empty:
        return "\n".join(lines + _notes(report)) + "\n"
    cells, titles = _cells(report)
    widths = [max(len(t), *(len(r[i]) for r in cells)) for i, t in enumerate(titles)]
    fmt = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    lines += ["", f"Amounts in {report.currency}.", fmt(titles), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in cells[:-1]]
    lines += [fmt(["-" * w for w in widths]), fmt(cells[-1]), ""]
    lines += _headline(report) + [""] + _notes(report)
    return "\n".join(lines) + "\n"


def render_md(report: Report) -> str:
    lines = [f"### {_title(report)}", ""]
    if report.empty:
        return "\n".join(lines + _notes(report)) + "\n"
    lines += [" ".join(_headline(report)), ""]
    cells, titles = _cells(report)
    lines.append("| " + " | ".join(titles) + " |")
    lines.append("|" + "|".join([":---"] + ["---:"] * (len(titles) - 1)) + "|")
    for r in cells[:-1]:
        lines.append("| " + " | ".join(r) + " |")
    lines.append("| " + " | ".join(f"**{c}**" for c in cells[-1]) + " |")
    lines += ["", f"Amounts in {report.currency}."] + [f"- {n}" for n in _notes(report)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ html
def _downsample(points: list[tuple[float, float]], lo: float, hi: float, slots: int) -> list[tuple[float, float]]:
    """At most ``slots`` points: the highest value in each slot (peaks survive)."""
    if len(points) <= slots or hi <= lo:
        return points
    best: dict[int, tuple[float, float]] = {}
    for t, v in points:
        k = min(slots - 1, max(0, int((t - lo) / (hi - lo) * slots)))
        if k not in best or v > best[k][1]:
            best[k] = (t, v)
    return [best[k] for k in sorted(best)]


def chart_svg(report: Report) -> str:
    """Active nodes (left axis) and load = running + queued requests (right axis) over time.

    The legend sits in a band above the plot, so it never covers a line; both value axes have
    round ticks, the time axis ticks on round local times without seconds (``charts``)."""
    w, h, ml, mr, mt, mb = 900, 330, 56, 64, 34, 40
    pw, ph = w - ml - mr, h - mt - mb
    lo, hi = float(report.start), float(min(report.end, report.now if report.horizon is None else report.horizon))
    if hi <= lo:
        hi = lo + 1
    x = lambda t: ml + (min(max(t, lo), hi) - lo) / (hi - lo) * pw  # noqa: E731
    node_ticks = nice_ticks(max([report.ceiling_nodes] + [n for _, n in report.active_nodes] + [1]), 6)
    max_nodes = node_ticks[-1]
    yn = lambda n: mt + ph - n / max_nodes * ph  # noqa: E731
    load = _downsample([(t, v) for t, v in report.load if lo <= t <= hi], lo, hi, 600)
    load_ticks = nice_ticks(max([v for _, v in load] + [1.0]), 4)
    max_load = load_ticks[-1]
    yl = lambda v: mt + ph - v / max_load * ph  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="100%" role="img" '
             f'aria-label="Active nodes and load over time" font-family="sans-serif" font-size="12">']
    # legend: above the plot area
    legend = [("#1f5fa8", "rect", "active nodes (left axis)"), ("#c0620b", "line", "load (right axis)"),
              ("#888", "dash", f"always on ({report.ceiling_nodes} nodes)")]
    lx = ml
    parts.append('<g class="legend">')
    for color, kind, text in legend:
        if kind == "rect":
            parts.append(f'<rect x="{lx}" y="9" width="14" height="10" fill="{color}" fill-opacity="0.35" '
                         f'stroke="{color}"/>')
        else:
            dash = ' stroke-dasharray="4 3"' if kind == "dash" else ""
            parts.append(f'<line x1="{lx}" y1="14" x2="{lx + 14}" y2="14" stroke="{color}" stroke-width="2"{dash}/>')
        parts.append(f'<text x="{lx + 20}" y="18" fill="#444">{html.escape(text)}</text>')
        lx += 20 + 7 * len(text) + 24
    parts.append("</g>")
    parts.append(f'<rect id="plot-area" x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ccc"/>')
    for n in node_ticks:
        y = yn(n)
        parts.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{ml + pw}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(f'<text class="tick-nodes" x="{ml - 8}" y="{y + 4:.1f}" text-anchor="end" '
                     f'fill="#1f5fa8">{tick_label(n)}</text>')
    for v in load_ticks:
        parts.append(f'<text class="tick-load" x="{ml + pw + 8}" y="{yl(v) + 4:.1f}" fill="#c0620b">'
                     f'{tick_label(v)}</text>')
    for t, label in time_ticks(lo, hi, report.tz, 7):
        parts.append(f'<line x1="{x(t):.1f}" y1="{mt + ph}" x2="{x(t):.1f}" y2="{mt + ph + 5}" stroke="#999"/>')
        parts.append(f'<text class="tick-time" x="{x(t):.1f}" y="{mt + ph + 18}" text-anchor="middle" '
                     f'fill="#444">{html.escape(label)}</text>')
    if report.ceiling_nodes:
        y = yn(report.ceiling_nodes)
        parts.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{ml + pw}" y2="{y:.1f}" stroke="#888" '
                     f'stroke-dasharray="6 4"><title>always on: {report.ceiling_nodes} nodes</title></line>')
    # active nodes: a step area
    steps = report.active_nodes
    if steps:
        d = [f"M{x(steps[0][0]):.1f},{yn(0):.1f}"]
        level = 0
        for t, n in steps:
            d.append(f"L{x(t):.1f},{yn(level):.1f}L{x(t):.1f},{yn(n):.1f}")
            level = n
        d.append(f"L{x(hi):.1f},{yn(level):.1f}L{x(hi):.1f},{yn(0):.1f}Z")
        parts.append(f'<path id="active-nodes" d="{"".join(d)}" fill="#1f5fa8" fill-opacity="0.25" '
                     f'stroke="#1f5fa8" stroke-width="1.5"/>')
    if load:
        pts = " ".join(f"{x(t):.1f},{yl(v):.1f}" for t, v in load)
        parts.append(f'<polyline id="load" points="{pts}" fill="none" stroke="#c0620b" stroke-width="1.2"/>')
    parts.append(f'<text x="{ml - 40}" y="{mt + ph / 2}" transform="rotate(-90 {ml - 40} {mt + ph / 2})" '
                 f'text-anchor="middle" fill="#1f5fa8">active nodes</text>')
    parts.append(f'<text x="{ml + pw + 52}" y="{mt + ph / 2}" transform="rotate(90 {ml + pw + 52} {mt + ph / 2})" '
                 f'text-anchor="middle" fill="#c0620b">load (requests running + queued)</text>')
    parts.append("</svg>")
    return "\n".join(parts)


CAPTION = (
    "<figcaption>Blue: how many nodes were switched on. Orange: the load (requests being served or waiting). "
    "Dashed: the nodes that would run if the fleet were always on at its maximum size.</figcaption>"
)


_HTML_TITLES = (
    "Period", "Node-hours", "Energy (kWh)", "Variable cost", "Fixed cost", "Total cost", "Always on: variable",
    "Always on: total", "Saved (variable)", "Saved, % of variable", "Saved, % of total", "Covered",
)  # fmt: skip


def _human_title(report: Report) -> str:
    """'Fleet cost, 5 Jan 2026 to 18 Jan 2026 (UTC), simulated runs' for the page."""
    first = datetime.fromtimestamp(float(report.start), report.tz)
    last = datetime.fromtimestamp(float(report.end), report.tz)
    if last.time() == time(0):  # an exclusive midnight: the day before is the last one covered
        last -= timedelta(days=1)
        span = f"{first:%d %b %Y} to {last:%d %b %Y}"
    else:
        span = f"{first:%d %b %Y %H:%M} to {last:%d %b %Y %H:%M}"
    what = {"live": "the live fleet", "advisory": "advisory runs (decisions not acted on)",
            "simulation": "simulated runs (backtests)", "all": "all runs"}
    who = f"run {report.run_id}" if report.run_id is not None else what.get(report.source, report.source)
    return f"Fleet cost, {span} ({report.tz.key}), {who}"


def render_html(report: Report) -> str:
    esc = html.escape
    cur = esc(report.currency or "")
    if report.empty:
        body = f"<p class='empty'>{esc(empty_message(report))}</p>"
        return PAGE.substitute(title=esc(_human_title(report)), headline="", chart="", table=body, notes="")
    rows, totals = report_rows(report)
    sv, pv, pt = totals["saving_variable"], totals["_exact_pct"]["saving_pct_variable"], totals["_exact_pct"]["saving_pct_total"]
    fixed = ", ".join(f"{_money(m)} {esc(c)} a month" for c, m in report.fixed_monthly)
    headline = (
        f"<div class='big'><div><span class='num'>{_pct(pv)}</span><span>saved on variable costs</span>"
        f"<span class='sub'>{_money(sv)} {cur}</span></div>"
        f"<div><span class='num'>{_pct(pt)}</span><span>saved on total cost</span>"
        f"<span class='sub'>{_money(totals['total_cost'])} {cur} instead of "
        f"{_money(totals['baseline_total_cost'])} {cur}</span></div></div>"
        f"<p>In this period the fleet cost <b>{_money(totals['total_cost'])} {cur}</b>: "
        f"{_money(totals['variable_cost'])} {cur} for power and node-hour fees, which depend on how many "
        f"nodes are switched on, and {_money(totals['fixed_cost'])} {cur} of fixed costs "
        f"(hardware and support, {esc(fixed)}), which are paid whether the nodes are on or off. "
        f"Kept always on at its maximum size ({report.ceiling_nodes} nodes) it would have cost "
        f"{_money(totals['baseline_total_cost'])} {cur}.</p>"
        f"<p><b>Why two percentages?</b> Switching nodes off only reduces the variable part, so the saving is "
        f"{_pct(pv)} of the variable costs but only {_pct(pt)} of the total cost: the fixed costs are the "
        f"same in both cases. {esc(node_hours_sentence(totals))}</p>"
    )
    cells, _ = _cells(report)
    table = ["<table><thead><tr>" + "".join(f"<th>{esc(t)}</th>" for t in _HTML_TITLES) + "</tr></thead><tbody>"]
    for r in cells[:-1]:
        table.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>")
    table.append("</tbody><tfoot><tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells[-1]) + "</tr></tfoot></table>")
    notes = "".join(f"<li>{esc(n)}</li>" for n in _notes(report)) + f"<li>Amounts in {cur}.</li>"
    return PAGE.substitute(
        title=esc(_human_title(report)), headline=headline, chart=f"<figure>{chart_svg(report)}{CAPTION}</figure>",
        table="\n".join(table),
        notes=f"<ul class='notes'>{notes}</ul>",
    )


RENDERERS = {"table": render_table, "csv": render_csv, "json": render_json, "md": render_md, "html": render_html}


def render(report: Report, fmt: str) -> str:
    if fmt not in RENDERERS:
        raise BadInput(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
    return RENDERERS[fmt](report)


__all__ = ["BY", "FORMATS", "ROW_KEYS", "Report", "build_report", "buckets", "parse_when", "render", "report_rows",
           "zone"]
