"""Operator controls: recorded with who and why, what is in force when, how the core obeys them,
the commands (exit codes, one-line errors), the /status object, and why naming them."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import insert, text

from autoscaler.cli import main
from autoscaler.core.types import Action, FleetState, GroupState, Phase, Reason, iso
from autoscaler.core.victim import groups_to_start
from autoscaler.ledger.models import ControllerStateRow, FleetGroupRow, LeaseRow
from autoscaler.ledger.schema import make_engine
from autoscaler.ledger.store import Ledger
from autoscaler.service.controls import (
    Controls,
    Note,
    Pin,
    effective_controls,
    effective_pin,
    policy_with_pin,
    record_control,
    with_cordons,
)
from autoscaler.service.leadership import LEASE_NAME, PostgresLease, SqliteFlock
from autoscaler.service.status import build_status
from tests.core_helpers import T0, decide, fleet, fresh, make_policy, signals
from tests.support.ledger_runs import T0 as STORY_T0
from tests.support.ledger_runs import H, record_live
from tests.support.postgres import db_url, pg_server, pg_url  # noqa: F401  (fixtures)

M = 60.0


def _rec(ledger, kind, at, **kw):
    kw.setdefault("by", "alice")
    kw.setdefault("reason", f"{kind} for a test")
    return record_control(ledger, kind, at=at, **kw)


# ------------------------------------------------------------------------ what is in force


def test_each_kind_is_recorded_with_who_and_why_and_nothing_is_overwritten(db_url):
    with Ledger(db_url) as ledger:
        _rec(ledger, "pin", T0, groups=2, until=T0 + H, by="alice", reason="launch")
        _rec(ledger, "unpin", T0 + M, by="bob", reason="launch over")
        _rec(ledger, "pause", T0 + 2 * M, by="carol", reason="gateway upgrade")
        _rec(ledger, "resume", T0 + 3 * M, by="carol", reason="upgrade done")
        _rec(ledger, "cordon", T0 + 4 * M, group="g2", by="dave", reason="disk swap")
        _rec(ledger, "uncordon", T0 + 5 * M, group="g2", by="dave", reason="disk swapped")
        with ledger.engine.connect() as conn:
            rows = conn.execute(text("SELECT kind, group_name, groups, by_user, reason FROM operator_controls "
                                     "ORDER BY id")).all()
    assert [tuple(r) for r in rows] == [
        ("pin", None, 2, "alice", "launch"), ("unpin", None, None, "bob", "launch over"),
        ("pause", None, None, "carol", "gateway upgrade"), ("resume", None, None, "carol", "upgrade done"),
        ("cordon", "g2", None, "dave", "disk swap"), ("uncordon", "g2", None, "dave", "disk swapped"),
    ]


def test_a_pin_expires_by_itself_an_unpin_ends_it_and_a_later_pin_replaces_it(db_url):
    with Ledger(db_url) as ledger:
        _rec(ledger, "pin", T0, groups=3, until=T0 + 10 * M, reason="first")
        assert effective_controls(ledger, T0 - 1).pin is None  # not before it was recorded
        pin = effective_controls(ledger, T0 + M).pin
        assert pin == Pin(3, T0 + 10 * M, "alice", "first", T0)
        assert effective_controls(ledger, T0 + 10 * M).pin is None  # expired by itself at `until`
        _rec(ledger, "pin", T0 + 20 * M, groups=1, until=T0 + 60 * M, reason="second")
        _rec(ledger, "pin", T0 + 25 * M, groups=2, until=T0 + 50 * M, reason="third")
        assert effective_controls(ledger, T0 + 22 * M).pin.groups == 1
        assert effective_controls(ledger, T0 + 26 * M).pin.groups == 2  # the later pin wins ...
        assert effective_controls(ledger, T0 + 55 * M).pin is None  # ... and its own until ends it
        _rec(ledger, "pin", T0 + 70 * M, groups=2, until=T0 + 120 * M, reason="fourth")
        _rec(ledger, "unpin", T0 + 80 * M, reason="not needed")
        assert effective_controls(ledger, T0 + 75 * M).pin.reason == "fourth"
        assert effective_controls(ledger, T0 + 81 * M).pin is None


def test_pause_until_resume_and_cordons_per_group_latest_wins(db_url):
    with Ledger(db_url) as ledger:
        _rec(ledger, "pause", T0, by="carol", reason="upgrade")
        _rec(ledger, "cordon", T0, group="g2", by="dave", reason="disk")
        _rec(ledger, "cordon", T0 + M, group="g3", by="erin", reason="fan")
        _rec(ledger, "uncordon", T0 + 2 * M, group="g2", by="dave", reason="disk done")
        _rec(ledger, "resume", T0 + 3 * M, by="carol", reason="done")
        _rec(ledger, "cordon", T0 + 4 * M, group="g2", by="frank", reason="again")
        at = {t: effective_controls(ledger, T0 + t * M) for t in (0, 1, 2, 3, 4)}
    assert at[0].paused and at[0].pause == Note("carol", "upgrade", T0)
    assert dict(at[0].cordoned) == {"g2": Note("dave", "disk", T0)}
    assert set(at[1].cordoned) == {"g2", "g3"}
    assert set(at[2].cordoned) == {"g3"} and at[2].paused
    assert not at[3].paused and at[3].pause is None
    assert set(at[4].cordoned) == {"g2", "g3"} and at[4].cordoned["g2"].by == "frank"


def test_controls_recorded_at_the_same_instant_the_later_write_wins(db_url):
    with Ledger(db_url) as ledger:
        _rec(ledger, "cordon", T0, group="g1")
        _rec(ledger, "uncordon", T0, group="g1")
        _rec(ledger, "resume", T0)
        _rec(ledger, "pause", T0)
        c = effective_controls(ledger, T0)
    assert c.cordoned == {} and c.paused


def test_record_control_rejects_what_a_caller_must_not_ask(tmp_path):
    with Ledger(f"sqlite:///{tmp_path / 'l.db'}") as ledger:
        for kind, kw in [
            ("pin", {"groups": 2}),  # no until
            ("pin", {"groups": 2, "until": T0 - 1}),  # until in the past
            ("pin", {"groups": 65, "until": T0 + 1}),
            ("cordon", {}),  # no group
            ("pause", {"group": "g1"}),
            ("stop", {}),  # not a kind
        ]:
            with pytest.raises(ValueError):
                _rec(ledger, kind, T0, **kw)
        with pytest.raises(ValueError):
            record_control(ledger, "pause", by="alice", reason="  ", at=T0)  # why is required


# ------------------------------------------------------------------------------ the core


def _policy_pinned(groups: int, until: float):
    return make_policy(schedules={"pin": {"groups": groups, "until": iso(until), "note": "policy pin"}})


def test_the_operator_pin_overrides_the_policy_pin_and_both_expire():
    policy = _policy_pinned(3, T0 + 2 * H)
    op = Controls(pin=Pin(1, T0 + H, "alice", "night", T0))
    assert effective_pin(policy, op, T0).groups == 1  # the operator's wins over the policy's 3
    assert effective_pin(policy, op, T0).note == "operator pin by alice: night"
    assert effective_pin(policy, op, T0 + H).groups == 3  # operator pin expired: the policy's again
    assert effective_pin(policy, op, T0 + 2 * H) is None  # both expired
    assert effective_pin(make_policy(), Controls(), T0) is None
    # a pin of 0 means "as few as the floor allows": given to the core as 1, which it clamps to its floor
    assert effective_pin(make_policy(), Controls(pin=Pin(0, T0 + H, "a", "r", T0)), T0).groups == 1


def test_the_core_obeys_the_operator_pin_through_the_policy_it_receives():
    policy = make_policy()
    busy = signals(g1=(2, 0, 0.5), g2=(2, 0, 0.5), g3=(2, 0, 0.5))  # 6 running: 3 groups are not surplus
    three_ready = fleet("ready", "ready", "ready")
    unpinned, _ = decide(busy, three_ready, policy_with_pin(policy, Controls(), T0), fresh(), T0)
    assert unpinned.action is Action.HOLD and unpinned.reason is not Reason.PINNED
    controls = Controls(pin=Pin(1, T0 + H, "alice", "maintenance", T0 - M))
    pinned_policy = policy_with_pin(policy, controls, T0)
    d, _ = decide(busy, three_ready, pinned_policy, fresh(), T0)
    # 3 active > pin 1: drain one, whatever the load (a pin is a ceiling and a floor)
    assert (d.action, d.reason, d.target_groups) == (Action.SCALE_DOWN, Reason.PIN, 2)
    assert d.inputs["floor_source"] == "pin" and d.inputs["ceiling"] == 1
    # the same policy object at every tick under the same pin (the core memoises by identity)
    assert policy_with_pin(policy, controls, T0 + M) is pinned_policy
    assert policy_with_pin(policy, Controls(), T0) is policy
    # once expired the policy is handed over unchanged
    assert policy_with_pin(policy, controls, T0 + H) is policy


@pytest.mark.parametrize(
    "phases, cordoned, count, expected",
    [
        # draining first, then off in policy order; cordoned never
        (("ready", "off", "off"), set(), 1, ["g2"]),
        (("ready", "off", "off"), {"g2"}, 1, ["g3"]),
        (("ready", "off", "off"), {"g2"}, 2, ["g3"]),  # only one startable
        (("ready", "off", "off"), {"g2", "g3"}, 1, []),
        (("ready", "draining", "off"), set(), 1, ["g2"]),  # back from draining: the cheapest capacity
        (("ready", "draining", "off"), {"g2"}, 1, ["g3"]),  # not a cordoned one: it is being taken out
        (("off", "off", "off"), {"g1"}, 3, ["g2", "g3"]),
    ],
)
def test_groups_to_start_never_picks_a_cordoned_group(phases, cordoned, count, expected):
    groups = {f"g{i + 1}": GroupState(f"g{i + 1}", Phase(p), T0, cordoned=f"g{i + 1}" in cordoned)
              for i, p in enumerate(phases)}
    assert groups_to_start(FleetState(groups), count) == expected


def test_the_floor_starts_another_group_than_the_cordoned_one_and_says_when_none_is_left():
    policy = make_policy(fleet={"floor_groups": 2})
    quiet = signals(g1=(0, 0, 0.1))
    base = fleet("ready", "off", "off")
    d, _ = decide(quiet, with_cordons(base, Controls(cordoned={"g2": Note("dave", "disk", T0)})), policy, fresh(), T0)
    assert (d.action, d.reason, d.group) == (Action.SCALE_UP, Reason.BELOW_FLOOR, "g3")
    both = Controls(cordoned={"g2": Note("dave", "disk", T0), "g3": Note("erin", "fan", T0)})
    d, _ = decide(quiet, with_cordons(base, both), policy, fresh(), T0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.NO_GROUP_AVAILABLE)


def test_with_cordons_marks_only_the_cordoned_groups_and_keeps_the_object_when_nothing_changes():
    base = fleet("ready", "off", "off")
    assert with_cordons(base, Controls()) is base
    marked = with_cordons(base, Controls(cordoned={"g3": Note("a", "r", T0)}), extra={"g2"})
    assert [g.cordoned for g in marked.groups.values()] == [False, True, True]
    assert with_cordons(marked, Controls(cordoned={"g3": Note("a", "r", T0)})) is marked


# ---------------------------------------------------------------------------- the commands


def _cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _controller_ledger(url: str) -> None:
    """A ledger as a controller leaves it: its fleet, a live run and a leader (the lease row)."""
    with Ledger(url) as ledger:
        record_live(ledger, end=False)
        with ledger.engine.begin() as conn:
            conn.execute(insert(LeaseRow).values(name=LEASE_NAME, holder="ctl-a", epoch=1, acquired_at=T0,
                                                 renewed_at=T0, expires_at=T0 + 15))
    _with_fleet(url, "g1", "g2", "g3")


def _soon(days: float = 7) -> str:
    return iso(float(int(time.time() + days * 86400)))


def test_each_command_records_its_control_and_json_says_what_is_in_force(tmp_path, capsys, monkeypatch):
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    _controller_ledger(url)
    monkeypatch.setattr("getpass.getuser", lambda: "opsuser")
    until = _soon()
    code, out, err = _cli(capsys, "pin", "--db", url, "--groups", "2", "--until", until,
                          "--reason", "launch day", "--json")
    assert code == 0
    answer = json.loads(out)
    assert answer["control"]["kind"] == "pin" and answer["control"]["by"] == "opsuser"
    assert answer["in_force"]["pin"]["groups"] == 2 and answer["in_force"]["pin"]["until"] == until
    for argv in (["pause"], ["cordon", "g2"], ["unpin"], ["resume"], ["uncordon", "g2"]):
        code, out, err = _cli(capsys, *argv, "--db", url, "--by", "bob", "--reason", "because", "--json")
        assert code == 0, err
    final = json.loads(out)["in_force"]
    assert final == {"pin": None, "paused": False, "pause": None, "cordoned": {}}
    with Ledger(url) as ledger, ledger.engine.connect() as conn:
        kinds = conn.execute(text("SELECT kind, by_user FROM operator_controls ORDER BY id")).all()
    assert [tuple(k) for k in kinds] == [("pin", "opsuser"), ("pause", "bob"), ("cordon", "bob"), ("unpin", "bob"),
                                         ("resume", "bob"), ("uncordon", "bob")]
    # plain words
    code, out, _ = _cli(capsys, "pause", "--db", url, "--by", "carol", "--reason", "gateway upgrade")
    assert code == 0 and out.startswith("paused by carol: gateway upgrade (control #7")
    assert "in force now: paused (advisory: nothing acted on) by carol" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["pin", "--groups", "2", "--until", "2099-01-01"], "--reason is required: say why"),
        (["pause", "--reason", "  "], "--reason is required: say why"),
        (["pin", "--groups", "65", "--until", "2099-01-01", "--reason", "r"],
         "--groups: '65' is not a whole number from 0 to 64"),
        (["pin", "--groups", "two", "--until", "2099-01-01", "--reason", "r"], "--groups: 'two' is not a whole number"),
        (["pin", "--groups", "-1", "--until", "2099-01-01", "--reason", "r"], "--groups: '-1' is not a whole number"),
        (["pin", "--until", "2099-01-01", "--reason", "r"], "pin: --groups N is required"),
        (["pin", "--groups", "2", "--reason", "r"], "pin: --until T is required"),
        (["pin", "--groups", "2", "--until", "2020-01-01T00:00:00Z", "--reason", "r"],
         "--until: 2020-01-01T00:00:00Z is not in the future"),
        (["pin", "--groups", "2", "--until", "tomorrow", "--reason", "r"], "--until: 'tomorrow' is not an ISO 8601 time"),
        (["cordon", " ", "--reason", "r"], "GROUP: empty"),
        (["pause", "--by", "", "--reason", "r"], "--by: empty"),
    ],
)
def test_bad_input_is_exit_2_with_one_line_and_nothing_recorded(tmp_path, capsys, argv, message):
    db = tmp_path / "l.db"
    code, out, err = _cli(capsys, *argv, "--db", f"sqlite:///{db}")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(message), err
    assert not db.exists()  # checked before the database is touched


def _with_fleet(url: str, *names: str) -> None:
    with Ledger(url) as ledger, ledger.engine.begin() as conn:
        for n in names:
            conn.execute(insert(FleetGroupRow).values(
                name=n, phase="ready", since=T0, worker_url=None, worker_id=None, attempts=0, retry_at=None,
                cordoned=False, cause=None, health_failures=0, start_began_at=None, removed_at=None, epoch=1,
                updated_at=T0))


def test_cordon_checks_the_group_against_the_recorded_fleet(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'l.db'}"
    # no fleet recorded yet: accepted only into a ledger prepared on purpose, with a note
    code, out, _ = _cli(capsys, "cordon", "g9", "--db", url, "--reason", "r", "--new-ledger")
    assert code == 0 and "note: no controller has recorded the fleet in this ledger yet: 'g9' was not checked" in out
    _controller_ledger(url)
    code, out, err = _cli(capsys, "cordon", "g9", "--db", url, "--reason", "r")
    assert code == 2 and err == "cordon: no group 'g9' in the fleet the controller recorded (known: g1, g2, g3)\n"
    code, out, err = _cli(capsys, "uncordon", "g7", "--db", url, "--reason", "r")
    assert code == 2 and "known: g1, g2, g3" in err
    assert _cli(capsys, "cordon", "g2", "--db", url, "--reason", "disk")[0] == 0
    with Ledger(url) as ledger:
        assert set(effective_controls(ledger, 4e9).cordoned) == {"g2", "g9"}


def test_a_database_that_is_not_a_ledger_is_never_written_or_created(tmp_path, capsys):
    other = tmp_path / "other.db"
    engine = make_engine(f"sqlite:///{other}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    engine.dispose()
    code, _, err = _cli(capsys, "pause", "--db", f"sqlite:///{other}", "--reason", "r")
    assert code == 2 and "is not an autoscaler ledger (it has other tables: invoices)" in err
    code, _, err = _cli(capsys, "status", "--db", f"sqlite:///{other}")
    # a read names what the file is, as report and why do (bad input: exit 2), and leaves it alone
    assert code == 2 and "no ledger tables: not a ledger; it was left untouched" in err and err.count("\n") == 1
    engine = make_engine(f"sqlite:///{other}")
    with engine.connect() as conn:
        tables = {r[0] for r in conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'")}
    engine.dispose()
    assert tables == {"invoices"}
    missing = tmp_path / "missing.db"
    code, _, err = _cli(capsys, "status", "--db", f"sqlite:///{missing}")
    assert code == 1 and err.startswith(f"no ledger database at {missing}") and not missing.exists()


# ------------------------------------------------------------------------------- status


def _status_fixture(url: str) -> str:
    """A ledger as a running controller leaves it; returns the newest decision's time."""
    with Ledger(url) as ledger:
        run = record_live(ledger, end=False)  # a live run with decisions (the newest is last_decision)
        (newest,) = ledger.decisions(run, limit=1, newest_first=True)
        _with_fleet(url, "g1", "g2", "g3")
        with ledger.engine.begin() as conn:
            conn.execute(insert(ControllerStateRow).values(
                key="policy", epoch=1, updated_at=T0,
                value={"path": "policies/prod.yaml", "hash": "ab" * 32, "loaded_at": "2026-12-01T08:00:00Z",
                       "error": None}))
        _rec(ledger, "pin", T0, groups=2, until=4e9, by="alice", reason="launch")
        _rec(ledger, "cordon", T0, group="g3", by="dave", reason="disk")
    return iso(newest.at)


