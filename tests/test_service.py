"""``autoscaler run`` as a process: SIGTERM in the middle of a tick, the core's memory across a
restart, policy reload (valid and invalid), operator controls obeyed within one tick, HA takeover
on PostgreSQL and the SQLite refusal.

Signals come straight from three emulated workers (``--signals direct``); the advisory actuator
acts on nothing, so these tests need no gateway. Every process is stopped by the test that
started it (``Proc`` kills its process group), also when the test fails.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest
import yaml
from sqlalchemy import text

from autoscaler.cli import main as cli
from autoscaler.ledger.live import LiveLedger
from autoscaler.ledger.store import Ledger
from autoscaler.service.controller import stored_memory
from tests.support.live import write_policy
from tests.support.postgres import pg_server, pg_url  # noqa: F401  (fixtures)
from tests.support.procs import PYTHON, Proc, free_port, start_worker, wait_until


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("workers")
    ws = [start_worker(folder, name=f"w{i}") for i in range(3)]
    try:
        yield ws
    finally:
        for w in ws:
            w.proc.kill()


def advisory_policy(path: Path, workers, **overrides) -> Path:
    return write_policy(path, ports=[w.port for w in workers], actuator={"kind": "advisory"}, **overrides)


def run_proc(tmp_path: Path, policy: Path, db: str, *extra: str, name: str = "run", env: dict | None = None) -> tuple[Proc, str]:
    port = free_port()
    argv = [PYTHON, "-m", "autoscaler", "run", "--policy", str(policy), "--db", db, "--signals", "direct",
            "--listen", f"127.0.0.1:{port}", "--gateway", f"http://127.0.0.1:{free_port()}", *extra]
    return Proc(argv, tmp_path / f"{name}.log", env=env), f"http://127.0.0.1:{port}"


def status(url: str, token: str | None = None) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(url + "/status", timeout=2, headers=headers).json()


def metric(url: str, name: str) -> float | None:
    for line in httpx.get(url + "/metrics", timeout=2).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_status_healthz_and_metrics_are_served_with_a_token(tmp_path, workers):
    policy = advisory_policy(tmp_path / "p.yaml", workers)
    proc, url = run_proc(tmp_path, policy, f"sqlite:///{tmp_path}/l.db", env={"AUTOSCALER_STATUS_TOKEN": "tok"})
    with proc:
        wait_until(lambda: httpx.get(url + "/healthz", timeout=1).status_code == 200, 20, what="healthz", proc=proc)
        assert httpx.get(url + "/status", timeout=2).status_code == 401
        s = wait_until(lambda: (st := status(url, "tok"))["last_decision"] and st, 20, what="a decision", proc=proc)
        assert s["leader"] is True and s["epoch"] >= 1 and s["paused"] is False
        assert set(s) >= {"instance", "leader", "epoch", "paused", "policy", "groups", "pin", "last_decision"}
        assert set(s["groups"]) == {"g1", "g2", "g3"}
        assert s["policy"]["hash"] and s["policy"]["error"] is None
        assert metric(url, "autoscaler_leader") == 1.0
        assert metric(url, "autoscaler_groups_desired") is not None
        t0 = time.monotonic()
        for _ in range(5):
            status(url, "tok")
        assert (time.monotonic() - t0) / 5 < 1.0


def test_sigterm_in_the_middle_of_a_tick_finishes_the_step_and_exits_0(tmp_path, workers):
    # A command actuator whose start takes 4 s: SIGTERM lands while the tick is inside it.
    script = tmp_path / "slow.sh"
    script.write_text("#!/bin/sh\n[ \"$1\" = start ] && sleep 4\n[ \"$1\" = status ] && exit 3\nexit 0\n")
    script.chmod(0o755)
    policy = write_policy(tmp_path / "p.yaml", ports=[free_port() for _ in range(3)],
                          actuator={"kind": "command", "start": [str(script), "start"], "stop": [str(script), "stop"],
                                    "status": [str(script), "status"], "timeout_s": 10})
    db = f"sqlite:///{tmp_path}/l.db"
    proc, url = run_proc(tmp_path, policy, db)
    with proc:
        ledger = Ledger(db)

        def start_in_progress():
            with ledger.engine.connect() as conn:
                return conn.execute(text("SELECT count(*) FROM actions WHERE kind='start' AND outcome IS NULL")).scalar()

        wait_until(start_in_progress, 20, what="a start in progress", proc=proc)
        # /status is served apart from the tick: it answers at once while the tick is inside the start.
        t_status = time.monotonic()
        assert status(url)["leader"] is True
        assert time.monotonic() - t_status < 2.5  # the start takes 4 s: a blocked /status would wait it out
        t0 = time.monotonic()
        proc.signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert time.monotonic() - t0 < 30
    actions = LiveLedger(ledger).actions()
    start = [a for a in actions if a["kind"] == "start"][0]
    assert start["outcome"] == "ok"  # the step in flight finished and its result was recorded
    run = ledger.runs(source="live")[-1]
    assert run.ended_at is not None
    ledger.close()


def test_the_cores_memory_survives_a_restart(tmp_path, workers):
    policy = advisory_policy(tmp_path / "p.yaml", workers)
    db = f"sqlite:///{tmp_path}/l.db"
    for _ in range(3):
        assert cli(["run", "--policy", str(policy), "--db", db, "--signals", "direct", "--once"]) == 0
        time.sleep(1.1)
    ledger = Ledger(db)
    memory = stored_memory(LiveLedger(ledger))
    # Three one-tick runs: the trend window holds one demand sample per tick, each run having
    # started from what the previous one saved (a fresh memory would hold only one).
    assert len(memory["demand_samples"]) == 3
    assert len({r.id for r in ledger.runs(source="advisory")}) == 3
    ledger.close()


def test_policy_reload_valid_then_invalid_then_fixed(tmp_path, workers):
    policy = advisory_policy(tmp_path / "p.yaml", workers)
    db = f"sqlite:///{tmp_path}/l.db"
    proc, url = run_proc(tmp_path, policy, db)
    with proc:
        first = wait_until(lambda: status(url)["policy"]["hash"], 20, what="running", proc=proc)
        data = yaml.safe_load(policy.read_text())
        data["scaling"]["scale_down"]["stabilization_s"] = 12
        policy.write_text(yaml.safe_dump(data, sort_keys=False))
        second = wait_until(lambda: (h := status(url)["policy"]["hash"]) != first and h, 10, what="reloaded", proc=proc)
        policy.write_text(policy.read_text().replace("floor_groups: 1", "floor_groups: 9"))
        err = wait_until(lambda: status(url)["policy"]["error"], 10, what="rejected", proc=proc)
        assert "fleet.floor_groups: 9 is above fleet.ceiling_groups (3)" in err
        assert status(url)["policy"]["hash"] == second  # the last good policy keeps running
        assert metric(url, "autoscaler_policy_reload_errors_total") == 1.0
        assert metric(url, "autoscaler_policy_error") == 1.0
        assert status(url)["leader"] is True and proc.alive()
        policy.write_text(yaml.safe_dump(data, sort_keys=False))  # fixed again (same text as `second`)
        wait_until(lambda: status(url)["policy"]["error"] is None, 10, what="error cleared", proc=proc)
    ledger = Ledger(db)
    with ledger.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM policy_rejections")).scalar() == 1
        assert conn.execute(text("SELECT count(*) FROM policy_loads")).scalar() == 2
    ledger.close()


def test_operator_controls_are_obeyed_within_one_tick(tmp_path, workers):
    policy = advisory_policy(tmp_path / "p.yaml", workers)
    db = f"sqlite:///{tmp_path}/l.db"
    proc, url = run_proc(tmp_path, policy, db)
    tick = 1.0  # demo.yaml's tick_interval_s
    with proc:
        wait_until(lambda: status(url)["last_decision"], 20, what="running", proc=proc)
        assert cli(["pause", "--db", db, "--reason", "maintenance window", "--by", "alice"]) == 0
        t0 = time.monotonic()
        wait_until(lambda: status(url)["paused"], 3 * tick + 2, what="paused", proc=proc)
        assert time.monotonic() - t0 <= 2 * tick + 1.5
        assert cli(["resume", "--db", db, "--reason", "done", "--by", "alice"]) == 0
        wait_until(lambda: not status(url)["paused"], 3 * tick + 2, what="resumed", proc=proc)
        until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
        assert cli(["pin", "--db", db, "--groups", "2", "--until", until, "--reason", "launch", "--by", "bob"]) == 0
        s = wait_until(lambda: (st := status(url))["pin"] and st["last_decision"]["reason"] in ("pin", "pinned") and st,
                       3 * tick + 3, what="pin obeyed", proc=proc)
        assert s["pin"]["groups"] == 2 and s["pin"]["by"] == "bob"
        wait_until(lambda: sum(g["phase"] in ("ready", "starting") for g in status(url)["groups"].values()) == 2,
                   10, what="2 groups under the pin", proc=proc)
        assert cli(["unpin", "--db", db, "--reason", "launch over", "--by", "bob"]) == 0
        wait_until(lambda: status(url)["pin"] is None, 3 * tick + 2, what="unpinned", proc=proc)
        assert cli(["cordon", "g1", "--db", db, "--reason", "replace a NIC", "--by", "carol"]) == 0
        wait_until(lambda: status(url)["groups"]["g1"]["cordoned"], 3 * tick + 2, what="cordon seen", proc=proc)
    ledger = Ledger(db)
    reasons = [d.reason for d in ledger.decisions(ledger.runs(source="advisory")[-1].id)]
    assert "pin" in reasons
    ledger.close()


def test_a_long_tick_interval_never_locks_out_reloads_and_controls(tmp_path, workers):
    # tick_interval_s 120: a pause and a reverted edit are obeyed within seconds (the watch runs
    # every 2 s between ticks), not at the next decision two minutes later.
    policy = advisory_policy(tmp_path / "p.yaml", workers, scaling={"tick_interval_s": 120},
                             forecast={"trend_window_s": 600, "minute_s": 120})
    db = f"sqlite:///{tmp_path}/l.db"
    proc, url = run_proc(tmp_path, policy, db)
    with proc:
        first = wait_until(lambda: (st := status(url))["last_decision"] and st, 20, what="first tick", proc=proc)
        assert cli(["pause", "--db", db, "--reason", "incident", "--by", "alice"]) == 0
        wait_until(lambda: status(url)["paused"], 8, what="pause obeyed within seconds", proc=proc)
        data = yaml.safe_load(policy.read_text())
        data["scaling"]["tick_interval_s"] = 1
        policy.write_text(yaml.safe_dump(data, sort_keys=False))
        wait_until(lambda: status(url)["policy"]["hash"] != first["policy"]["hash"], 8, what="edit applied", proc=proc)
        # the new 1 s interval is in force now: decisions follow every second
        seen: set[str] = set()

        def three_more_decisions() -> bool:
            seen.add(status(url)["last_decision"]["at"])
            return len(seen) >= 4

        wait_until(three_more_decisions, 15, what="ticking every second", proc=proc)


def test_sqlite_second_instance_refuses_naming_the_holder_and_restart_after_sigkill_works(tmp_path, workers):
    policy = advisory_policy(tmp_path / "p.yaml", workers)
    db = f"sqlite:///{tmp_path}/l.db"
    first, url = run_proc(tmp_path, policy, db, name="first")
    with first:
        # start-up waits are generous (a loaded CI machine once took >20 s to start the
        # controller); nothing here bounds how fast a start is
        wait_until(lambda: status(url)["leader"], 60, what="first leads", proc=first)
        second, _ = run_proc(tmp_path, policy, db, name="second")
        with second:
            assert second.wait(60) == 1
            err = second.log().strip().splitlines()
            assert len(err) == 1 and "l.db.lock" in err[0] and f":{first.pid}" in err[0], err
        first.signal(signal.SIGKILL)
        first.wait(10)
    again, url2 = run_proc(tmp_path, policy, db, name="again")
    with again:
        s = wait_until(lambda: (st := status(url2))["leader"] and st, 60, what="restart leads", proc=again)
        assert s["epoch"] >= 2


def test_postgres_takeover_after_sigkill_within_30_s_with_a_new_epoch(tmp_path, workers, pg_url):
    policy = advisory_policy(tmp_path / "p.yaml", workers)
    a, url_a = run_proc(tmp_path, policy, pg_url, name="a")
    with a:
        wait_until(lambda: status(url_a)["leader"], 30, what="a leads", proc=a)
        b, url_b = run_proc(tmp_path, policy, pg_url, name="b")
        with b:
            wait_until(lambda: httpx.get(url_b + "/healthz", timeout=1).status_code == 200, 20, what="b up", proc=b)
            for _ in range(6):  # never two leaders
                assert [status(url_a)["leader"], status(url_b)["leader"]] == [True, False]
                time.sleep(0.5)
            epoch = status(url_a)["epoch"]
            a.signal(signal.SIGKILL)
            a.wait(10)
            t0 = time.monotonic()
            s = wait_until(lambda: (st := status(url_b))["leader"] and st, 30, what="b takes over", proc=b)
            assert time.monotonic() - t0 < 30
            assert s["epoch"] == epoch + 1
            assert metric(url_b, "autoscaler_leader") == 1.0
            wait_until(lambda: status(url_b)["last_decision"], 10, what="b decides", proc=b)


def test_run_once_exits_1_when_its_tick_fails(tmp_path, workers):
    # The decision cannot be recorded (a trigger refuses every insert into decisions): the tick
    # fails, so --once must not report success.
    import sqlite3

    policy = advisory_policy(tmp_path / "p.yaml", workers)
    db_file = tmp_path / "l.db"
    Ledger(f"sqlite:///{db_file}").close()
    with sqlite3.connect(db_file) as conn:
        conn.execute("CREATE TRIGGER no_decisions BEFORE INSERT ON decisions BEGIN SELECT RAISE(ABORT, 'disk full'); END")
    proc, _url = run_proc(tmp_path, policy, f"sqlite:///{db_file}", "--once")
    with proc:
        assert proc.wait(60) == 1, proc.log()[-2000:]
        assert "--once: the tick failed" in proc.log()
