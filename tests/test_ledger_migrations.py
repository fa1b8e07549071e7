"""Ledger migrations: up to head and down to base on SQLite and PostgreSQL; models agree with
them; a database newer than the code is refused with its revision named."""

from __future__ import annotations

import ast
import re

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from autoscaler.cli import main
from autoscaler.errors import RuntimeFailure
from autoscaler.ledger.models import Base
from autoscaler.ledger.schema import MIGRATIONS_DIR, code_head, make_engine, run_migration
from autoscaler.ledger.store import Ledger
from tests.support.postgres import db_url, pg_server, pg_url  # noqa: F401  (fixtures)

LEDGER_TABLES = {t.name for t in Base.metadata.sorted_tables}


def _tables(engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def test_upgrade_to_head_and_downgrade_to_base(db_url):
    engine = make_engine(db_url)
    try:
        run_migration(engine, "upgrade", "head")
        assert LEDGER_TABLES <= _tables(engine)
        with engine.connect() as conn:
            assert MigrationContext.configure(conn).get_current_revision() == code_head()
            # the models and the migrations describe the same schema
            diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
            assert diff == []
            # constraint names come from the naming convention
            fks = {fk["name"] for fk in inspect(conn).get_foreign_keys("decisions")}
            assert fks == {"fk_decisions_run_id_runs"}
        run_migration(engine, "downgrade", "base")
        assert _tables(engine) & LEDGER_TABLES == set()
        run_migration(engine, "upgrade", "head")  # and back up again
        assert LEDGER_TABLES <= _tables(engine)
    finally:
        engine.dispose()


def test_first_use_creates_the_schema_and_says_so(tmp_path, caplog):
    url = f"sqlite:///{tmp_path / 'new.db'}"
    with caplog.at_level("INFO", logger="autoscaler.ledger"):
        Ledger(url).close()
    assert f"has no ledger tables yet; creating them (schema revision {code_head()})" in caplog.text
    # a new ledger is a normal event: INFO, not a warning
    assert [r.levelname for r in caplog.records] == ["INFO"]
    caplog.clear()
    with caplog.at_level("INFO", logger="autoscaler.ledger"):
        Ledger(url).close()
    assert caplog.text == ""  # at head: nothing to do, nothing said


def test_a_database_newer_than_the_code_is_refused_naming_its_revision(db_url, capsys):
    Ledger(db_url).close()
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    with pytest.raises(RuntimeFailure, match=rf"schema revision 0099, which this autoscaler does not know \(its newest is {code_head()}\)"):
        Ledger(db_url)
    # the command line: exit 1, one line on stderr
    assert main(["report", "--db", db_url, "--from", "2026-01-05", "--to", "2026-01-06"]) == 1
    err = capsys.readouterr().err.strip()
    assert "0099" in err and len(err.splitlines()) == 1


def test_migration_files_are_dated_and_say_why():
    files = sorted(p for p in (MIGRATIONS_DIR / "versions").glob("*.py") if p.name != "__init__.py")
    assert files, "no migrations"
    for path in files:
        assert re.match(r"^\d{4}_\d{2}_\d{2}_\d{4}_[a-z0-9_]+\.py$", path.name), path.name
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc and "Why:" in doc, f"{path.name}: the docstring must say why"


def test_a_populated_ledger_of_revision_0001_upgrades_to_head_keeping_every_row(tmp_path):
    # Revision 0002 rebuilds `runs` on SQLite (batch mode); decisions, events and intervals point at it.
    url = f"sqlite:///{tmp_path}/old.db"
    engine = make_engine(url)
    run_migration(engine, "upgrade", "0001")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO policy_versions (id, sha256, text, path, cost, fleet, first_seen_at) "
                          "VALUES (1, 'abc', 'x', NULL, '{}', '{}', '2026-01-05 00:00:00')"))
        conn.execute(text("INSERT INTO runs (id, source, label, started_at, ended_at, policy_sha256, created_at) "
                          "VALUES (1, 'simulation', 'old', '2026-01-05 00:00:00', NULL, 'abc', '2026-01-05 00:00:00')"))
        conn.execute(text("INSERT INTO decisions (id, run_id, at, action, target_groups, group_name, groups, reason, "
                          "detail, inputs, forecast_used, policy_sha256) VALUES (1, 1, '2026-01-05 00:00:15', "
                          "'scale_up', 2, 'g2', '[\"g2\"]', 'utilization_high', 'd', '{}', 0, 'abc')"))
        conn.execute(text("INSERT INTO group_events (id, run_id, at, group_name, event, decision_id, detail) "
                          "VALUES (1, 1, '2026-01-05 00:00:15', 'g2', 'started', 1, '')"))
        conn.execute(text("INSERT INTO node_intervals (id, run_id, node, group_name, state, start_at, end_at) "
                          "VALUES (1, 1, 'n3', 'g2', 'active', '2026-01-05 00:00:15', NULL)"))
    engine.dispose()
    Ledger(url).close()  # upgrades to head
    engine = make_engine(url)
    with engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == code_head()
        counts = [conn.execute(text(f"SELECT count(*) FROM {t}")).scalar()
                  for t in ("runs", "decisions", "group_events", "node_intervals")]
        assert counts == [1, 1, 1, 1]
        assert conn.execute(text("PRAGMA foreign_key_check")).all() == []
    engine.dispose()
