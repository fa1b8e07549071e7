"""One actor: which controller instance may act on the fleet, and the epoch that fences it.

PostgreSQL: a lease in the ``leases`` table, as Kubernetes leader election does it (client-go's
defaults: lease 15 s, renew deadline 10 s, retry 2 s)::

    lease = leadership_for(settings.database_url, instance_id())   # PostgresLease or SqliteFlock
    state = lease.start()          # SQLite: raises LeaseHeld (exit 1) when another instance runs
    every lease.retry_s seconds, in a thread that never waits on the tick:
        state = lease.try_acquire_or_renew()        # never raises; LeaderState(leader, epoch, ...)
    before every act and every write:
        if lease.leading(): ... write with epoch=lease.epoch, inside fenced(conn, lease.epoch) ...
    on SIGTERM, after the last write:
        lease.release()            # a standby takes over at its next retry instead of in lease_s

- The lease's times are the database's (``clock_timestamp()``), so clock skew between hosts does
  not matter. A candidate takes the lease only when it is free or expired (``expires_at`` before
  the database's now); every takeover adds 1 to the epoch; a renewal keeps it.
- ``leading()`` is True only within ``renew_deadline_s`` of the start of the last successful
  renewal, measured on this process's monotonic clock. With lease 15 s and deadline 10 s a
  leader that cannot renew (database gone, connections cut, the process frozen) stops acting at
  least 5 s before any standby may take over: never two leaders at once. A leader that lost
  the deadline does not renew the same epoch later: it waits for the lease to expire like any
  candidate and comes back with a new epoch.
- A database error never raises out of ``try_acquire_or_renew``: it gives ``leader False`` with
  ``error`` (a ``LeaseUnavailable``), logged once per change.
- Fencing: migration 0003 puts triggers on the live tables that refuse (SQLSTATE ``AF001``,
  ``fenced: ...``) a write whose epoch is not the lease's, or made after the lease expired by the
  database's clock. The epoch is the row's ``epoch`` column, or the transaction's declared epoch
  (``fenced(conn, epoch)``; use it in every leader transaction, and always for tables without
  the column such as ``node_intervals``, and to update rows an earlier leader wrote). So a
  leader that froze and woke up after a takeover cannot write, whatever its own clock says.

SQLite: ``SqliteFlock`` takes an exclusive non-blocking ``flock`` on ``<database file>.lock``
(never a POSIX lock on the database file, which would break SQLite's own locking), holds it for
the life of the process, and writes its pid, host and instance into the file. A second instance
gets ``LeaseHeld`` whose one line names the holder. The kernel releases the lock when the
process dies, so a restart right after a SIGKILL succeeds. The file is opened close-on-exec, so
the workers a local actuator starts (which outlive the controller) never inherit the lock. The
epoch is the ``leases`` row's counter, +1 at every acquisition.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from autoscaler.errors import BadInput, RuntimeFailure
from autoscaler.ledger.schema import WRITE, ensure_schema, make_engine, one_line
from autoscaler.settings import redact_url

log = logging.getLogger("autoscaler.leadership")

LEASE_NAME = "controller"  # the one lease row; migration 0003's triggers read it by this name
FENCED_SQLSTATE = "AF001"
LEASE_S, RENEW_DEADLINE_S, RETRY_S = 15.0, 10.0, 2.0  # client-go's defaults


class LeaseUnavailable(RuntimeFailure):
    """The lease could not be read or written (the database unreachable, a connection cut)."""


class LeaseHeld(RuntimeFailure):
    """SQLite: another instance holds the ledger's lock. Exit 1; the message names the holder."""


class Fenced(RuntimeFailure):
    """The database refused a write: its epoch is not the current leader's (or the lease expired)."""


@dataclass(frozen=True)
class LeaderState:
    leader: bool
    epoch: int  # this instance's epoch while it leads; else the lease row's (0: never held)
    holder: str | None  # the instance the lease row names
    expires_at: float | None  # when the lease expires, by the database's clock (epoch s); None on SQLite
    error: LeaseUnavailable | None = None  # why the lease could not be read or renewed


