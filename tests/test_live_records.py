"""The live records' rules, without a fleet: the legal phase changes, the mark and its intent in one
transaction, the journal keeping the intending leader's epoch, the files created owner-only, the
lock file that refuses a symlink, and the status server's bounded connections and token check."""

from __future__ import annotations

import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler

import httpx
import pytest

from autoscaler.ledger.live import TRANSITIONS, GroupRecord, IllegalTransition, LiveLedger, check_transition
from autoscaler.ledger.models import LIVE_PHASES
from autoscaler.ledger.store import Ledger
from autoscaler.service.leadership import SqliteFlock
from autoscaler.service.runner import BoundedHTTPServer


def test_the_transition_table_covers_every_phase_and_refuses_the_rest():
    assert set(TRANSITIONS) == set(LIVE_PHASES)
    for targets in TRANSITIONS.values():
        assert targets <= set(LIVE_PHASES)
    check_transition("g1", "off", "starting")
    check_transition("g1", "ready", "ready")  # staying is always legal
    check_transition("g1", None, "ready")  # a first record
    for old, new in [("off", "draining"), ("off", "registering"), ("starting", "ready"), ("stopping", "ready"),
                     ("failed", "ready"), ("ready", "off")]:
        with pytest.raises(IllegalTransition, match=f"{old} -> {new} is not a legal phase change"):
            check_transition("g1", old, new)


def test_a_mark_and_its_intent_are_one_transaction_and_an_illegal_mark_writes_nothing(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path}/l.db")
    live = LiveLedger(ledger)
    rec = GroupRecord("g1", "off", 1.0)
    live.transition(rec, epoch=1, at=1.0)
    action_id = live.transition(rec.with_(phase="starting", since=2.0), epoch=1, at=2.0,
                                intent=("start", "start g1"))
    assert action_id is not None
    assert live.groups()["g1"].phase == "starting"
    assert [(a.id, a.kind, a.epoch) for a in live.open_actions()] == [(action_id, "start", 1)]
    with pytest.raises(IllegalTransition):
        live.transition(rec.with_(phase="stopping", since=3.0), epoch=1, at=3.0, intent=("stop", "stop g1"))
    assert live.groups()["g1"].phase == "starting"
    assert len(live.open_actions()) == 1  # the refused mark wrote no intent
    ledger.close()


def test_a_later_leader_settling_an_intent_keeps_the_intending_epoch(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path}/l.db")
    live = LiveLedger(ledger)
    action_id = live.intent(epoch=3, group="g1", kind="stop", at=1.0, detail="stop g1", run_id=None)
    live.result(action_id, epoch=4, at=5.0, outcome="abandoned", detail="settled")
    row = live.actions("g1")[0]
    assert (row["epoch"], row["result_epoch"], row["outcome"]) == (3, 4, "abandoned")
    live.result(live.intent(epoch=4, group="g1", kind="start", at=6.0, detail="x", run_id=None), epoch=4, at=7.0,
                outcome="interrupted")
    assert live.actions("g1")[-1]["outcome"] == "interrupted"
    ledger.close()


def test_the_sqlite_ledger_and_its_lock_are_created_owner_only_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        db = tmp_path / "ledger.db"
        Ledger(f"sqlite:///{db}").close()
        lock = SqliteFlock(str(db), "me")
        lock.acquire()
        try:
            assert oct(os.stat(db).st_mode & 0o777) == "0o600"
            assert oct(os.stat(str(db) + ".lock").st_mode & 0o777) == "0o600"
        finally:
            lock.release()
    finally:
        os.umask(old)


def test_a_symlink_planted_at_the_lock_path_is_refused_not_followed(tmp_path):
    db, target = tmp_path / "ledger.db", tmp_path / "precious"
    target.write_text("keep me")
    os.symlink(target, str(db) + ".lock")
    lock = SqliteFlock(str(db), "me")
    with pytest.raises(Exception, match="lock file"):
        lock.acquire()
    assert target.read_text() == "keep me"


class _Ok(BaseHTTPRequestHandler):
    timeout = 0.5

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


def test_the_status_server_caps_connections_and_drops_idle_clients():
    server = BoundedHTTPServer(("127.0.0.1", 0), _Ok, max_connections=2)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    url = f"http://{host}:{port}/"
    try:
        idle = [socket.create_connection((host, port)) for _ in range(2)]  # two clients that send nothing
        time.sleep(0.1)
        # A third, with its request at once, is served: the idle client that has held a slot the
        # longest is dropped for it (issue 34 item 10), never queued for ever behind them.
        assert httpx.get(url, timeout=3).status_code == 200
        end = time.monotonic() + 5
        while True:  # the idle ones are dropped at the handler's socket timeout: service again
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < end, "idle clients held the server"
            time.sleep(0.1)
        for s in idle:
            s.close()
    finally:
        server.shutdown()
        server.server_close()
