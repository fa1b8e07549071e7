"""The ledger store: live and bulk paths agree, values round-trip, crashed runs are closed,
compaction folds old holds, two processes can write at once, and a backtest's 80,000
decisions go in within seconds."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from autoscaler.errors import RuntimeFailure
from autoscaler.ledger.store import Ledger
from tests.support.ledger_runs import (
    T0,
    H,
    backtest_schedule,
    default_policy,
    make_decision,
    record_bulk,
    record_live,
    story,
)
from tests.support.postgres import db_url, pg_server, pg_url  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parents[1]


def _intervals(ledger: Ledger, run: int) -> list[tuple]:
    data = ledger.period_data(ledger.runs(run_id=run), T0 - H, T0 + 100 * H)
    return sorted((i.node, i.group, i.state, i.start, i.end) for i in data.intervals[run])


def test_live_calls_and_the_bulk_path_record_the_same_run(db_url):
    with Ledger(db_url) as ledger:
        live = record_live(ledger)
        bulk = record_bulk(ledger)
        # the intervals the live calls derived from events equal the schedule handed over in bulk
        assert _intervals(ledger, live) == _intervals(ledger, bulk)
        assert _intervals(ledger, bulk) == sorted((i.node, i.group, i.state, i.start, i.end) for i in story().intervals)
        for run in (live, bulk):
            events = ledger.events(run)
            assert [(e.group, e.event) for e in events][:3] == [("g2", "drain_started"), ("g2", "drained"),
                                                                 ("g2", "stopped")]
            # each caused event points at the decision that acted at that moment
            for e in events:
                if e.decision_id is not None:
                    d = ledger.decision(e.decision_id)
                    assert d.at == e.at and d.action != "hold" and e.group in d.groups
        assert len(ledger.decisions(live)) == len(ledger.decisions(bulk)) == 192  # 48 h / 15 min


def test_a_decision_reads_back_as_written(db_url):
    # tabs, line breaks, backslashes and quotes survive the bulk path (COPY's text format on PostgreSQL)
    detail = 'demand 11.25 > 8.4\tcut "here"\nC:\\path \\N'
    decision = make_decision("scale_up", "utilization_high", 3, "g3", 11.25, 2, detail=detail)
    decision.inputs["problems"].append({"signal": "queued", "detail": 'a\\b\t"c"\n'})
    at = T0 + 123.456789
    with Ledger(db_url) as ledger:
        run = ledger.start_run("simulation", default_policy(), at=T0, label="rt")
        (bulk_id,) = ledger.record_bulk(run, decisions=[(at, decision)])
        one_id = ledger.record_decision(run, at + 1, decision)
        a, b = ledger.decision(bulk_id), ledger.decision(one_id)
    for got, when in ((a, at), (b, at + 1)):
        assert got.at == pytest.approx(when, abs=1e-6)
        assert (got.action, got.reason, got.group, got.groups, got.target_groups) == (
            "scale_up", "utilization_high", "g3", ["g3"], 3)
        assert got.inputs == dict(decision.inputs) and got.detail == detail
        assert got.policy_sha256 == default_policy().sha256
    assert one_id > bulk_id


def test_node_states_and_power_states(tmp_path):
    with Ledger(f"sqlite:///{tmp_path / 'n.db'}") as ledger:
        run = ledger.start_run("live", default_policy(), at=T0)
        ledger.set_node_state(run, "spark-1", "g1", "active", T0)
        ledger.set_node_state(run, "spark-1", "g1", "active", T0 + H)  # same state: the interval goes on
        ledger.set_node_state(run, "spark-1", "g1", "idle", T0 + 2 * H)
        with pytest.raises(ValueError, match="node_state must be 'idle' or 'off'"):
            ledger.record_event(run, T0 + 3 * H, "g1", "stopped")  # the actuator must say which
        with pytest.raises(ValueError, match="not in run"):
            ledger.set_group_state(run, "g9", "off", T0)
        ledger.end_run(run, T0 + 4 * H)
        assert _intervals(ledger, run) == [("spark-1", "g1", "active", T0, T0 + 2 * H),
                                           ("spark-1", "g1", "idle", T0 + 2 * H, T0 + 4 * H)]


def test_a_new_live_run_closes_a_run_that_crashed(tmp_path):
    with Ledger(f"sqlite:///{tmp_path / 'c.db'}") as ledger:
        crashed = record_live(ledger, hours=10, end=False)
        assert ledger.runs(run_id=crashed)[0].ended_at is None
        sim = record_bulk(ledger, hours=10)  # simulations are not touched
        new = ledger.start_run("live", default_policy(), at=T0 + 12 * H)
        old = ledger.runs(run_id=crashed)[0]
        assert old.ended_at == T0 + 12 * H and f"superseded by run {new}" in old.end_note
        assert all(end == T0 + 12 * H for *_, end in _intervals(ledger, crashed) if end > T0 + 10 * H - 1)
        assert ledger.runs(run_id=sim)[0].ended_at == T0 + 10 * H


def test_policy_versions_and_rejected_edits_are_recorded(tmp_path):
    from tests.support.ledger_runs import policy_with_cost

    with Ledger(f"sqlite:///{tmp_path / 'p.db'}") as ledger:
        run = ledger.start_run("live", default_policy(), at=T0)
        sha = ledger.record_policy(run, policy_with_cost(pue=1.5), at=T0 + H)
        ledger.record_rejected_policy(at=T0 + 2 * H, text="fleet: [", path="policies/x.yaml", run_id=run,
                                      errors=["policies/x.yaml:1: yaml: expected a node"])
        d = ledger.record_decision(run, T0 + 3 * H, make_decision("hold", "steady", 1, None, 1.0, 1))
        assert ledger.decision(d).policy_sha256 == sha  # decisions carry the policy in force
        counts = ledger.counts()
        assert (counts["policy_versions"], counts["policy_loads"], counts["policy_rejections"]) == (2, 2, 1)
        with pytest.raises(ValueError, match="does not match its text"):
            ledger.start_run("live", ("x: 1\n", "0" * 64), at=T0)


def test_compaction_folds_old_holds_into_hourly_counts_and_keeps_what_acted(db_url):
    with Ledger(db_url) as ledger:
        run = record_live(ledger)
        holds_before = [d for d in ledger.decisions(run) if d.action == "hold"]
        acted_before = [d.id for d in ledger.decisions(run, acted_only=True)]
        # fold holds older than 1.5 h before T0 + 3 h: the ticks 00:00 .. 01:15 (6 ticks, 01:00 acted -> 5)
        first = ledger.compact(older_than_s=1.5 * H, now=T0 + 3 * H)
        assert (first.folded, first.summaries) == (5, 2)  # hour 00: 4 holds, hour 01: 01:15 only
        # fold everything before T0 + 24 h: hour 01 gets 01:30 and 01:45 added to its summary row
        second = ledger.compact(older_than_s=24 * H, now=T0 + 48 * H)
        summaries = {s.hour_start: s.count for s in ledger.summaries(run)}
        assert summaries[T0] == 4 and summaries[T0 + H] == 3  # 01:15, 01:30, 01:45 (01:00 acted)
        assert sum(summaries.values()) == first.folded + second.folded
        assert first.folded + second.folded == sum(1 for d in holds_before if d.at < T0 + 24 * H)
        left = ledger.decisions(run)
        assert [d.id for d in left if d.action != "hold"] == acted_before  # every acted decision kept
        assert all(d.at >= T0 + 24 * H for d in left if d.action == "hold")
        assert ledger.compact(older_than_s=24 * H, now=T0 + 48 * H).folded == 0  # nothing left to fold


def test_compaction_keeps_a_hold_an_event_points_at(tmp_path):
    with Ledger(f"sqlite:///{tmp_path / 'k.db'}") as ledger:
        run = ledger.start_run("live", default_policy(), at=T0)
        d = ledger.record_decision(run, T0, make_decision("hold", "fleet_unsynced", 1, None, 1.0, 1))
        ledger.record_event(run, T0, "g1", "failed", decision_id=d, detail="reconciler found it failed")
        assert ledger.compact(older_than_s=0, now=T0 + H).folded == 0
        assert ledger.decision(d) is not None


WRITER = r"""
import sys, time
sys.path.insert(0, {repo!r})
from pathlib import Path
from autoscaler.ledger.store import Ledger
from tests.support.ledger_runs import T0, default_policy, make_decision
url, go, me = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
deadline = time.monotonic() + 30
while not go.exists():
    if time.monotonic() > deadline:
        sys.exit("no go")
    time.sleep(0.005)
