"""`autoscaler report`: reconciliation with the recorded intervals (SQLite and PostgreSQL),
rows that sum exactly to the totals, the formats, sources kept apart, a cost model per run,
and the exit codes."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal

import pytest

from autoscaler.cli import main
from autoscaler.ledger.store import Ledger
from tests.support.ledger_runs import (
    T0,
    H,
    clipped_node_hours,
    default_policy,
    policy_with_cost,
    record_bulk,
    record_live,
    story,
)
from tests.support.postgres import db_url, pg_server, pg_url  # noqa: F401  (fixtures)

ROW_KEYS = {"start", "end", "node_hours", "energy_kwh", "variable_cost", "fixed_cost", "total_cost",
            "baseline_variable_cost", "baseline_total_cost", "saving_variable", "saving_pct_variable",
            "saving_pct_total"}
ADDITIVE = ["node_hours", "energy_kwh", "variable_cost", "fixed_cost", "total_cost", "baseline_variable_cost",
            "baseline_total_cost", "saving_variable", "baseline_node_hours", "covered_hours"]


def report_json(capsys, url, *args) -> dict:
    assert main(["report", "--db", url, "--format", "json", *args]) == 0
    return json.loads(capsys.readouterr().out, parse_float=Decimal)


def assert_rows_sum_to_totals(doc: dict) -> None:
    for key in ADDITIVE:
        assert sum((Decimal(r[key]) for r in doc["rows"]), Decimal(0)) == Decimal(doc["totals"][key]), key
    for state in ("active", "idle", "off"):
        assert sum(Decimal(r["node_hours_by_state"][state]) for r in doc["rows"]) == \
            Decimal(doc["totals"]["node_hours_by_state"][state])


@pytest.fixture
def live_db(db_url):
    with Ledger(db_url) as ledger:
        record_live(ledger)
    return db_url


def test_node_hours_reconcile_with_the_recorded_intervals(live_db, capsys):
    doc = report_json(capsys, live_db, "--from", "2026-01-05", "--to", "2026-01-08")
    assert set(doc) == {"from", "to", "source", "currency", "rows", "totals"}
    assert ROW_KEYS <= set(doc["rows"][0]) and ROW_KEYS <= set(doc["totals"])
    assert (doc["from"], doc["to"], doc["source"], doc["currency"]) == (
        "2026-01-05T00:00:00Z", "2026-01-08T00:00:00Z", "live", "USD")
    # day 1: 118 active, 7.5 idle, 18.5 off; day 2: 96 active, 48 idle (tests/support/ledger_runs.py)
    # day 3: the run had ended, nothing covered
    assert [r["node_hours"] for r in doc["rows"]] == [Decimal("118.0"), Decimal("96.0"), 0]
    assert doc["rows"][0]["node_hours_by_state"] == {"active": Decimal("118.0"), "idle": Decimal("7.5"),
                                                     "off": Decimal("18.5")}
    # the same from an independent sum of the story's intervals, clipped to each day
    schedule = story().intervals
    for i, row in enumerate(doc["rows"]):
        lo, hi = T0 + i * 24 * H, T0 + (i + 1) * 24 * H
        assert row["node_hours"] == Decimal(str(clipped_node_hours(schedule, lo, hi)))
    assert_rows_sum_to_totals(doc)
    # energy day 1: (118 x 240 + 7.5 x 45 + 18.5 x 3) x 1.3 / 1000 = 37.3269 kWh -> 37.327
    assert doc["rows"][0]["energy_kwh"] == Decimal("37.327")
    # baseline: 6 nodes x 24 h x 240 W x 1.3 / 1000 x 0.15 = 6.7392 -> 6.74 per covered day
    assert doc["rows"][0]["baseline_variable_cost"] == Decimal("6.74")
    assert doc["totals"]["saving_variable"] == doc["totals"]["baseline_variable_cost"] - doc["totals"]["variable_cost"]


def test_a_range_that_cuts_intervals_clips_them(live_db, capsys):
    # 06:00 day 1 to 12:00 day 2, cut by days: 18 h + 12 h
    doc = report_json(capsys, live_db, "--from", "2026-01-05T06:00:00Z", "--to", "2026-01-06T12:00:00Z")
    schedule = story().intervals
    expected = [clipped_node_hours(schedule, T0 + 6 * H, T0 + 24 * H), clipped_node_hours(schedule, T0 + 24 * H, T0 + 36 * H)]
    assert [r["node_hours"] for r in doc["rows"]] == [Decimal(str(x)) for x in expected]
    assert [r["covered_hours"] for r in doc["rows"]] == [Decimal("18.0"), Decimal("12.0")]
    assert_rows_sum_to_totals(doc)


def test_weeks_start_monday_and_days_follow_the_time_zone(live_db, capsys):
    doc = report_json(capsys, live_db, "--from", "2026-01-01", "--to", "2026-01-15", "--by", "week")
    # 2026-01-01 is a Thursday: a partial first week, then the week of Monday 5 January with the run
    assert [r["start"] for r in doc["rows"]] == ["2026-01-01T00:00:00Z", "2026-01-05T00:00:00Z", "2026-01-12T00:00:00Z"]
    assert doc["rows"][1]["node_hours"] == Decimal("214.0")
    berlin = report_json(capsys, live_db, "--from", "2026-01-05", "--to", "2026-01-07", "--tz", "Europe/Berlin")
    # a bare date is local midnight: 2026-01-05T00:00+01:00 = 2026-01-04T23:00Z, before the run started
    assert berlin["from"] == "2026-01-05T00:00:00+01:00"
    assert [r["start"] for r in berlin["rows"]] == ["2026-01-05T00:00:00+01:00", "2026-01-06T00:00:00+01:00"]
    schedule = story().intervals
    assert berlin["rows"][0]["node_hours"] == Decimal(str(clipped_node_hours(schedule, T0 - H, T0 + 23 * H)))
    month = report_json(capsys, live_db, "--from", "2026-01-01", "--to", "2026-03-01", "--by", "month")
    assert [r["start"] for r in month["rows"]] == ["2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"]
    assert month["totals"]["node_hours"] == Decimal("214.0")


def test_sources_are_never_mixed_unasked(db_url, capsys):
    with Ledger(db_url) as ledger:
        record_live(ledger, hours=24)  # day 1
        record_bulk(ledger, start=T0 + 24 * H, hours=48)  # days 2 and 3: no overlap with the live run
    args = ("--from", "2026-01-05", "--to", "2026-01-08")
    live = report_json(capsys, db_url, *args)
    sim = report_json(capsys, db_url, *args, "--source", "simulation")
    both = report_json(capsys, db_url, *args, "--source", "all")
    assert live["totals"]["node_hours"] == Decimal("118.0")  # the live run: day 1 only
    assert sim["totals"]["node_hours"] == Decimal("214.0")
    assert both["totals"]["node_hours"] == Decimal("332.0")
    assert (live["source"], sim["source"], both["source"]) == ("live", "simulation", "all")
    assert report_json(capsys, db_url, *args, "--source", "advisory")["rows"] == []  # a source of its own


def test_each_run_is_charged_with_its_own_cost_model(db_url, capsys):
    cheap = policy_with_cost(energy_price_per_kwh=0.10)
    dear = policy_with_cost(energy_price_per_kwh=0.30, node_hour_fee=0.5)
    with Ledger(db_url) as ledger:
        a = record_bulk(ledger, cheap, hours=24)
        b = record_bulk(ledger, dear, start=T0 + 24 * H, hours=24)  # the next day: the two do not overlap
    one = report_json(capsys, db_url, "--run", str(a))
    two = report_json(capsys, db_url, "--run", str(b))
    both = report_json(capsys, db_url, "--from", "2026-01-05", "--to", "2026-01-07", "--source", "simulation")
    # day 1 energy 37.3269 kWh: x 0.10 = 3.73269 -> 3.73; x 0.30 + 118 node-hours x 0.5 = 11.19807 + 59 = 70.20
    assert one["totals"]["variable_cost"] == Decimal("3.73")
    assert two["totals"]["variable_cost"] == Decimal("70.2")
    # exact sum 3.73269 + 70.19807 = 73.93076 -> 73.93
    assert both["totals"]["variable_cost"] == Decimal("73.93")
    assert [r["variable_cost"] for r in both["rows"]] == [Decimal("3.73"), Decimal("70.2")]
    # a report of a run reads from its recorded policy even after the policy file changes
    assert one["source"] == "simulation"


def test_a_policy_reloaded_mid_run_changes_the_price_from_then_on(db_url, capsys):
    with Ledger(db_url) as ledger:
        run = record_live(ledger, hours=48)
        ledger.record_policy(run, policy_with_cost(energy_price_per_kwh=0.30), at=T0 + 24 * H)
    doc = report_json(capsys, db_url, "--from", "2026-01-05", "--to", "2026-01-07")
    # day 1 at 0.15: 37.3269 kWh -> 5.60; day 2 at 0.30: (96 x 240 + 48 x 45) x 1.3 / 1000 = 32.76 kWh -> 9.828
    assert [r["variable_cost"] for r in doc["rows"]] == [Decimal("5.6"), Decimal("9.83")]


def test_an_open_interval_counts_up_to_now_and_is_marked(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'open.db'}"
    with Ledger(url) as ledger:
        run = ledger.start_run("live", default_policy(), at=T0, label="still running")
        ledger.set_group_state(run, "g1", "active", T0)
    doc = report_json(capsys, url, "--from", "2026-01-05", "--to", "2100-01-01", "--by", "month")
    # g1's two nodes, open since T0: up to now, so more than two nodes x 24 h
    assert doc["totals"]["node_hours"] > 48
    assert doc["totals"]["open_intervals"] == 2 and doc["rows"][0]["open_intervals"] == 2
    assert main(["report", "--db", url, "--from", "2026-01-05", "--to", "2026-01-06"]) == 0
    out = capsys.readouterr().out
    assert "2026-01-05*" in out and "still open" in out


def test_csv_opens_in_a_spreadsheet_and_its_rows_sum_to_the_total_line(live_db, capsys, tmp_path):
    out = tmp_path / "r.csv"
    assert main(["report", "--db", live_db, "--from", "2026-01-05", "--to", "2026-01-08", "--format", "csv",
                 "--output", str(out)]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text(), newline="")))
    body, total = rows[:-1], rows[-1]
    assert [r["period"] for r in body] == ["2026-01-05", "2026-01-06", "2026-01-07"] and total["period"] == "TOTAL"
    for key in ADDITIVE + ["node_hours_idle", "node_hours_off"]:
        assert sum(Decimal(r[key]) for r in body) == Decimal(total[key]), key
    assert body[0]["start"] == "2026-01-05T00:00:00Z" and body[0]["node_hours"] == "118.0000"
    assert all("," not in v for r in rows for v in r.values())  # plain numbers, no thousands separators


def test_html_is_one_page_with_the_chart_the_headline_and_the_numbers(live_db, capsys):
    assert main(["report", "--db", live_db, "--from", "2026-01-05", "--to", "2026-01-07", "--format", "html"]) == 0
    page = capsys.readouterr().out
    doc = report_json(capsys, live_db, "--from", "2026-01-05", "--to", "2026-01-07")
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert 'id="active-nodes"' in page and 'id="load"' in page  # active nodes against load
    t = doc["totals"]
    assert f"{t['total_cost']:,.2f}" in page and f"{t['saving_pct_variable']:.1f}%" in page
    assert f"{t['saving_pct_total']:.1f}%" in page and "Why two percentages?" in page
    assert "src=" not in page and "<link" not in page and "<script" not in page  # self-contained


def test_markdown_and_table(live_db, capsys):
    assert main(["report", "--db", live_db, "--from", "2026-01-05", "--to", "2026-01-07", "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert "| Period | Node-h |" in md and "| **TOTAL** | **214.00** |" in md
    assert main(["report", "--db", live_db, "--from", "2026-01-05", "--to", "2026-01-07"]) == 0
    table = capsys.readouterr().out
    assert "2026-01-05  118.00" in table and "TOTAL       214.00" in table


def test_an_empty_period_gives_an_empty_report_that_says_so(live_db, capsys):
    doc = report_json(capsys, live_db, "--from", "2025-01-01", "--to", "2025-02-01")
    assert doc["rows"] == [] and doc["totals"]["node_hours"] == 0
    assert main(["report", "--db", live_db, "--from", "2025-01-01", "--to", "2025-02-01"]) == 0
    assert "the report is empty" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--from", "2026-01-07", "--to", "2026-01-05"], "--to must be after --from"),
        (["--from", "2026-01-05", "--to", "2026-01-07", "--format", "pdf"], "--format: 'pdf' is not one of"),
        (["--from", "2026-01-05", "--to", "2026-01-07", "--by", "hour"], "--by: 'hour'"),
        (["--from", "2026-01-05", "--to", "2026-01-07", "--tz", "Mars/Olympus"], "--tz: 'Mars/Olympus'"),
        (["--from", "yesterday", "--to", "2026-01-07"], "--from: 'yesterday'"),
        (["--from", "2026-01-05"], "--from and --to go together"),
        (["--run", "999"], "--run: there is no run 999"),
    ],
)
def test_bad_input_exits_2_with_one_line(live_db, capsys, args, message):
    assert main(["report", "--db", live_db, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_an_unreachable_database_exits_1_with_one_line_and_no_password(capsys, tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://finance:s3cret@127.0.0.1:{port}/ledger"
    assert main(["report", "--db", url, "--from", "2026-01-05", "--to", "2026-01-06"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "s3cret" not in err and "finance:***@" in err
    missing = tmp_path / "nowhere" / "ledger.db"
    assert main(["report", "--db", f"sqlite:///{missing}", "--from", "2026-01-05", "--to", "2026-01-06"]) == 1
    assert "no ledger database at" in capsys.readouterr().err


def test_db_falls_back_to_the_environment_then_the_working_directory(live_db, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("AUTOSCALER_DATABASE_URL", live_db)
    assert main(["report", "--from", "2026-01-05", "--to", "2026-01-06", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["node_hours"] == 118
    monkeypatch.delenv("AUTOSCALER_DATABASE_URL")
    monkeypatch.chdir(tmp_path)
    assert main(["report", "--from", "2026-01-05", "--to", "2026-01-06"]) == 1  # no ./autoscaler.db yet
    assert "autoscaler.db" in capsys.readouterr().err
