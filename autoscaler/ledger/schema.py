"""The ledger database: engines, and the schema brought to the code's revision on first use.

Where the migrations live: inside the package, in ``autoscaler/ledger/migrations`` (Alembic's
``env.py``, ``script.py.mako`` and ``versions/``), so an installed autoscaler migrates its
database by itself, without a repository checkout or an ``alembic.ini``. ``alembic.ini`` at the
top of the repository points at the same folder, for developers who write a new revision::

    .venv/bin/alembic revision --rev-id 0002 -m "why this change"   # -> versions/2026_12_01_0002_...

A writing ``Ledger`` calls ``ensure_schema``: a database without ledger tables gets them, an older
one is upgraded (both logged at INFO: normal events), one at the code's head is left alone, one
whose revision this code does not know (written by a newer autoscaler) is refused with a message
that names the revision, and one with ledger tables but no ``alembic_version`` row is refused with
a message that says so. A read-only ``Ledger`` (report, why) calls ``check_schema`` instead, which
never creates, migrates or writes anything and names a file that is not a ledger for what it is. Two processes migrating at once serialise on a lock (SQLite: BEGIN IMMEDIATE;
PostgreSQL: a transaction-level advisory lock) and the second finds the work done.

SQLite runs in WAL mode with a 30 s busy timeout, and every write transaction starts with
BEGIN IMMEDIATE, so two writers queue instead of failing with "database is locked".
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, event, inspect
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from autoscaler.errors import BadInput, RuntimeFailure
from autoscaler.settings import check_database_url, redact_url

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


def _create_private(path: str) -> None:
    """Create a new SQLite ledger file mode 0600 whatever the umask (its -wal and -shm files take
    the database file's mode): the ledger holds the fleet's records, readable by its owner only.
    An existing file is left as it is; a missing folder is SQLite's own error later."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def make_engine(url: str, *, read_only: bool = False, flag: str = "--db") -> Engine:
    """An engine for ``url`` with the ledger's connection settings. BadInput for a bad URL
    (``flag`` names where the URL came from: ``--db`` or ``AUTOSCALER_DATABASE_URL``).

    ``read_only``: SQLite opens the file with ``mode=ro`` and changes no setting in it (no WAL
    switch), PostgreSQL runs read-only transactions: a read command cannot change the database."""
    check_database_url(flag, url)  # what make_url would misread or raise a traceback for
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise BadInput(f"{flag}: {redact_url(url)!r} is not a database URL (e.g. sqlite:///autoscaler.db)") from None
    backend = parsed.get_backend_name()
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername=_default_pg_driver())
    # One shared encoder (no indent, no circular check): a 14-day backtest writes 160,000 JSON values.
    kwargs: dict = {"json_serializer": _JSON.encode}
    if backend == "sqlite":
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
        db = parsed.database
        if not read_only and db and db != ":memory:" and not db.startswith("file:"):
            _create_private(db)
        if read_only and db and db != ":memory:" and not db.startswith("file:"):
            ro = f"file:{quote(str(Path(db).resolve()))}?mode=ro"
            kwargs["creator"] = lambda: sqlite3.connect(ro, uri=True, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000,
                                                        check_same_thread=False)
    elif backend == "postgresql":
        kwargs["connect_args"] = {"connect_timeout": 5}
        kwargs["pool_pre_ping"] = True
    try:
        engine = create_engine(parsed, **kwargs)
    except (NoSuchModuleError, ImportError) as exc:
        raise BadInput(f"{flag}: {redact_url(url)}: no driver for this kind of database ({one_line(exc)})") from None
    if backend == "sqlite":
        _sqlite_setup(engine, read_only=read_only)
    elif read_only and backend == "postgresql":
        engine = engine.execution_options(postgresql_readonly=True)
    return engine


def _default_pg_driver() -> str:
    """A plain postgresql:// URL: SQLAlchemy 2.1 means psycopg 3; use psycopg2 when only it is
    installed (the test extras bring psycopg2-binary)."""
    import importlib.util

    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2"
    return "postgresql"


