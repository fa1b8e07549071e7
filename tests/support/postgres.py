"""A throwaway PostgreSQL server for tests (PostgreSQL 15's binaries, which CI has).

    from tests.support.postgres import pg_server, pg_url   # fixtures: import them into a test module

    def test_x(pg_url):            # a fresh, empty database on a server shared by the session
        ledger = Ledger(pg_url)

The server runs from a ``mktemp -d /tmp/pg.XXXX`` folder owned by ``postgres`` (``initdb`` refuses
root, so as root it runs through ``runuser -u postgres``; as any other user it runs as that user),
listens on 127.0.0.1 on a free port with its socket in the same folder, and is stopped and
removed at the end of the session. Nothing is skipped: a missing binary is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.procs import free_port  # below the ephemeral range, claimed across the run

PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
READY_TIMEOUT_S = 30.0


def _as_owner(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@dataclass
class PgServer:
    folder: Path
    port: int
    proc: subprocess.Popen
    log: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(sql)
        finally:
            conn.close()

    def new_database(self) -> str:
        name = "t_" + uuid.uuid4().hex[:12]
        self.admin(f"CREATE DATABASE {name}")
        return self.url(name)


def _wait_ready(port: int, proc: subprocess.Popen, log: Path) -> None:
    import psycopg2

    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"postgres exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres", connect_timeout=1).close()
            return
        except psycopg2.OperationalError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres not ready after {READY_TIMEOUT_S} s:\n"
                                   f"{log.read_text(errors='replace')[-3000:]}") from None
            time.sleep(0.05)


def start_server() -> PgServer:
    for binary in ("initdb", "postgres", "pg_ctl"):
        if not (PG_BIN / binary).exists():
            raise RuntimeError(f"{PG_BIN / binary} is missing: install postgresql-15 (apt-get install postgresql-15)")
    folder = Path(tempfile.mkdtemp(prefix="pg.", dir="/tmp"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    data = folder / "data"
    log = folder / "postgres.log"
    subprocess.run(
        _as_owner([str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                   "--no-sync", "--locale=C"]),
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=folder,
    )
    last_error = None
    for _ in range(5):  # a port can be taken between choosing it and binding it: try another
        port = free_port()
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                _as_owner([str(PG_BIN / "postgres"), "-D", str(data), "-k", str(folder), "-p", str(port),
                           "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=50"]),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=folder, start_new_session=True,
            )
        try:
            _wait_ready(port, proc, log)
            return PgServer(folder, port, proc, log)
        except RuntimeError as exc:
            last_error = exc
            _stop(proc, data)
    shutil.rmtree(folder, ignore_errors=True)
    raise RuntimeError(f"could not start postgres: {last_error}")


def _stop(proc: subprocess.Popen, data: Path) -> None:
    if proc.poll() is None:
        subprocess.run(_as_owner([str(PG_BIN / "pg_ctl"), "stop", "-D", str(data), "-m", "fast", "-w", "-t", "20"]),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:  # the group we started, by its id
            os.killpg(proc.pid, 9)
            proc.wait(timeout=10)


def stop_server(server: PgServer) -> None:
    _stop(server.proc, server.folder / "data")
    shutil.rmtree(server.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    server = start_server()
    try:
        yield server
    finally:
        stop_server(server)


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """A fresh empty database on the session's server."""
    return pg_server.new_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path) -> str:
    """A fresh empty database: a SQLite file, then a PostgreSQL database (the test runs twice)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return request.getfixturevalue("pg_url")