def instance_id() -> str:
    """This controller's name in the lease: $AUTOSCALER_INSTANCE, else ``hostname:pid``."""
    return os.environ.get("AUTOSCALER_INSTANCE") or f"{socket.gethostname()}:{os.getpid()}"


def _epoch_s(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
    return float(value)


# ----------------------------------------------------------------------------------- PostgreSQL

# Compare-and-swap, as client-go updates its Lease: a candidate never holds a lock on the lease row
# unless it takes the lease. A plain UPDATE locks only a row whose WHERE holds on the row it sees,
# so a standby's attempt at a held, unexpired lease locks nothing. (The former INSERT ... ON
# CONFLICT DO UPDATE ... WHERE locked the row even when its WHERE failed: one standby stalled inside
# that statement's transaction held off the leader's renewal until it lost the lease, issue 34 item 6.)
_TAKE_OR_RENEW = text("""
UPDATE leases AS l SET
    holder = :me,
    epoch = CASE WHEN :renewing AND l.holder = :me AND l.epoch = :mine THEN l.epoch ELSE l.epoch + 1 END,
    acquired_at = CASE WHEN :renewing AND l.holder = :me AND l.epoch = :mine THEN l.acquired_at
                       ELSE clock_timestamp() END,
    renewed_at = clock_timestamp(),
    expires_at = clock_timestamp() + make_interval(secs => :lease_s)
WHERE l.name = :name
  AND ((:renewing AND l.holder = :me AND l.epoch = :mine AND l.expires_at >= clock_timestamp())
       OR l.holder IS NULL OR l.expires_at IS NULL OR l.expires_at < clock_timestamp())
RETURNING l.epoch, l.holder, l.expires_at
""")
# Only when the row does not exist yet (an empty ledger): DO NOTHING never locks an existing row.
_CREATE = text("""
INSERT INTO leases (name, holder, epoch, acquired_at, renewed_at, expires_at)
VALUES (:name, :me, 1, clock_timestamp(), clock_timestamp(), clock_timestamp() + make_interval(secs => :lease_s))
ON CONFLICT (name) DO NOTHING
RETURNING epoch, holder, expires_at
""")
_READ = text("SELECT holder, epoch, expires_at FROM leases WHERE name = :name")
_RELEASE = text("UPDATE leases SET expires_at = clock_timestamp() WHERE name = :name AND holder = :me AND epoch = :mine")


def _lease_engine(url: str, instance: str, retry_s: float, renew_deadline_s: float) -> Engine:
    """An engine of its own for the lease: one connection, short timeouts, dead peers noticed in
    seconds (TCP keepalives and a user timeout), named after the instance in pg_stat_activity."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        from autoscaler.ledger.schema import _default_pg_driver

        parsed = parsed.set(drivername=_default_pg_driver())
    from sqlalchemy import create_engine

    wait = max(1, int(retry_s))
    connect_args = {
        "connect_timeout": wait,
        "application_name": f"autoscaler-lease {instance}"[:63],
        "keepalives": 1, "keepalives_idle": wait, "keepalives_interval": 1, "keepalives_count": 2,
        "tcp_user_timeout": int(renew_deadline_s * 1000),
    }
    return create_engine(parsed, connect_args=connect_args, pool_size=1, max_overflow=1, pool_pre_ping=True)


class PostgresLease:
    """The leadership lease on PostgreSQL (see the module docstring).

    ``db`` is a URL (the lease then has an engine of its own) or an Engine. ``monotonic`` is the
    local clock the renew deadline is measured on (a parameter for tests).
    """

    exclusive = False  # a second instance is a standby, not an error

    def __init__(
        self,
        db: str | Engine,
        instance: str,
        *,
        lease_s: float = LEASE_S,
        renew_deadline_s: float = RENEW_DEADLINE_S,
        retry_s: float = RETRY_S,
        name: str = LEASE_NAME,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < retry_s < renew_deadline_s < lease_s:
            raise ValueError(f"need 0 < retry_s ({retry_s}) < renew_deadline_s ({renew_deadline_s}) "
                             f"< lease_s ({lease_s})")
        self.instance, self.name = instance, name
        self.lease_s, self.renew_deadline_s, self.retry_s = float(lease_s), float(renew_deadline_s), float(retry_s)
        self._monotonic = monotonic
        if isinstance(db, str):
            self.safe_url = redact_url(db)
            self.engine = _lease_engine(db, instance, retry_s, renew_deadline_s)
            self._owns_engine = True
        else:
            self.safe_url = redact_url(db.url.render_as_string(hide_password=False))
            self.engine, self._owns_engine = db, False
        # _lock guards the state and is never held across a database call, so leading() answers at
        # once even while a renewal hangs on a dead network; _campaign serialises the calls.
        self._lock = threading.Lock()
        self._campaign = threading.Lock()
        self._epoch = 0
        self._renewed_at: float | None = None  # monotonic start of the last successful renewal
        self._was_leader = False
        self._last_error: str | None = None
        self.state = LeaderState(False, 0, None, None)

    # --------------------------------------------------------------------------- reading
    def leading(self) -> bool:
        """May this instance act now? True only within the renew deadline of the last renewal."""
        with self._lock:
            return self._leading_locked()

    def _leading_locked(self) -> bool:
        return self._renewed_at is not None and self._monotonic() - self._renewed_at < self.renew_deadline_s

    @property
    def epoch(self) -> int:
        """The epoch to stamp writes with (valid while ``leading()``)."""
        return self._epoch

    # --------------------------------------------------------------------------- the lease
    def start(self) -> LeaderState:
        """The first attempt at service start (a standby is normal on PostgreSQL: never raises)."""
        return self.try_acquire_or_renew()

    def try_acquire_or_renew(self) -> LeaderState:
        """Renew the lease if this instance leads, else take it if it is free or expired."""
        with self._campaign:
            with self._lock:
                renewing = self._leading_locked()
                began = self._monotonic()
                params = {"name": self.name, "me": self.instance, "mine": self._epoch if renewing else -1,
                          "renewing": renewing, "lease_s": self.lease_s}
            other = None
            try:
                with self.engine.connect() as conn:
                    with conn.begin():
                        self.begin_lease_transaction(conn)
                        row = conn.execute(_TAKE_OR_RENEW, params).first()
                        if row is None:
                            other = conn.execute(_READ, {"name": self.name}).first()
                            if other is None:  # no lease row yet: the first instance creates it
                                row = conn.execute(_CREATE, params).first()
                                if row is None:
                                    other = conn.execute(_READ, {"name": self.name}).first()
            except (DBAPIError, SQLAlchemyError, OSError) as exc:
                with self._lock:
                    return self._failed(exc)
            with self._lock:
                return self._settle(row, other, renewing, began)

    def begin_lease_transaction(self, conn: Connection) -> None:
        """The timeouts of every lease transaction (right after ``begin()``): a renewal that waits
        longer than the deadline is worth nothing (``statement_timeout``); a row lock held by
        someone else is waited for at most ``retry_s`` (``lock_timeout``: the next retry comes
        anyway); and a session stalled inside the transaction (a frozen process) is ended by the
        server after ``retry_s`` idle (``idle_in_transaction_session_timeout``), which rolls it back
        and frees the row for everyone else."""
        retry_ms = max(1, int(self.retry_s * 1000))
        conn.exec_driver_sql(f"SET LOCAL statement_timeout = {int(self.renew_deadline_s * 1000)}")
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = {retry_ms}")
        conn.exec_driver_sql(f"SET LOCAL idle_in_transaction_session_timeout = {retry_ms}")

    def _settle(self, row, other, renewing: bool, began: float) -> LeaderState:
        if row is not None:
            epoch, holder, expires = int(row[0]), row[1], _epoch_s(row[2])
            if not renewing or epoch != self._epoch:
                log.warning("leadership: %s acquired the lease (epoch %d, expires in %.0f s)",
                            self.instance, epoch, self.lease_s)
            self._epoch, self._renewed_at = epoch, began
            self._set(LeaderState(True, epoch, holder, expires), problem=None)
        else:
            self._renewed_at = None
            holder, epoch, expires = (other[0], int(other[1]), _epoch_s(other[2])) if other else (None, 0, None)
            if self._was_leader:
                log.warning("leadership: %s lost the lease (held by %s, epoch %d)", self.instance, holder, epoch)
            self._set(LeaderState(False, epoch, holder, expires), problem=None)
        return self.state

    def _failed(self, exc: BaseException) -> LeaderState:
        problem = f"lease on {self.safe_url}: {one_line(exc)}"
        error = LeaseUnavailable(problem)
        if problem != self._last_error:
            log.warning("leadership: %s cannot reach the lease: %s", self.instance, problem)
        # Still leading within the deadline (a renewal may fail once and succeed at the next retry).
        leading = self._leading_locked()
        if not leading:
            self._renewed_at = None
            if self._was_leader:
                log.warning("leadership: %s stops leading: not renewed within %.0f s (epoch %d)",
                            self.instance, self.renew_deadline_s, self._epoch)
        prev = self.state
        self._set(LeaderState(leading, self._epoch if leading else prev.epoch, prev.holder, prev.expires_at, error),
                  problem=problem)
        return self.state

    def _set(self, state: LeaderState, problem: str | None) -> None:
        if problem is None and self._last_error is not None:
            log.warning("leadership: %s reaches the lease again", self.instance)
        self._last_error = problem
        self._was_leader = state.leader
        self.state = state

    def release(self) -> None:
        """Stop leading and expire the lease at once (clean shutdown, after the last write)."""
        with self._campaign:
            with self._lock:
                was, epoch = self._leading_locked(), self._epoch
                self._renewed_at = None
                self._was_leader = False
                self.state = LeaderState(False, epoch, self.instance if was else self.state.holder, None)
            if not was:
                return
            try:
                with self.engine.connect() as conn:
                    with conn.begin():
                        self.begin_lease_transaction(conn)
                        conn.execute(_RELEASE, {"name": self.name, "me": self.instance, "mine": epoch})
                log.warning("leadership: %s released the lease (epoch %d)", self.instance, epoch)
            except (DBAPIError, SQLAlchemyError, OSError) as exc:  # it expires by itself in lease_s
                log.warning("leadership: %s could not release the lease: %s", self.instance, one_line(exc))

    def close(self) -> None:
        if self._owns_engine:
            self.engine.dispose()


# -------------------------------------------------------------------------------------- fencing


def fenced(conn: Connection, epoch: int) -> None:
    """Declare the writer's epoch for the rest of ``conn``'s transaction (PostgreSQL; a no-op on
    SQLite, where the flock makes stale leaders impossible). Every write in the transaction to a
    fenced table is then refused unless ``epoch`` is the current leader's and its lease is alive.
    Call it right after ``begin()``."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT set_config('autoscaler.epoch', :epoch, true)"), {"epoch": str(int(epoch))})


