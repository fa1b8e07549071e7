"""One actor, fenced: the PostgreSQL lease and its epoch triggers, and the SQLite flock.

Real processes and a real PostgreSQL. Short lease settings keep the module quick (lease 3 s,
renew deadline 2 s, retry 0.5 s); the production defaults are client-go's 15/10/2.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time

import pytest
from sqlalchemy import text

from autoscaler.errors import RuntimeFailure
from autoscaler.ledger.schema import code_head, database_revision, make_engine
from autoscaler.ledger.store import Ledger
from autoscaler.service.leadership import (
    LEASE_S,
    RENEW_DEADLINE_S,
    RETRY_S,
    LeaseHeld,
    LeaseUnavailable,
    PostgresLease,
    SqliteFlock,
    fenced,
    flock_held,
    instance_id,
    is_fenced,
    leadership_for,
    lock_holder,
)
from tests.support.ledger_runs import record_bulk, record_live
from tests.support.postgres import pg_server, pg_url  # noqa: F401  (fixtures)
from tests.support.procs import PYTHON, REPO, Proc, wait_until

LEASE, DEADLINE, RETRY = 3.0, 2.0, 0.5
TIMING = {"lease_s": LEASE, "renew_deadline_s": DEADLINE, "retry_s": RETRY}


def _ledger(url: str) -> str:
    Ledger(url).close()  # the schema, with migration 0003's triggers on PostgreSQL
    return url


def _holder(tmp_path, url: str, name: str, *extra: str) -> Proc:
    argv = [PYTHON, "-m", "tests.support.lease_holder", url, name, "--lease", str(LEASE), "--deadline",
            str(DEADLINE), "--retry", str(RETRY), *extra]
    return Proc(argv, tmp_path / f"{name}.log")


def _lines(proc: Proc) -> list[dict]:
    out = []
    for line in proc.log().splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line being written
    return out


def _lease_row(url: str):
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT holder, epoch, extract(epoch FROM acquired_at), "
                                     "extract(epoch FROM expires_at) FROM leases WHERE name = 'controller'")).first()
    finally:
        engine.dispose()


_PROBE = text("INSERT INTO controller_state (key, value, epoch, updated_at) VALUES (:key, '{}', :epoch, now()) "
              "ON CONFLICT (key) DO UPDATE SET epoch = EXCLUDED.epoch, updated_at = EXCLUDED.updated_at")


def _write(url: str, epoch: int | None, *, declare: int | None = None, key: str = "probe") -> None:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            with conn.begin():
                if declare is not None:
                    fenced(conn, declare)
                conn.execute(_PROBE, {"key": key, "epoch": epoch})
    finally:
        engine.dispose()


def test_defaults_are_client_gos():
    assert (LEASE_S, RENEW_DEADLINE_S, RETRY_S) == (15.0, 10.0, 2.0)
    with pytest.raises(ValueError):
        PostgresLease("postgresql://x@127.0.0.1/x", "a", lease_s=10, renew_deadline_s=10)  # deadline must be < lease


def test_instance_id_defaults_to_host_and_pid(monkeypatch):
    monkeypatch.delenv("AUTOSCALER_INSTANCE", raising=False)
    assert instance_id() == f"{socket.gethostname()}:{os.getpid()}"
    monkeypatch.setenv("AUTOSCALER_INSTANCE", "ctl-a")
    assert instance_id() == "ctl-a"


def test_factory_picks_the_lease_or_the_flock(tmp_path):
    assert isinstance(leadership_for("postgresql://u@127.0.0.1/db", "a"), PostgresLease)
    assert isinstance(leadership_for(f"sqlite:///{tmp_path / 'x.db'}", "a"), SqliteFlock)


# ------------------------------------------------------------------------------ the lease


def test_acquire_renew_keeps_the_epoch_takeover_adds_one_release_hands_over_at_once(pg_url):
    url = _ledger(pg_url)
    a, b = PostgresLease(url, "a", **TIMING), PostgresLease(url, "b", **TIMING)
    try:
        first = a.try_acquire_or_renew()
        assert (first.leader, first.epoch, first.holder) == (True, 1, "a")
        standby = b.try_acquire_or_renew()
        assert (standby.leader, standby.holder) == (False, "a") and not b.leading()
        renewed = a.try_acquire_or_renew()
        assert renewed.epoch == 1 and renewed.expires_at > first.expires_at  # renewal: same epoch, later expiry
        # the expiry is the database's clock + lease_s
        holder, epoch, acquired, expires = _lease_row(url)
        assert float(expires) == pytest.approx(renewed.expires_at, abs=1e-3)
        a.release()
        assert not a.leading()
        took = b.try_acquire_or_renew()  # at once: no need to wait lease_s after a release
        assert (took.leader, took.epoch, took.holder) == (True, 2, "b")
        assert a.try_acquire_or_renew().leader is False
    finally:
        a.close()
        b.close()


def test_a_leader_past_its_deadline_does_not_continue_its_epoch(pg_url):
    """Its own clock says the deadline passed (here a fake monotonic clock jumps) while the lease
    is still unexpired in the database: it reports leader False, does not renew the old epoch,
    and takes the lease again only once it expired, with a new epoch."""
    url = _ledger(pg_url)
    clock = [1000.0]
    lease = PostgresLease(url, "slow", monotonic=lambda: clock[0], **TIMING)
    try:
        assert lease.try_acquire_or_renew().epoch == 1
        clock[0] += DEADLINE - 0.01
        assert lease.leading()
        clock[0] += 0.02  # the renew deadline has passed on its own clock
        assert not lease.leading()
        again = lease.try_acquire_or_renew()  # the database lease (3 s) has not expired yet
        assert (again.leader, again.holder, again.epoch) == (False, "slow", 1) and not lease.leading()
        _, _, _, expires = _lease_row(url)
        time.sleep(max(0.0, float(expires) - _db_now(url)) + 0.05)
        back = lease.try_acquire_or_renew()
        assert (back.leader, back.epoch) == (True, 2)
    finally:
        lease.close()


def test_takeover_after_sigkill_of_the_leader_only_once_the_lease_expired(pg_url, tmp_path):
    url = _ledger(pg_url)
    standby = PostgresLease(url, "standby", **TIMING)
    with _holder(tmp_path, url, "leader") as leader:
        wait_until(lambda: any(x.get("leader") for x in _lines(leader)), 20, what="leader acquires", proc=leader)
        for _ in range(3):  # a live leader keeps it
            assert standby.try_acquire_or_renew().leader is False
            time.sleep(RETRY)
        os.kill(leader.pid, signal.SIGKILL)
        killed = time.monotonic()
        leader.wait(10)
        _, old_epoch, _, last_expiry = _lease_row(url)
        while not standby.try_acquire_or_renew().leader:
            assert time.monotonic() - killed < 30, "no takeover within 30 s of the leader's death"
            time.sleep(RETRY)
        took_after = time.monotonic() - killed
    try:
        holder, epoch, acquired, _ = _lease_row(url)
        assert holder == "standby" and epoch == old_epoch + 1
        # never before the dead leader's lease expired (both times by the database's clock) ...
        assert float(acquired) >= float(last_expiry)
        # ... and within lease + retry of the death (plus scheduling slack on a shared machine)
        assert took_after <= LEASE + RETRY + 1.5, took_after
    finally:
        standby.close()


def test_a_leader_whose_connections_are_cut_stops_within_the_deadline_and_is_refused(pg_server, pg_url):
    url = _ledger(pg_url)
    db = url.rsplit("/", 1)[1]
    role = "leader_" + db[-8:]
    pg_server.admin(f"CREATE ROLE {role} LOGIN")
    pg_server.admin(f"GRANT ALL ON DATABASE {db} TO {role}")
    grants = make_engine(url)
    with grants.begin() as conn:
        conn.exec_driver_sql(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
        conn.exec_driver_sql(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
    grants.dispose()
    role_url = url.replace("postgres@", f"{role}@")
    leader = PostgresLease(role_url, "cut", **TIMING)
    standby = PostgresLease(url, "standby", **TIMING)
    try:
        state = leader.try_acquire_or_renew()
        assert state.leader and state.epoch == 1
        last_ok = time.monotonic()
        _write(role_url, state.epoch, key="cut")  # a leader's write goes through
        # cut every connection of the leader and let none back in
        pg_server.admin(f"ALTER ROLE {role} NOLOGIN")
        pg_server.admin(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'")
        failures = []
        while leader.leading():
            time.sleep(RETRY)
            s = leader.try_acquire_or_renew()
            if s.error is not None:
                failures.append(s)
        stopped = time.monotonic() - last_ok
        assert failures and all(isinstance(f.error, LeaseUnavailable) for f in failures)
        assert stopped <= DEADLINE + RETRY + 0.5, stopped  # leader False within the renew deadline ...
        _, _, _, expires = _lease_row(url)
        db_now = _db_now(url)
        assert db_now < float(expires)  # ... and before its lease ran out
        assert standby.try_acquire_or_renew().leader is False  # nobody leads in between
        # the standby takes over once the lease expired
        wait_until(lambda: standby.try_acquire_or_renew().leader, LEASE + 5, what="standby takes over")
        assert standby.epoch == 2
        # the connection comes back: the old leader's epoch-1 writes are refused by the database
        pg_server.admin(f"ALTER ROLE {role} LOGIN")
        with pytest.raises(Exception) as refused:
            _write(role_url, 1, key="cut")
        assert is_fenced(refused.value) and "epoch 1 refused: the leader's epoch is now 2" in str(refused.value)
        back = leader.try_acquire_or_renew()
        assert (back.leader, back.holder, back.epoch, back.error) == (False, "standby", 2, None)
    finally:
        leader.close()
        standby.close()
        pg_server.admin(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'")


class _Relay:
    """A TCP relay to PostgreSQL that can freeze: connections stay open and bytes stop flowing
    (a hung proxy or a stuck network, not a reset: nothing tells the client it is cut)."""

    def __init__(self, port: int) -> None:
        import threading

        self.target = port
        self.frozen = threading.Event()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                while self.frozen.is_set():
                    time.sleep(0.02)
                dst.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self.listener.close()
        for s in self.sockets:
            try:
                s.close()
            except OSError:
                pass


def test_a_leader_whose_renewal_hangs_stops_leading_at_the_deadline_without_waiting_for_it(pg_server, pg_url):
    """The renewal blocks on a frozen connection (no error ever comes): leading() still turns
    False at the renew deadline, at once, from any thread; the standby takes over after expiry."""
    import threading

    url = _ledger(pg_url)
    relay = _Relay(pg_server.port)
    leader = PostgresLease(url.replace(f":{pg_server.port}/", f":{relay.port}/"), "hung", **TIMING)
    standby = PostgresLease(url, "standby", **TIMING)
    try:
        assert leader.try_acquire_or_renew().leader
        renewed = time.monotonic()
        relay.frozen.set()
        hung = threading.Thread(target=leader.try_acquire_or_renew, daemon=True)
        hung.start()
        while leader.leading():
            assert time.monotonic() - renewed < DEADLINE + 0.3
            time.sleep(0.02)
        assert DEADLINE - 0.1 <= time.monotonic() - renewed  # not before the deadline either
        assert hung.is_alive()  # the renewal is still stuck: leading() did not wait for it
        wait_until(lambda: standby.try_acquire_or_renew().leader, LEASE + 5, what="standby takes over",
                   interval_s=RETRY)
        relay.frozen.clear()
        hung.join(15)
        assert not leader.leading() and leader.try_acquire_or_renew().holder == "standby"
    finally:
        relay.frozen.clear()
        leader.close()
        standby.close()
        relay.close()


def _db_now(url: str) -> float:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return float(conn.execute(text("SELECT extract(epoch FROM clock_timestamp())")).scalar_one())
    finally:
        engine.dispose()


def test_a_leader_frozen_with_sigstop_wakes_after_a_takeover_and_its_write_is_refused(pg_url, tmp_path):
    url = _ledger(pg_url)
    standby = PostgresLease(url, "standby", **TIMING)
    with _holder(tmp_path, url, "frozen", "--write") as frozen:
        wait_until(lambda: any(x.get("write") == "ok" for x in _lines(frozen)), 20, what="frozen writes as leader",
                   proc=frozen)
        os.kill(frozen.pid, signal.SIGSTOP)
        stopped_at = time.time()
        try:
            before = len(_lines(frozen))
            wait_until(lambda: standby.try_acquire_or_renew().leader, LEASE + 10, what="standby takes over",
                       interval_s=RETRY)
            epoch_frozen = max(x["epoch"] for x in _lines(frozen) if x.get("leader"))
            assert standby.epoch == epoch_frozen + 1
        finally:
            os.kill(frozen.pid, signal.SIGCONT)
        woke = wait_until(lambda: [x for x in _lines(frozen)[before:] if "write" in x], 10, what="frozen wakes",
                          proc=frozen)
        first = woke[0]
        # it woke in the middle of a "tick" holding its old epoch: the database refused the write ...
        assert first["write"].startswith("refused: fenced: controller_state write with epoch "
                                         f"{epoch_frozen} refused"), first
        # ... and it knows it does not lead any more
        assert first["leader"] is False and first["holder"] == "standby"
        time.sleep(2 * RETRY)
        assert not any(x["leader"] for x in _lines(frozen)[before:])
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            epoch, updated = conn.execute(text("SELECT epoch, extract(epoch FROM updated_at) FROM controller_state "
                                               "WHERE key = 'probe-frozen'")).one()
        assert epoch == epoch_frozen and float(updated) < stopped_at  # nothing it wrote after waking landed
    finally:
        engine.dispose()
        standby.close()


def test_a_leader_frozen_inside_its_write_transaction_does_not_hold_off_the_takeover(pg_url, tmp_path):
    """The fencing trigger share-locks the lease row until the writer commits (so no stale write
    commits after a takeover). A writer frozen inside that transaction has its session ended by
    PostgreSQL after one lease length idle, so the standby still takes over, and the frozen
    write is rolled back."""
    url = _ledger(pg_url)
    standby = PostgresLease(url, "standby", **TIMING)
    with _holder(tmp_path, url, "stuck", "--write", "--hold-tx", "60") as stuck:
        wait_until(lambda: any(x.get("in_tx") for x in _lines(stuck)), 20, what="stuck opens its write", proc=stuck)
        os.kill(stuck.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        try:
            wait_until(lambda: standby.try_acquire_or_renew().leader, 2 * LEASE + 10, what="standby takes over",
                       interval_s=RETRY)
            assert time.monotonic() - frozen_at <= 2 * LEASE + 3
        finally:
            os.kill(stuck.pid, signal.SIGCONT)
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT count(*) FROM controller_state WHERE key = 'probe-stuck'")).scalar_one()
        assert rows == 0  # the frozen transaction never committed
    finally:
        engine.dispose()
        standby.close()


def test_a_takeover_waits_for_the_old_leaders_write_in_flight(pg_url):
    """A write that passed the fencing check just before the lease expired holds the lease row
    (FOR SHARE) until it commits: the takeover lands after it, never before, so no write of the
    old epoch commits after the new epoch exists."""
    import threading

    url = _ledger(pg_url)
    a, b = PostgresLease(url, "a", **TIMING), PostgresLease(url, "b", **TIMING)
    engine = make_engine(url)
    acquired: list[float] = []

    def campaign() -> None:
        while not b.try_acquire_or_renew().leader:
            time.sleep(0.1)
        acquired.append(time.monotonic())

    try:
        assert a.try_acquire_or_renew().leader
        time.sleep(LEASE - 0.7)  # a stops renewing; its write comes just before the lease expires
        with engine.connect() as conn:
            tx = conn.begin()
            fenced(conn, 1)
            conn.execute(_PROBE, {"key": "in-flight", "epoch": 1})
            thread = threading.Thread(target=campaign, daemon=True)
            thread.start()
            time.sleep(1.5)  # the lease has expired meanwhile; b must still be waiting
            assert not acquired
            committed = time.monotonic()
            tx.commit()
        thread.join(10)
        assert acquired and acquired[0] > committed
        assert b.epoch == 2
    finally:
        engine.dispose()
        a.close()
        b.close()


def test_never_two_leaders_at_once(pg_url):
    """Three candidates renew with random stalls (a frozen or slow leader) for 8 s; after every
    call at most one of them may think it leads, and leadership changes hands several times."""
    url = _ledger(pg_url)
    timing = {"lease_s": 1.5, "renew_deadline_s": 1.0, "retry_s": 0.2}
    rnd = random.Random(7)
    cands = [PostgresLease(url, f"c{i}", **timing) for i in range(3)]
    stalled_until = [0.0, 0.0, 0.0]
    epochs_seen = []
    try:
        end = time.monotonic() + 8
        while time.monotonic() < end:
            for i, c in enumerate(cands):
                now = time.monotonic()
                if now < stalled_until[i]:
                    continue
                state = c.try_acquire_or_renew()
                if state.leader and rnd.random() < 0.15:
                    stalled_until[i] = now + rnd.uniform(0.5, 2.5)  # the leader freezes for a while
                if state.leader and (not epochs_seen or epochs_seen[-1] != state.epoch):
                    epochs_seen.append(state.epoch)
                leading = [x.instance for x in cands if x.leading()]
                assert len(leading) <= 1, leading
            time.sleep(0.05)
    finally:
        for c in cands:
            c.close()
    assert len(epochs_seen) >= 3, epochs_seen  # the test exercised takeovers
    assert epochs_seen == sorted(epochs_seen) and len(set(epochs_seen)) == len(epochs_seen)  # +1 per takeover


def test_an_unreachable_database_is_leader_false_not_a_crash(caplog):
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    url = f"postgresql+psycopg2://postgres@127.0.0.1:{port.getsockname()[1]}/none"
    port.close()
    lease = PostgresLease(url, "lonely", **TIMING)
    with caplog.at_level("WARNING", logger="autoscaler.leadership"):
        states = [lease.try_acquire_or_renew() for _ in range(3)]
    assert all(s.leader is False and isinstance(s.error, LeaseUnavailable) for s in states)
    assert "Connection refused" in str(states[0].error) or "connect" in str(states[0].error)
    assert caplog.text.count("cannot reach the lease") == 1  # logged once per change, not per attempt
    lease.close()


# ------------------------------------------------------------------------------ fencing


def test_the_database_refuses_stale_expired_and_leaderless_epochs(pg_url):
    url = _ledger(pg_url)
    with pytest.raises(Exception) as exc:
        _write(url, 1)  # no lease row at all: no leader to write for
    assert is_fenced(exc.value) and "no leader holds the lease" in str(exc.value)
    with Ledger(url) as ledger:  # writes without an epoch (a backtest, the one-at-a-time API) are not checked
        record_bulk(ledger)
        record_live(ledger)
    a = PostgresLease(url, "a", **TIMING)
    b = PostgresLease(url, "b", **TIMING)
    try:
        assert a.try_acquire_or_renew().epoch == 1
        _write(url, 1)
        a.release()
        with pytest.raises(Exception) as exc:
            _write(url, 1)  # the right epoch, but the lease has expired
        assert is_fenced(exc.value) and "the lease expired" in str(exc.value)
        assert b.try_acquire_or_renew().epoch == 2
        _write(url, 2)
        with pytest.raises(Exception) as exc:
            _write(url, 1)
        assert is_fenced(exc.value)
        # a declared epoch covers tables without an epoch column, and wins over the row's
        engine = make_engine(url)
        try:
            for declared, ok in ((1, False), (2, True)):
                try:
                    with engine.connect() as conn:
                        with conn.begin():
                            fenced(conn, declared)
                            conn.execute(text("UPDATE node_intervals SET end_at = NULL WHERE id < 0"))
                    assert ok
                except Exception as e:  # noqa: BLE001
                    assert not ok and is_fenced(e)
            with pytest.raises(Exception) as exc:
                _write(url, 2, declare=1)  # the new epoch on the row, but the transaction says 1
            assert is_fenced(exc.value)
        finally:
            engine.dispose()
        # the Ledger's RuntimeFailure keeps the cause: the service can tell a refusal from an outage
        ledger = Ledger(url)
        try:
            with pytest.raises(RuntimeFailure) as exc:
                with ledger._write() as conn:
                    conn.execute(_PROBE, {"key": "x", "epoch": 1})
            assert is_fenced(exc.value) and str(exc.value).count("\n") == 0
        finally:
            ledger.close()
    finally:
        a.close()
        b.close()


def test_two_processes_migrating_an_empty_postgresql_at_once_both_succeed(pg_url, tmp_path):
    # creating a ledger is logged at INFO (a normal event): shown here to count who created it
    code = ("import logging, sys; logging.basicConfig(level=logging.INFO); "
            "from autoscaler.ledger.store import Ledger; Ledger(sys.argv[1]).close(); print('ok')")
    procs = [subprocess.Popen([PYTHON, "-c", code, pg_url], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    results = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    engine = make_engine(pg_url)
    try:
        with engine.connect() as conn:
            assert database_revision(conn) == code_head()
            triggers = conn.execute(text("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'fence_%'")).scalar_one()
        assert triggers == 13  # 5 row + 5 delete triggers on the epoch tables, 3 on the others: once each
    finally:
        engine.dispose()
    created = sum("creating them" in err for _, err in results)
    assert created == 1  # one created the schema; the other waited on the advisory lock and found it done


# ------------------------------------------------------------------------------ SQLite


def test_sqlite_second_instance_is_refused_naming_the_holder_and_a_restart_after_sigkill_succeeds(tmp_path):
    db = tmp_path / "ledger.db"
    url = f"sqlite:///{db}"
    with _holder(tmp_path, url, "first", "--child") as first:
        lines = wait_until(lambda: [x for x in _lines(first) if x.get("leader")], 20, what="first holds the lock",
                           proc=first)
        child = next(x["child"] for x in _lines(first) if "child" in x)
        try:
            epoch = lines[0]["epoch"]
            assert flock_held(str(db) + ".lock") is True
            # a second instance (another process) is refused with one line that names the holder
            second = subprocess.run([PYTHON, "-m", "tests.support.lease_holder", url, "second"], cwd=REPO,
                                    capture_output=True, text=True, timeout=30)
            assert second.returncode == 1
            refused = json.loads(second.stdout.strip().splitlines()[-1])["refused"]
            assert "\n" not in refused
            assert f"pid {first.pid} on {socket.gethostname()} (instance first)" in refused
            assert str(db) in refused and "ledger.db.lock" in refused
            # in-process, the same typed error
            with pytest.raises(LeaseHeld) as exc:
                SqliteFlock(url, "third").acquire()
            assert "instance first" in str(exc.value)
            # SIGKILL: the kernel drops the lock even though first's child (a "worker") lives on
            os.kill(first.pid, signal.SIGKILL)
            first.wait(10)
            os.kill(child, 0)  # the child is still running
            t0 = time.monotonic()
            after = SqliteFlock(url, "restarted")
            state = after.acquire()
            assert time.monotonic() - t0 < 1.0  # at once, no waiting for anything to expire
            assert state.leader and state.epoch == epoch + 1
            assert lock_holder(str(db) + ".lock")["instance"] == "restarted"
            after.release()
            assert flock_held(str(db) + ".lock") is False
        finally:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_sqlite_flock_is_on_the_lock_file_never_a_posix_lock_on_the_database(tmp_path):
    db = tmp_path / "ledger.db"
    lock = SqliteFlock(str(db), "me")
    state = lock.try_acquire_or_renew()
    try:
        assert state.leader and state.epoch == 1 and lock.leading()
        info = lock_holder(str(db) + ".lock")
        assert info["pid"] == str(os.getpid()) and info["host"] == socket.gethostname() and info["instance"] == "me"
        # /proc/locks: a FLOCK on the .lock file's inode; nothing of ours on the database file
        ino_db, ino_lock = os.stat(db).st_ino, os.stat(str(db) + ".lock").st_ino
        mine = [line.split() for line in open("/proc/locks") if f" {os.getpid()} " in line]
        assert any(f[1] == "FLOCK" and f[5].endswith(f":{ino_lock}") for f in mine)
        assert not any(f[5].endswith(f":{ino_db}") for f in mine)
        # a second object in the same process is refused too (flock is per open file)
        other = SqliteFlock(str(db), "again").try_acquire_or_renew()
        assert other.leader is False and isinstance(other.error, LeaseUnavailable)
    finally:
        lock.release()
    again = SqliteFlock(str(db), "me")
    assert again.acquire().epoch == 2  # +1 at every acquisition
    again.release()
