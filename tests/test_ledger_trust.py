"""Reports finance can trust (issue 12, "Money"): overlapping runs are refused, totals do not
depend on --by, coverage is shown in every format, a read never writes, a missing version row is
named, an empty default says where the runs are, and `why` counts every decision."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sqlite3
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from autoscaler.cli import main
from autoscaler.core.types import parse_time
from autoscaler.ledger.store import Ledger, NodeInterval
from tests.support.ledger_runs import NODES, T0, H, default_policy, make_decision, record_bulk, record_live
from tests.support.postgres import db_url, pg_server, pg_url  # noqa: F401  (fixtures)

RANGE = ("--from", "2026-01-05", "--to", "2026-01-08")


def report(capsys, url, *args) -> tuple[int, str, str]:
    code = main(["report", "--db", url, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def report_json(capsys, url, *args) -> dict:
    code, out, err = report(capsys, url, "--format", "json", *args)
    assert code == 0, err
    return json.loads(out, parse_float=Decimal)


# ----------------------------------------------------------------------------- overlapping runs
def test_two_backtests_of_the_same_hours_are_refused_naming_the_runs(db_url, capsys):
    with Ledger(db_url) as ledger:
        a = record_bulk(ledger, hours=24, label="first")
        b = record_bulk(ledger, start=T0 + 12 * H, hours=24, label="second")
    code, out, err = report(capsys, db_url, *RANGE, "--source", "simulation")
    # adding them would count 12 hours twice: exit 2, one line naming both runs and --run
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1
    assert f"runs {a} (simulation 'first') and {b} (simulation 'second')" in err
    assert "2026-01-05T12:00:00Z to 2026-01-06T00:00:00Z" in err and f"--run {a}" in err and f"--run {b}" in err
    for fmt in ("csv", "html", "md", "table"):  # every format refuses alike
        assert report(capsys, db_url, *RANGE, "--source", "simulation", "--format", fmt)[0] == 2
    # each alone is fine
    assert report_json(capsys, db_url, "--run", str(a))["totals"]["node_hours"] == Decimal("118.0")


def test_a_live_run_and_a_simulation_of_the_same_day_are_not_added_by_all(db_url, capsys):
    with Ledger(db_url) as ledger:
        live = record_live(ledger, hours=24)
        sim = record_bulk(ledger, hours=24)
    assert report_json(capsys, db_url, *RANGE)["totals"]["node_hours"] == Decimal("118.0")  # live alone
    code, _, err = report(capsys, db_url, *RANGE, "--source", "all")
    assert code == 2 and f"runs {live} (live" in err and f"{sim} (simulation" in err and "--run" in err


def test_runs_that_only_touch_are_added(db_url, capsys):
    with Ledger(db_url) as ledger:
        record_bulk(ledger, hours=24)
        record_bulk(ledger, start=T0 + 24 * H, hours=24)  # starts where the first ended
    doc = report_json(capsys, db_url, *RANGE, "--source", "simulation")
    assert doc["totals"]["node_hours"] == Decimal("236.0")  # 118 + 118 (each day of the story's first day)


# ----------------------------------------------------------------------------- precision
def _odd_run(ledger: Ledger) -> tuple[int, list[NodeInterval]]:
    """14 days in which g1 is on all the time and g2 and g3 for odd stretches (37 min 13 s, ...),
    so that every day's variable cost has fractions of a cent that rounding per row would lose."""
    run = ledger.start_run("simulation", default_policy(), at=T0, label="odd")
    end = T0 + 14 * 24 * H
    on: dict[str, list[tuple[float, float]]] = {"g1": [(T0, end)], "g2": [], "g3": []}
    for day in range(14):
        base = T0 + day * 24 * H
        on["g2"].append((base + 6 * H + 37 * 60 + 13, base + 19 * H + 11 * 60 + 7 + day * 61))
        if day % 3:
            on["g3"].append((base + 9 * H + 21 * 60 + 41, base + 13 * H + 5 * 60 + 29 + day * 17))
    intervals: list[NodeInterval] = []
    for g, spans in on.items():
        intervals += NodeInterval.for_schedule(NODES[g], g, spans, T0, end)
    ledger.record_bulk(run, intervals=intervals)
    ledger.end_run(run, end)
    return run, intervals