def is_fenced(exc: BaseException | None) -> bool:
    """Was ``exc`` (or what caused it: a Ledger RuntimeFailure wraps the driver error) a fencing refusal?"""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, Fenced):
            return True
        orig = getattr(exc, "orig", None)
        for candidate in (exc, orig):
            if candidate is not None and getattr(candidate, "pgcode", None) == FENCED_SQLSTATE:
                return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


# ------------------------------------------------------------------------------------------ SQLite

# Locks this process holds, by lock file: kept here so a lost SqliteFlock object (garbage
# collected) never closes the file and drops the lock while the process lives.
_HELD: dict[str, int] = {}


def sqlite_path(url_or_path: str) -> str | None:
    """The database file of a SQLite URL (or a plain path); None for an in-memory database."""
    if "://" not in url_or_path:
        return url_or_path
    db = make_url(url_or_path).database
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return db


def lock_holder(lock_path: str | Path) -> dict[str, str]:
    """What the holder wrote into the lock file: {"pid", "host", "instance", "since"} (may be empty)."""
    try:
        content = Path(lock_path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    out = {}
    for part in content.split():
        key, sep, value = part.partition("=")
        if sep:
            out[key] = value
    return out


def describe_holder(holder: dict[str, str]) -> str:
    if not holder.get("pid"):
        return "a process that has not written its name yet"
    text_ = f"pid {holder['pid']} on {holder.get('host', '?')} (instance {holder.get('instance', '?')})"
    return text_ + (f" since {holder['since']}" if holder.get("since") else "")


def flock_held(lock_path: str | Path) -> bool | None:
    """Is an exclusive flock held on ``lock_path`` by any process? Read from /proc/locks, which
    takes no lock itself (a status command must never make a starting controller fail). None
    when it cannot be told (no /proc/locks)."""
    try:
        st = os.stat(lock_path)
    except FileNotFoundError:
        return False
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (blocked waiters have a "->" field)
        if len(fields) < 6 or "->" in fields or fields[1] != "FLOCK":
            continue
        try:
            major, minor, inode = fields[5].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) == want:
                return True
        except ValueError:
            continue
    return False