def test_status_from_the_database_on_postgresql_leader_only_while_the_lease_is_live(pg_url, capsys):
    Ledger(pg_url).close()
    lease = PostgresLease(pg_url, "ctl-a", lease_s=60, renew_deadline_s=40, retry_s=2)
    try:
        assert lease.try_acquire_or_renew().leader  # epoch 1: the fleet rows below carry it (fenced)
        newest = _status_fixture(pg_url)
        now = 4e9 - 10
        status = build_status(make_engine(pg_url), now)
        assert set(status) == {"instance", "leader", "epoch", "paused", "policy", "groups", "pin", "last_decision",
                               "warm_start"}
        assert status["warm_start"] is None  # no leader recorded a warm start (docs/live.md, "Warm start")
        assert (status["instance"], status["leader"], status["epoch"], status["paused"]) == ("ctl-a", True, 1, False)
        assert status["policy"] == {"path": "policies/prod.yaml", "hash": "ab" * 32,
                                    "loaded_at": "2026-12-01T08:00:00Z", "error": None}
        assert status["groups"]["g3"] == {"phase": "ready", "since": iso(T0), "cordoned": True}  # cordon in force
        assert status["groups"]["g1"]["cordoned"] is False
        assert status["pin"] == {"groups": 2, "until": iso(4e9), "by": "alice", "reason": "launch",
                                 "effective_groups": 2, "clamped": None}
        assert status["last_decision"]["at"] == newest
        assert set(status["last_decision"]) == {"at", "action", "target_groups", "group", "reason", "detail"}
        # the service's view of itself: another instance asking is not the leader
        assert build_status(make_engine(pg_url), now, instance="ctl-b")["leader"] is False
        assert build_status(make_engine(pg_url), now, instance="ctl-a", leader=False)["leader"] is False
        # the CLI prints the same object
        code, out, _ = _cli(capsys, "status", "--db", pg_url, "--json")
        assert code == 0 and json.loads(out)["instance"] == "ctl-a" and json.loads(out)["leader"] is True
        lease.release()  # expired by the database's clock: not a leader any more
        assert build_status(make_engine(pg_url), now)["leader"] is False
    finally:
        lease.close()


