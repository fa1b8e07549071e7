"""The ledger database: engines, and the schema brought to the code's revision on first use.

Where the migrations live: inside the package, in ``autoscaler/ledger/migrations`` (Alembic's
``env.py``, ``script.py.mako`` and ``versions/``), so an installed autoscaler migrates its
database by itself, without a repository checkout or an ``alembic.ini``. ``alembic.ini`` at the
top of the repository points at the same folder, for developers who write a new revision::

    .venv/bin/alembic revision --rev-id 0002 -m "why this change"   # -> versions/2026_12_01_0002_...

Every ``Ledger`` calls ``ensure_schema``: a database without ledger tables gets them, an older one
is upgraded (both say so once on stderr), one at the code's head is left alone, and one whose
revision this code does not know (written by a newer autoscaler) is refused with a message that
names the revision. Two processes migrating at once serialise on a lock (SQLite: BEGIN IMMEDIATE;
PostgreSQL: a transaction-level advisory lock) and the second finds the work done.

SQLite runs in WAL mode with a 30 s busy timeout, and every write transaction starts with
BEGIN IMMEDIATE, so two writers queue instead of failing with "database is locked".
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from autoscaler.errors import BadInput, RuntimeFailure
from autoscaler.settings import redact_url

log = logging.getLogger("autoscaler.ledger")

MIGRATIONS_DIR = Path(__file__).resolve().with_name("migrations")
FILE_TEMPLATE = "%%(year)d_%%(month).2d_%%(day).2d_%%(rev)s_%%(slug)s"
SQLITE_BUSY_TIMEOUT_MS = 30_000
_PG_MIGRATION_LOCK = 0x4C454447  # "LEDG": the advisory lock key migrations take on PostgreSQL
WRITE = {"ledger_write": True}  # execution option: this connection writes (SQLite: BEGIN IMMEDIATE)


_JSON = json.JSONEncoder(separators=(",", ":"), check_circular=False)


def one_line(exc: BaseException) -> str:
    """The first meaningful line of a driver error, without SQLAlchemy's background links."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()
    return text[0].strip() if text else type(orig).__name__


def make_engine(url: str) -> Engine:
    """An engine for ``url`` with the ledger's connection settings. BadInput for a bad URL."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise BadInput(f"--db: {redact_url(url)!r} is not a database URL (e.g. sqlite:///autoscaler.db)") from None
    backend = parsed.get_backend_name()
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername=_default_pg_driver())
    # One shared encoder (no indent, no circular check): a 14-day backtest writes 160,000 JSON values.
    kwargs: dict = {"json_serializer": _JSON.encode}
    if backend == "sqlite":
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
    elif backend == "postgresql":
        kwargs["connect_args"] = {"connect_timeout": 5}
        kwargs["pool_pre_ping"] = True
    try:
        engine = create_engine(parsed, **kwargs)
    except (NoSuchModuleError, ImportError) as exc:
        raise BadInput(f"--db: {redact_url(url)}: no driver for this kind of database ({one_line(exc)})") from None
    if backend == "sqlite":
        _sqlite_setup(engine)
    return engine


def _default_pg_driver() -> str:
    """A plain postgresql:// URL: SQLAlchemy 2.1 means psycopg 3; use psycopg2 when only it is
    installed (the test extras bring psycopg2-binary)."""
    import importlib.util

    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2"
    return "postgresql"


def _sqlite_setup(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        # The driver must not open transactions by itself: we emit BEGIN (IMMEDIATE) below.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # A deferred transaction that reads and then writes fails at once with "database is
        # locked" when another writer got in between; IMMEDIATE takes the write lock up front and
        # waits (busy timeout) for it instead.
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("ledger_write") else "BEGIN")


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration, built in code (no alembic.ini needed at run time)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("file_template", FILE_TEMPLATE)
    cfg.set_main_option("path_separator", "os")
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def code_head() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the ledger has no migrations"
    return head


def known_revisions() -> set[str]:
    return {s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


def database_revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


def run_migration(engine: Engine, direction: str, target: str) -> None:
    """``upgrade``/``downgrade`` to ``target`` in one transaction (tests and ensure_schema use it)."""
    with engine.connect() as conn:
        conn.execution_options(**WRITE)
        with conn.begin():
            _lock_migrations(conn)
            getattr(command, direction)(alembic_config(conn), target)


def _lock_migrations(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})")


def _newer_error(url: str, revision: str, head: str) -> RuntimeFailure:
    return RuntimeFailure(
        f"the ledger database {redact_url(url)} is at schema revision {revision}, which this autoscaler "
        f"does not know (its newest is {head}): a newer autoscaler wrote it; run that version or upgrade"
    )


def ensure_schema(engine: Engine, url: str) -> None:
    """Bring the database to the code's head revision (see the module docstring)."""
    head = code_head()
    try:
        with engine.connect() as conn:
            current = database_revision(conn)
            conn.rollback()
            if current == head:
                return
            if current is not None and current not in known_revisions():
                raise _newer_error(url, current, head)
            conn.execution_options(**WRITE)
            with conn.begin():
                _lock_migrations(conn)
                current = database_revision(conn)  # again, under the lock: another process may have done it
                if current == head:
                    return
                if current is not None and current not in known_revisions():
                    raise _newer_error(url, current, head)
                if current is None:
                    log.warning("ledger: %s has no ledger tables yet; creating them (schema revision %s)",
                                redact_url(url), head)
                else:
                    log.warning("ledger: upgrading %s from schema revision %s to %s", redact_url(url), current, head)
                command.upgrade(alembic_config(conn), "head")
    except (DBAPIError, SQLAlchemyError) as exc:
        raise RuntimeFailure(f"ledger database {redact_url(url)}: {one_line(exc)}") from exc