class SqliteFlock:
    """The single actor on SQLite (see the module docstring). ``database`` is a sqlite URL or a path."""

    exclusive = True  # a second instance must not run

    def __init__(self, database: str, instance: str, *, engine: Engine | None = None) -> None:
        self.instance = instance
        self.url = database if "://" in database else f"sqlite:///{database}"
        self.path = sqlite_path(database)
        self.lock_path = None if self.path is None else self.path + ".lock"
        self._engine = engine
        self._fd: int | None = None
        self._epoch = 0
        self.state = LeaderState(False, 0, None, None)

    def leading(self) -> bool:
        """Held, and the lock file at the path is still the one locked (checked at every call: two
        syscalls). A lock file removed or replaced under a running leader would let a second
        instance lock a new file at the same path and lead too (issue 34, item 8)."""
        if self._fd is not None:
            return self._same_file(self._fd) is None
        return self.path is None and self._epoch > 0

    def _same_file(self, fd: int) -> str | None:
        """None when ``fd`` is the file at the lock's path; else what happened to the path."""
        assert self.lock_path is not None
        try:
            held = os.fstat(fd)
            now = os.stat(self.lock_path, follow_symlinks=False)
        except FileNotFoundError:
            return f"the lock file {self.lock_path} was removed"
        except OSError as exc:
            return f"the lock file {self.lock_path} cannot be checked: {exc.strerror or exc}"
        if (held.st_dev, held.st_ino) != (now.st_dev, now.st_ino):
            return f"the lock file {self.lock_path} was replaced by another file"
        return None

    @property
    def epoch(self) -> int:
        return self._epoch

    def start(self) -> LeaderState:
        return self.acquire()

    def acquire(self) -> LeaderState:
        """Take the lock and a new epoch, or raise LeaseHeld naming the holder."""
        if self.leading():
            return self.state
        if self.lock_path is not None:
            self._fd = self._lock()
        try:
            self._epoch = self._bump_epoch()
        except BaseException:
            self.release()
            raise
        log.info("leadership: %s holds %s (epoch %d)", self.instance, self.lock_path or "an in-memory ledger",
                 self._epoch)
        self.state = LeaderState(True, self._epoch, self.instance, None)
        return self.state

    def try_acquire_or_renew(self) -> LeaderState:
        """Held for the life of the process: True once acquired; a refusal gives leader False. A
        lock whose file was removed or replaced is given up (the lock no longer keeps a second
        instance out): leader False with the reason, and the service, having led, exits 1."""
        if self._fd is not None:
            lost = self._same_file(self._fd)
            if lost is None:
                return self.state
            log.error("leadership: %s stops leading: %s (another instance could lock a new file there)",
                      self.instance, lost)
            self.release()
            self.state = LeaderState(False, self._epoch, None, None, LeaseUnavailable(lost))
            return self.state
        if self.leading():
            return self.state
        try:
            return self.acquire()
        except LeaseHeld as exc:
            holder = lock_holder(self.lock_path) if self.lock_path else {}
            self.state = LeaderState(False, self._epoch, holder.get("instance"), None, LeaseUnavailable(str(exc)))
            return self.state

    def _lock(self) -> int:
        path = self.lock_path
        assert path is not None
        if path in _HELD:
            raise LeaseHeld(f"{path}: this process already holds it (instance {self.instance})")
        try:
            # No O_TRUNC: the holder's name must survive a failed attempt. O_CLOEXEC: children
            # started by subprocess never inherit (and so never keep) the lock.
            # O_NOFOLLOW: a symlink planted at the lock's path is refused, never followed. 0600 and
            # fchmod: the file is the owner's whatever the umask.
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            os.fchmod(fd, 0o600)
        except OSError as exc:
            raise RuntimeFailure(f"{path}: cannot open the ledger's lock file: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise LeaseHeld(f"another autoscaler is running on the ledger {self.path}: "
                                f"{describe_holder(lock_holder(path))}; lock file {path}") from None
            raise RuntimeFailure(f"{path}: cannot lock: {exc.strerror}") from exc
        since = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
        line = f"pid={os.getpid()} host={socket.gethostname()} instance={self.instance} since={since}\n"
        os.ftruncate(fd, 0)
        os.pwrite(fd, line.encode(), 0)
        _HELD[path] = fd
        return fd

    def _bump_epoch(self) -> int:
        engine = self._engine or make_engine(self.url)
        try:
            if self._engine is None:
                ensure_schema(engine, self.url)
            with engine.connect() as conn:
                conn.execution_options(**WRITE)
                with conn.begin():
                    row = conn.execute(_READ, {"name": LEASE_NAME}).first()
                    epoch = (int(row[1]) if row else 0) + 1
                    now = datetime.now(timezone.utc).replace(tzinfo=None)  # SQLite: UTC digits
                    if row is None:
                        conn.execute(text("INSERT INTO leases (name, holder, epoch, acquired_at, renewed_at, "
                                          "expires_at) VALUES (:name, :me, :epoch, :now, :now, NULL)"),
                                     {"name": LEASE_NAME, "me": self.instance, "epoch": epoch, "now": now})
                    else:
                        conn.execute(text("UPDATE leases SET holder = :me, epoch = :epoch, acquired_at = :now, "
                                          "renewed_at = :now, expires_at = NULL WHERE name = :name"),
                                     {"name": LEASE_NAME, "me": self.instance, "epoch": epoch, "now": now})
            return epoch
        except (DBAPIError, SQLAlchemyError) as exc:
            raise RuntimeFailure(f"ledger database {redact_url(self.url)}: {one_line(exc)}") from exc
        finally:
            if self._engine is None:
                engine.dispose()

    def release(self) -> None:
        """Drop the lock (clean shutdown; the kernel does it when the process dies)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            _HELD.pop(self.lock_path or "", None)
            os.close(fd)
        self.state = LeaderState(False, self._epoch, self.instance, None)

    def close(self) -> None:
        self.release()


def leadership_for(url: str, instance: str | None = None, *, lease_s: float = LEASE_S,
                   renew_deadline_s: float = RENEW_DEADLINE_S, retry_s: float = RETRY_S) -> PostgresLease | SqliteFlock:
    """The single-actor mechanism for the ledger at ``url``: a lease on PostgreSQL (``timing``:
    lease_s, renew_deadline_s, retry_s), a flock on SQLite."""
    instance = instance or instance_id()
    try:
        backend = make_url(url).get_backend_name()
    except Exception:  # noqa: BLE001 - any unparsable URL is bad input
        raise BadInput(f"--db: {redact_url(url)!r} is not a database URL (e.g. sqlite:///autoscaler.db)") from None
    if backend == "postgresql":
        return PostgresLease(url, instance, lease_s=lease_s, renew_deadline_s=renew_deadline_s, retry_s=retry_s)
    if backend == "sqlite":
        return SqliteFlock(url, instance)
    raise BadInput(f"--db: {redact_url(url)}: only SQLite and PostgreSQL are supported for the live service")