def test_status_on_sqlite_reads_the_flock_and_prints_a_table(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'l.db'}"
    newest = _status_fixture(url)
    code, out, _ = _cli(capsys, "status", "--db", url, "--json")
    assert code == 0 and json.loads(out)["leader"] is False  # nobody holds the lock
    lock = SqliteFlock(url, "ctl-s")
    lock.acquire()
    try:
        code, out, _ = _cli(capsys, "status", "--db", url, "--json")
        status = json.loads(out)
        assert (status["instance"], status["leader"], status["epoch"]) == ("ctl-s", True, 1)
        code, out, _ = _cli(capsys, "status", "--db", url)
    finally:
        lock.release()
    assert code == 0
    assert "instance  ctl-s (leader, epoch 1)" in out
    assert "pin       2 groups until 2096-10-02T07:06:40Z by alice: launch" in out
    assert "policy    policies/prod.yaml (sha256 abababababab" in out
    assert "g3     ready" in out and out.splitlines()[-1].startswith(f"last decision  {newest} hold")


class _StatusServer(BaseHTTPRequestHandler):
    token = "s3cret"
    body = {"instance": "remote", "leader": True, "epoch": 7, "paused": False, "policy": {}, "groups": {},
            "pin": None, "last_decision": None}

    def do_GET(self):  # noqa: N802
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            self.send_response(401)
            self.end_headers()
            return
        data = json.dumps(self.body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_status_from_a_running_service_with_its_bearer_token(capsys, monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StatusServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        monkeypatch.delenv("AUTOSCALER_STATUS_TOKEN", raising=False)
        code, _, err = _cli(capsys, "status", "--server", base)
        assert code == 1 and err == f"--server {base}: GET /status answered 401 (set AUTOSCALER_STATUS_TOKEN)\n"
        monkeypatch.setenv("AUTOSCALER_STATUS_TOKEN", "s3cret")
        code, out, _ = _cli(capsys, "status", "--server", base, "--json")
        assert code == 0 and json.loads(out) == _StatusServer.body
    finally:
        server.shutdown()
        server.server_close()
    code, _, err = _cli(capsys, "status", "--server", base)  # closed now
    assert code == 1 and err.startswith(f"--server {base}: cannot reach it")
    code, _, err = _cli(capsys, "status", "--server", base, "--db", "sqlite:///x.db")
    assert code == 2 and err == "status: give either --db or --server, not both\n"


# --------------------------------------------------------------------------------- why


def test_why_names_the_pin_and_the_cordon_in_force_with_who_and_why(db_url, capsys):
    with Ledger(db_url) as ledger:
        record_live(ledger)
        _rec(ledger, "pin", STORY_T0 + 2 * H, groups=2, until=STORY_T0 + 4 * H, by="alice", reason="launch day")
        _rec(ledger, "cordon", STORY_T0 + 2 * H, group="g2", by="dave", reason="disk swap")
        _rec(ledger, "uncordon", STORY_T0 + 5 * H, group="g2", by="dave", reason="swapped")
    code, out, _ = _cli(capsys, "why", "--db", db_url, "--at", iso(STORY_T0 + 3 * H), "--json")
    answer = json.loads(out)
    assert answer["controls"]["pin"]["by"] == "alice" and answer["controls"]["pin"]["reason"] == "launch day"
    g2 = next(g for g in answer["groups"] if g["group"] == "g2")
    assert f"It was cordoned by dave at {iso(STORY_T0 + 2 * H)} (disk swap)" in g2["explanation"]
    code, out, _ = _cli(capsys, "why", "--db", db_url, "--at", iso(STORY_T0 + 3 * H))
    assert "An operator pin was in force: 2 groups until" in out and "set by alice" in out
    # after the pin expired and the uncordon, why says nothing of them
    code, out, _ = _cli(capsys, "why", "--db", db_url, "--at", iso(STORY_T0 + 6 * H), "--json")
    later = json.loads(out)
    assert later["controls"]["pin"] is None and later["controls"]["cordoned"] == {}
    assert all("cordoned by" not in g["explanation"] for g in later["groups"])