def _cents(x: Fraction) -> Decimal:
    return (Decimal(x.numerator) / Decimal(x.denominator)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def test_totals_are_the_same_to_the_cent_whatever_the_period_and_rows_add_up(db_url, capsys):
    with Ledger(db_url) as ledger:
        _, intervals = _odd_run(ledger)
    args = ("--from", "2026-01-05", "--to", "2026-01-19", "--source", "simulation")
    docs = {by: report_json(capsys, db_url, *args, "--by", by) for by in ("day", "week", "month")}
    # The reference, computed here from the intervals alone (default cost model: 240 W active, 3 W off,
    # PUE 1.3, 0.15 USD/kWh; 110 USD per node and month over 730 h): each day exact, rounded once.
    def day_figures(day: int) -> tuple[Fraction, Fraction]:
        lo, hi = T0 + day * 24 * H, T0 + (day + 1) * 24 * H
        clip = [(iv.state, max(iv.start, lo), min(iv.end, hi)) for iv in intervals]
        act = sum((Fraction(round((b - a) * 1e6), 10**6) for st, a, b in clip if st == "active" and b > a),
                  Fraction(0)) / 3600
        return (act * 240 + (144 - act) * 3) * Fraction(13, 10) / 1000 * Fraction(15, 100), Fraction(110 * 6 * 24, 730)

    variable = sum((_cents(day_figures(d)[0]) for d in range(14)), Decimal(0))
    fixed = 14 * _cents(day_figures(0)[1])  # 21.70 a day
    for by, doc in docs.items():
        t = doc["totals"]
        assert t["variable_cost"] == variable, by
        assert t["fixed_cost"] == fixed == Decimal("303.80"), by
        assert t["total_cost"] == variable + fixed, by
        for key in ("node_hours", "energy_kwh", "variable_cost", "fixed_cost", "total_cost", "baseline_variable_cost",
                    "baseline_total_cost", "saving_variable", "covered_hours"):
            assert sum((r[key] for r in doc["rows"]), Decimal(0)) == t[key], (by, key)
    # this data exercises rounding: the days as shown add up to another total than the exact sum
    # rounded once (which the report no longer prints: a day must read the same in every range)
    exact = sum((day_figures(d)[0] for d in range(14)), Fraction(0))
    assert variable != _cents(exact)
    assert [r["variable_cost"] for r in docs["day"]["rows"]] == [_cents(day_figures(d)[0]) for d in range(14)]
    assert len(docs["day"]["rows"]) == 14 and len(docs["week"]["rows"]) == 2 and len(docs["month"]["rows"]) == 1
    code, out, _ = report(capsys, db_url, *args, "--by", "day", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out, newline="")))
    assert sum(Decimal(r["variable_cost"]) for r in rows[:-1]) == Decimal(rows[-1]["variable_cost"])


# ----------------------------------------------------------------------------- coverage
def test_every_format_says_how_much_of_each_period_the_ledger_covers(db_url, capsys):
    with Ledger(db_url) as ledger:
        record_live(ledger, hours=48)  # 2 of January's 31 days
    args = ("--from", "2026-01-01", "--to", "2026-02-01", "--by", "month")
    doc = report_json(capsys, db_url, *args)
    (row,) = doc["rows"]
    # 48 h of the month's 744 h: 6.45%
    assert (row["covered_hours"], row["period_hours"], row["coverage_pct"]) == (
        Decimal("48.0"), Decimal("744.0"), Decimal("6.45"))
    assert doc["totals"]["coverage_pct"] == Decimal("6.45")
    code, table, _ = report(capsys, db_url, *args)
    assert "Covered" in table and "6.5%" in table
    assert "for the 48.0 hours that run 1 recorded, of the 744.0 hours asked for (6.5% covered)" in table
    assert "missing from the report, not free" in table
    code, md, _ = report(capsys, db_url, *args, "--format", "md")
    assert "| Covered |" in md and "6.5%" in md and "744.0 hours asked for" in md
    code, page, _ = report(capsys, db_url, *args, "--format", "html")
    assert "<th>Covered</th>" in page and "6.5%" in page and "744.0 hours asked for" in page
    code, text, _ = report(capsys, db_url, *args, "--format", "csv")
    line = list(csv.DictReader(io.StringIO(text, newline="")))[0]
    assert (line["covered_hours"], line["period_hours"], line["coverage_pct"]) == ("48.0000", "744.0000", "6.45")
    # a week report over the same run: the first week is covered 48 of 168 h
    week = report_json(capsys, db_url, "--from", "2026-01-05", "--to", "2026-01-12", "--by", "week")
    assert week["rows"][0]["coverage_pct"] == Decimal("28.57")