ledger = Ledger(url)
run = ledger.start_run("live" if me == "a" else "simulation", default_policy(), at=T0, label=me)
for i in range(150):
    ledger.record_decision(run, T0 + i, make_decision("hold", "steady", 1, None, float(i), 1))
    if i % 10 == 0:
        ledger.set_group_state(run, "g1", "active" if i % 20 == 0 else "idle", T0 + i)
ledger.record_bulk(run, decisions=[(T0 + 1000 + i, make_decision("hold", "steady", 1, None, 0.0, 1)) for i in range(500)])
ledger.end_run(run, T0 + 2000)
print(run)
"""


def test_two_processes_writing_at_once_do_not_corrupt_sqlite(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"  # a fresh file: both also race to create the schema
    go = tmp_path / "go"
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(repo=str(REPO)))
    procs = [subprocess.Popen([sys.executable, str(script), url, str(go), me], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=REPO) for me in ("a", "b")]
    go.touch()
    results = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, results):
        assert p.returncode == 0, err
    with Ledger(url) as ledger:
        counts = ledger.counts()
        assert counts["runs"] == 2 and counts["decisions"] == 2 * (150 + 500)
        assert counts["node_intervals"] == 2 * 2 * 15  # 15 state changes x 2 nodes of g1, per process
        with ledger.engine.connect() as conn:
            assert conn.execute(text("PRAGMA integrity_check")).scalar() == "ok"
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"


def test_an_unreachable_database_is_a_runtime_failure_without_the_password():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RuntimeFailure) as err:
        Ledger(f"postgresql://ops:hunter2@127.0.0.1:{port}/ledger")
    message = str(err.value)
    assert "hunter2" not in message and "ops:***@127.0.0.1" in message and "\n" not in message


def test_a_backtest_of_80000_decisions_goes_in_one_transaction_within_seconds(db_url):
    s = backtest_schedule()  # 14 days x 5,760 ticks = 80,640 decisions, 102 intervals, 48 events
    assert len(s.decisions) == 80_640
    with Ledger(db_url) as ledger:
        run = ledger.start_run("simulation", default_policy(), at=s.start, label="14-day backtest")
        t = time.perf_counter()
        ids = ledger.record_bulk(run, decisions=s.decisions, events=s.events, intervals=s.intervals)
        elapsed = time.perf_counter() - t
        ledger.end_run(run, s.end)
        print(f"\n{db_url.split(':')[0]}: record_bulk of {len(s.decisions)} decisions, {len(s.intervals)} intervals, "
              f"{len(s.events)} events: {elapsed:.2f} s")
        assert len(set(ids)) == len(s.decisions)
        counts = ledger.counts()
        assert counts["decisions"] == 80_640 and counts["node_intervals"] == 102 and counts["group_events"] == 48
        # events point at the decisions that caused them
        for e in ledger.events(run)[:6]:
            assert ledger.decision(e.decision_id).at == e.at
    assert elapsed < 30, f"bulk insert took {elapsed:.1f} s"  # a couple of seconds on a quiet machine


def test_switching_to_wal_is_retried_while_the_file_is_locked():
    # Two processes opening a fresh file race to convert it to WAL, and SQLite can answer the loser
    # "database is locked" at once (test_two_processes_writing_at_once_do_not_corrupt_sqlite hit it
    # in CI). The switch is retried; any other error is not.
    import sqlite3

    from autoscaler.ledger.schema import _set_wal

    class Cursor:
        def __init__(self, errors):
            self.errors, self.calls = list(errors), 0

        def execute(self, sql):
            assert sql == "PRAGMA journal_mode = WAL"
            self.calls += 1
            if self.errors:
                raise sqlite3.OperationalError(self.errors.pop(0))

    locked = Cursor(["database is locked", "database is locked"])
    _set_wal(locked)
    assert locked.calls == 3
    broken = Cursor(["disk I/O error"])
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        _set_wal(broken)
    assert broken.calls == 1