def _set_wal(cursor: sqlite3.Cursor) -> None:
    """PRAGMA journal_mode = WAL, retried while another process holds the file's lock.

    Two processes opening a fresh file at once race to convert it to WAL; SQLite can answer the
    loser "database is locked" at once, without its busy handler (seen in CI: two writers creating
    one ledger). Retried every 50 ms for up to the busy timeout, then the error stands.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def _sqlite_setup(engine: Engine, *, read_only: bool = False) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        # The driver must not open transactions by itself: we emit BEGIN (IMMEDIATE) below.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        if not read_only:  # journal_mode = WAL rewrites the file's header: only writers set it
            _set_wal(cursor)
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
        with _sqlite_foreign_keys_off(conn):
            conn.execution_options(**WRITE)
            with conn.begin():
                _lock_migrations(conn)
                getattr(command, direction)(alembic_config(conn), target)


@contextmanager
def _sqlite_foreign_keys_off(conn: Connection) -> Iterator[None]:
    """SQLite: foreign keys off around a migration. Batch mode rebuilds tables that others point
    at (copy, drop, rename), which fails with keys on; the switch works only outside a transaction,
    so it is made on the driver's connection before BEGIN. The migration checks the keys itself
    (PRAGMA foreign_key_check) before it commits. Other databases: nothing to do."""
    if conn.dialect.name != "sqlite":
        yield
        return
    raw = conn.connection.dbapi_connection
    assert raw is not None
    raw.execute("PRAGMA foreign_keys = OFF")
    try:
        yield
    finally:
        raw.execute("PRAGMA foreign_keys = ON")


def _lock_migrations(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})")


def _newer_error(url: str, revision: str, head: str) -> RuntimeFailure:
    return RuntimeFailure(
        f"the ledger database {redact_url(url)} is at schema revision {revision}, which this autoscaler "
        f"does not know (its newest is {head}): a newer autoscaler wrote it; run that version or upgrade"
    )


def _where(url: str) -> str:
    """How a message names the database: a SQLite file by its path, anything else by its URL."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return redact_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        return parsed.database
    return redact_url(url)


def ledger_table_names() -> set[str]:
    from autoscaler.ledger.models import Base

    return set(Base.metadata.tables)


def _no_version_error(url: str, found: set[str]) -> RuntimeFailure:
    return RuntimeFailure(
        f"{_where(url)}: has ledger tables ({', '.join(sorted(found)[:4])}{', ...' if len(found) > 4 else ''}) but no "
        f"alembic_version row, so its schema revision is unknown and it is neither read nor upgraded; restore the "
        f"row (the revision its tables were made by, e.g. INSERT INTO alembic_version VALUES ('{code_head()}')) "
        f"or use a new ledger"
    )


def check_schema(engine: Engine, url: str) -> None:
    """For read commands: the database must be a ledger at the code's head revision. Nothing is
    created, migrated or written; a file that is not a ledger is named for what it is."""
    head = code_head()
    where = _where(url)
    try:
        with engine.connect() as conn:
            names = set(inspect(conn).get_table_names())
            current = database_revision(conn) if "alembic_version" in names else None
            conn.rollback()
    except (DBAPIError, SQLAlchemyError) as exc:
        text = one_line(exc)
        if "file is not a database" in text:
            raise BadInput(f"{where}: not a SQLite database, so not a ledger; it was left untouched") from None
        raise RuntimeFailure(f"ledger database {redact_url(url)}: {text}") from exc
    ledger_tables = ledger_table_names() & names
    if current is None:
        if ledger_tables:
            raise _no_version_error(url, ledger_tables)
        if not names:
            raise BadInput(f"{where}: an empty database, not a ledger: nothing has been recorded there "
                           f"(it was left untouched)")
        shown = ", ".join(sorted(names)[:5]) + (", ..." if len(names) > 5 else "")
        raise BadInput(f"{where}: a database with {len(names)} other table(s) ({shown}) and no ledger tables: "
                       f"not a ledger; it was left untouched")
    if current == head:
        return
    if current not in known_revisions():
        raise _newer_error(url, current, head)
    raise RuntimeFailure(
        f"{where}: the ledger is at schema revision {current} and this autoscaler reads {head}; a read command "
        f"does not migrate: upgrade it with `autoscaler ledger upgrade --db URL`"
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
            with _sqlite_foreign_keys_off(conn), conn.begin():
                _lock_migrations(conn)
                current = database_revision(conn)  # again, under the lock: another process may have done it
                if current == head:
                    return
                if current is not None and current not in known_revisions():
                    raise _newer_error(url, current, head)
                if current is None:
                    found = ledger_table_names() & set(inspect(conn).get_table_names())
                    if found:
                        raise _no_version_error(url, found)
                    log.info("ledger: %s has no ledger tables yet; creating them (schema revision %s)",
                             redact_url(url), head)
                else:
                    log.info("ledger: upgrading %s from schema revision %s to %s", redact_url(url), current, head)
                command.upgrade(alembic_config(conn), "head")
    except (DBAPIError, SQLAlchemyError) as exc:
        raise RuntimeFailure(f"ledger database {redact_url(url)}: {one_line(exc)}") from exc