# ----------------------------------------------------------------------------- a read never writes
def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_report_and_why_on_a_sqlite_file_that_is_not_a_ledger_leave_it_alone(tmp_path, capsys):
    other = tmp_path / "inventory.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE machines (name TEXT)")
        conn.execute("INSERT INTO machines VALUES ('spark-1')")
    before = _digest(other)
    url = f"sqlite:///{other}"
    for argv in (["report", "--db", url, *RANGE], ["why", "--db", url, "--at", "2026-01-05T03:00:00Z"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "1 other table(s) (machines) and no ledger tables: not a ledger" in err
        assert _digest(other) == before  # byte for byte
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inventory.db"]  # no -wal, -shm or journal left
    with sqlite3.connect(other) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["machines"]


@pytest.mark.parametrize("content, message", [
    (b"", "an empty database, not a ledger"),
    (b"name,price\nspark,1\n", "not a SQLite database, so not a ledger"),
])
def test_an_empty_file_or_a_text_file_is_named_and_left_alone(tmp_path, capsys, content, message):
    path = tmp_path / "ledger.db"
    path.write_bytes(content)
    assert main(["report", "--db", f"sqlite:///{path}", *RANGE]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert path.read_bytes() == content


def test_reading_a_ledger_changes_no_byte_of_it(tmp_path, capsys):
    path = tmp_path / "ledger.db"
    url = f"sqlite:///{path}"
    with Ledger(url) as ledger:
        record_live(ledger)
    before = _digest(path)
    assert main(["report", "--db", url, *RANGE, "--format", "html"]) == 0
    assert main(["why", "--db", url, "--at", "2026-01-05T03:00:00Z"]) == 0
    assert main(["why", "--db", url, "--from", "2026-01-05T00:00:00Z", "--to", "2026-01-06T00:00:00Z"]) == 0
    capsys.readouterr()
    assert _digest(path) == before


def test_report_on_postgres_opens_read_only_transactions(pg_url, capsys):
    from sqlalchemy import text

    with Ledger(pg_url) as ledger:
        record_live(ledger, hours=24)
    reader = Ledger(pg_url, read_only=True)
    try:
        with reader.engine.connect() as conn:
            assert conn.execute(text("SHOW transaction_read_only")).scalar_one() == "on"
    finally:
        reader.close()
    assert report_json(capsys, pg_url, *RANGE)["totals"]["node_hours"] == Decimal("118.0")


# ----------------------------------------------------------------------------- missing version row
def test_ledger_tables_without_a_version_row_are_named_for_reads_and_writes(tmp_path, capsys):
    path = tmp_path / "ledger.db"
    url = f"sqlite:///{path}"
    with Ledger(url) as ledger:
        record_live(ledger, hours=24)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM alembic_version")
    before = _digest(path)
    assert main(["report", "--db", url, *RANGE]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has ledger tables" in err and "no alembic_version row" in err
    assert "already exists" not in err
    assert _digest(path) == before
    from autoscaler.errors import RuntimeFailure

    with pytest.raises(RuntimeFailure, match="no alembic_version row"):  # a writer does not try to create them
        Ledger(url)


# ----------------------------------------------------------------------------- empty default
def test_an_empty_live_report_on_a_ledger_of_simulations_says_where_the_runs_are(db_url, capsys):
    with Ledger(db_url) as ledger:
        sim = record_bulk(ledger, hours=24)
    code, out, err = report(capsys, db_url, *RANGE)
    assert code == 0 and "the report is empty" in out
    assert f"simulation runs ({sim}) cover this range: see them with --source simulation" in out
    for fmt in ("json", "csv"):  # machine formats keep stdout clean: the hint goes to stderr, one line
        code, out, err = report(capsys, db_url, *RANGE, "--format", fmt)
        assert code == 0 and "--source simulation" in err and err.count("\n") == 1
    code, page, _ = report(capsys, db_url, *RANGE, "--format", "html")
    assert "see them with --source simulation" in page
    assert main(["why", "--db", db_url, "--at", "2026-01-05T03:00:00Z"]) == 0
    assert f"simulation runs ({sim}) were: see them with --source simulation" in capsys.readouterr().out


# ----------------------------------------------------------------------------- why counts
def test_why_counts_every_decision_since_the_group_was_started(tmp_path, capsys):
    """g3 is started at 02:00 and ready at 02:50 (a slow start); a decision every 5 minutes, and g2
    is drained at 02:30 by another decision. At 03:00 the decisions since g3's start are those of
    02:05 ... 03:00: 12, of which 11 held and 1 acted (on g2)."""
    from autoscaler.ledger.store import GroupEvent

    url = f"sqlite:///{tmp_path / 'why.db'}"
    decisions, events = [], []
    for k in range(0, 37):  # 00:00 ... 03:00 every 5 minutes
        at = T0 + k * 300
        if at == T0 + 2 * H:
            events.append(GroupEvent(at, "g3", "started", decision_index=len(decisions)))
            decisions.append((at, make_decision("scale_up", "utilization_high", 3, "g3", 14, 2)))
        elif at == T0 + 2.5 * H:
            events.append(GroupEvent(at, "g2", "drain_started", decision_index=len(decisions)))
            decisions.append((at, make_decision("scale_down", "surplus", 2, "g2", 3, 3)))
        else:
            decisions.append((at, make_decision("hold", "stabilizing" if k % 2 else "steady", 2, None, 5, 2)))
    events.append(GroupEvent(T0 + 2 * H + 50 * 60, "g3", "ready"))
    end = T0 + 3 * H
    intervals = (NodeInterval.for_schedule(NODES["g1"], "g1", [(T0, end)], T0, end)
                 + NodeInterval.for_schedule(NODES["g2"], "g2", [(T0, end)], T0, end)
                 + NodeInterval.for_schedule(NODES["g3"], "g3", [(T0 + 2 * H, end)], T0, end))
    with Ledger(url) as ledger:
        run = ledger.start_run("live", default_policy(), at=T0)
        ledger.record_bulk(run, decisions=decisions, events=events, intervals=intervals)
        ledger.end_run(run, end + 60)
    assert main(["why", "--db", url, "--json", "--at", "2026-01-05T03:00:00Z", "--group", "g3"]) == 0
    (g3,) = json.loads(capsys.readouterr().out)["groups"]
    assert g3["phase"] == "ready" and g3["since"] == "2026-01-05T02:50:00Z"
    assert g3["counted_from"] == "2026-01-05T02:00:00Z"
    assert g3["decisions_since_count"] == 12
    # 02:05 ... 03:00 without 02:30: odd ticks (k = 25, 27, ..., 35) stabilizing, even ones steady
    assert g3["holds_since"] == {"stabilizing": 6, "steady": 5}
    assert main(["why", "--db", url, "--at", "2026-01-05T03:00:00Z", "--group", "g3"]) == 0
    text = capsys.readouterr().out
    assert ("since it was started at 2026-01-05T02:00:00Z, 12 decisions were taken up to 2026-01-05T03:00:00Z: "
            "11 held (stabilizing 6, steady 5), 1 acted on other groups, and none drained it.") in text
    assert parse_time(g3["counted_from"]) == T0 + 2 * H


# ----------------------------------------------------------------------------- ledger commands
def test_ledger_compact_folds_old_holds_and_why_still_counts_them(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with Ledger(url) as ledger:
        run = record_live(ledger)  # 2026: long before now, so --older-than-days 30 folds every hold
        holds = sum(1 for d in ledger.decisions(run) if d.action == "hold")
        acted = [d.id for d in ledger.decisions(run, acted_only=True)]
    before = json.loads(_why(capsys, url))
    assert main(["ledger", "compact", "--db", url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["folded"] == holds and out["summaries"] > 0
    with Ledger(url) as ledger:
        assert [d.id for d in ledger.decisions(run)] == acted  # only what acted is left
        assert sum(s.count for s in ledger.summaries(run)) == holds
    after = json.loads(_why(capsys, url))
    # g1 was on from the start: its count covers whole compacted hours, as before compaction
    assert after["groups"][0]["decisions_since_count"] == before["groups"][0]["decisions_since_count"]
    assert main(["ledger", "compact", "--db", url]) == 0
    assert "folded 0 hold decisions" in capsys.readouterr().out
    assert main(["ledger", "compact", "--db", url, "--older-than-days", "-1"]) == 2


def _why(capsys, url: str) -> str:
    assert main(["why", "--db", url, "--json", "--at", "2026-01-05T23:50:00Z", "--group", "g1"]) == 0
    return capsys.readouterr().out


def test_ledger_upgrade_creates_a_ledger_that_report_then_reads(tmp_path, capsys):
    path = tmp_path / "new.db"
    url = f"sqlite:///{path}"
    assert main(["report", "--db", url, *RANGE]) == 1 and not path.exists()  # a read creates nothing
    capsys.readouterr()
    assert main(["ledger", "upgrade", "--db", url]) == 0
    assert "at schema revision" in capsys.readouterr().err
    assert main(["report", "--db", url, *RANGE]) == 0
    assert "the report is empty" in capsys.readouterr().out


def test_a_run_shorter_than_an_hour_is_not_shown_as_no_hours():
    from autoscaler.ledger.report import _hours

    # a three-minute demo run: 0.05 hours recorded, of 0.05 asked for (it read "0.0 hours" before)
    assert _hours(Decimal("0.0501")) == "0.05"
    assert (_hours(Decimal("48")), _hours(Decimal("1")), _hours(Decimal("0")), _hours(None)) == ("48.0", "1.0", "0.0", "n/a")
