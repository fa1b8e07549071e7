"""Issue 19, "Nothing silently wrong": the failures a new user met next to a fleet that looked
healthy. Each kind has a test here: data loss (an output over the ledger, an in-memory ledger
for a long-lived controller, a live currency edit), silent wrongs (a control aimed at a ledger no
controller uses, impossible signal values, dropped trace rows), tracebacks (every URL parsed up
front), secrets (what children inherit, what an error prints) and the smaller ones."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autoscaler.cli import main
from autoscaler.settings import load_settings, redact_url
from tests.support.procs import PYTHON, REPO, bad

POLICY = str(REPO / "policies/default.yaml")
SNAPSHOT = str(REPO / "examples/snapshots/busy-morning.json")
AZURE = str(REPO / "examples/traces/azure-2023-conv/AzureLLMInferenceTrace_conv.csv")


def cli(*args: str, cwd: Path | str = REPO, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "autoscaler", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=env)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _live_ledger(path: Path) -> str:
    from autoscaler.ledger.store import Ledger
    from tests.support.ledger_runs import record_live

    url = f"sqlite:///{path}"
    with Ledger(url) as ledger:
        record_live(ledger, hours=24)
    return url


# ------------------------------------------------------------------------------ data loss
def test_no_output_path_goes_over_the_ledger_or_any_sqlite_database(tmp_path):
    db = tmp_path / "l.db"
    url = _live_ledger(db)
    before = _digest(db)
    # the --db file itself, by its own name and through a symlink
    bad(cli("report", "--db", url, "--from", "2026-01-05", "--to", "2026-01-06", "--output", str(db)),
        f"--output: {db} is the ledger database")
    (tmp_path / "link.csv").symlink_to(db)
    bad(cli("report", "--db", url, "--from", "2026-01-05", "--to", "2026-01-06", "--output",
            str(tmp_path / "link.csv")), "is the ledger database")
    # its companions: a write over the WAL or the lock file corrupts the ledger or breaks the one-actor rule
    bad(cli("report", "--db", url, "--from", "2026-01-05", "--to", "2026-01-06", "--output", f"{db}-wal"),
        "is the ledger's wal file")
    # any other SQLite database (decide has no --db: the default ledger or any other one)
    bad(cli("decide", "--policy", POLICY, "--snapshot", SNAPSHOT, "--memory-out", str(db)),
        f"--memory-out: {db} is a SQLite database; refusing to write over it")
    bad(cli("simulate", "--policy", POLICY, "--trace", AZURE, "--db", url, "--timeline-out", str(db)),
        f"--timeline-out: {db} is the ledger database")
    # the ledger named by the environment, even before it exists (the next write would create it there)
    fresh = tmp_path / "fresh.db"
    env = {**os.environ, "AUTOSCALER_DATABASE_URL": f"sqlite:///{fresh}"}
    bad(cli("decide", "--policy", POLICY, "--snapshot", SNAPSHOT, "--memory-out", str(fresh), env=env),
        f"--memory-out: {fresh} is the ledger database")
    assert _digest(db) == before and not fresh.exists()
    # an ordinary file is still fine
    out = tmp_path / "report.csv"
    assert cli("report", "--db", url, "--from", "2026-01-05", "--to", "2026-01-06", "--format", "csv",
               "--output", str(out)).returncode == 0
    assert out.read_text().startswith("period,start,end,")


@pytest.mark.parametrize("db", ["sqlite://", "sqlite:///:memory:", "sqlite:///file::memory:?cache=shared"])
def test_run_refuses_an_in_memory_ledger(tmp_path, db):
    bad(cli("run", "--policy", POLICY, "--db", db, "--once", cwd=tmp_path), "--db:", "in-memory database")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------ tracebacks
PG_BAD_PORT = "postgresql://ledger:pw@127.0.0.1:abc/ledger"


@pytest.mark.parametrize("args, needle", [
    (["report", "--db", "sqlite://x.db", "--from", "2026-01-05", "--to", "2026-01-06"],
     "--db: 'sqlite://x.db' is not a database URL: a SQLite URL has no host"),
    (["report", "--db", PG_BAD_PORT, "--from", "2026-01-05", "--to", "2026-01-06"],
     "the port 'abc' is not a number"),
    (["status", "--db", PG_BAD_PORT], "the port 'abc' is not a number"),
    (["pause", "--db", PG_BAD_PORT, "--reason", "r"], "the port 'abc' is not a number"),
    (["run", "--policy", POLICY, "--prometheus", "http://[::1", "--once"],
     "--prometheus: 'http://[::1' is not an http(s) URL: an unclosed '['"),
    (["run", "--policy", POLICY, "--gateway", "http://[::1", "--once"],
     "--gateway: 'http://[::1' is not an http(s) URL: an unclosed '['"),
    (["run", "--policy", POLICY, "--gateway", "http://127.0.0.1:http", "--once"], "--gateway: 'http://127.0.0.1:http' is not an http(s) URL: the port"),
    (["signals", "--policy", POLICY, "--prometheus", "http://[::1"], "--prometheus: 'http://[::1' is not an http(s) URL"),
    (["signals", "--policy", POLICY, "--prometheus", "127.0.0.1:9090"], "it needs http:// or https://"),
    (["emulate", "load", "--target", "http://[::1", "--trace", AZURE], "--target: 'http://[::1' is not an http(s) URL"),
    (["status", "--server", "http://[::1"], "--server: 'http://[::1' is not an http(s) URL"),
    (["simulate", "--policy", POLICY, "--from-prometheus", "http://[::1", "--from", "2026-01-05", "--to", "2026-01-06"],
     "--from-prometheus: 'http://[::1' is not an http(s) URL"),
])
def test_every_url_is_parsed_up_front_in_one_message_style(tmp_path, args, needle):
    err = bad(cli(*args, cwd=tmp_path), needle)
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # nothing created (no ledger, no lock)


def test_a_url_in_the_environment_is_named_as_that_variable(tmp_path):
    env = {**os.environ, "AUTOSCALER_GATEWAY_URL": "http://[::1"}
    bad(cli("run", "--policy", POLICY, "--once", cwd=tmp_path, env=env), "AUTOSCALER_GATEWAY_URL: 'http://[::1'")
    # a command that does not use the gateway is not stopped by it
    env = {**os.environ, "AUTOSCALER_GATEWAY_URL": "http://[::1", "AUTOSCALER_PROMETHEUS_URL": "x"}
    p = cli("report", "--db", f"sqlite:///{tmp_path}/none.db", "--from", "2026-01-05", "--to", "2026-01-06",
            cwd=tmp_path, env=env)
    assert "AUTOSCALER_GATEWAY_URL" not in p.stderr and "AUTOSCALER_PROMETHEUS_URL" not in p.stderr


# ------------------------------------------------------------------------------ secrets
@pytest.mark.parametrize("url, secret", [
    ("postgresql://ledger:P@SS#X@127.0.0.1:1/ledger", ("P@SS", "SS#X", "SS")),  # an unescaped '@' and '#'
    ("postgresql://ledger@127.0.0.1:1/ledger?password=hunter2", ("hunter2",)),
    ("postgresql://ledger@127.0.0.1:1/ledger?sslmode=disable&sslpassword=hunter2", ("hunter2",)),
    ("postgresql://ledger@127.0.0.1:1/ledger?password=a@b.example", ("a@b", "b.example")),
])
def test_a_password_is_never_printed_not_even_a_part(tmp_path, url, secret):
    p = cli("report", "--db", url, "--from", "2026-01-05", "--to", "2026-01-06", cwd=tmp_path)
    assert p.returncode in (1, 2) and p.stderr.count("\n") == 1, p.stderr
    for s in secret:
        assert s not in p.stderr, p.stderr
    for s in secret:
        assert s not in redact_url(url)


def test_redact_url_keeps_what_is_not_secret():
    assert redact_url("postgresql://ledger:pw@db.example:5432/ledger") == "postgresql://ledger:***@db.example:5432/ledger"
    assert redact_url("postgresql://db.example/ledger?sslmode=require&password=x") == \
        "postgresql://db.example/ledger?sslmode=require&password=***"
    assert redact_url("sqlite:///fleet.db") == "sqlite:///fleet.db"


def test_the_database_url_can_come_from_a_file(tmp_path):
    secret_file = tmp_path / "db-url"
    secret_file.write_text("postgresql://ledger:s3cret@db.example:5432/ledger\n")
    s = load_settings(env={"AUTOSCALER_DATABASE_URL_FILE": str(secret_file)})
    assert s.database_url == "postgresql://ledger:s3cret@db.example:5432/ledger"
    assert s.database_url_from == "AUTOSCALER_DATABASE_URL_FILE" and "s3cret" not in repr(s)
    # the variable itself still wins; a missing file is bad input naming the variable
    assert load_settings(env={"AUTOSCALER_DATABASE_URL": "sqlite:///a.db",
                              "AUTOSCALER_DATABASE_URL_FILE": str(secret_file)}).database_url == "sqlite:///a.db"
    env = {**os.environ, "AUTOSCALER_DATABASE_URL_FILE": str(tmp_path / "missing")}
    env.pop("AUTOSCALER_DATABASE_URL", None)
    bad(cli("status", cwd=tmp_path, env=env), "AUTOSCALER_DATABASE_URL_FILE: cannot read")
    # and a URL read from the file is checked like any other, named by the variable
    secret_file.write_text("postgresql://ledger:pw@db.example:port/ledger")
    env["AUTOSCALER_DATABASE_URL_FILE"] = str(secret_file)
    bad(cli("status", cwd=tmp_path, env=env), "AUTOSCALER_DATABASE_URL_FILE: ", "the port 'port'")


SECRETS = {"AUTOSCALER_GATEWAY_API_KEY": "gw-secret", "AUTOSCALER_DATABASE_URL": "postgresql://u:db-secret@h/l",
           "AUTOSCALER_STATUS_TOKEN": "status-secret", "AUTOSCALER_GATEWAY_API_KEY_FILE": "/run/secrets/key"}


def test_site_commands_do_not_inherit_the_controllers_secrets(monkeypatch):
    from autoscaler.actuators.base import child_env, run_bounded

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SITE_SETTING", "kept")
    out = run_bounded([sys.executable, "-c", "import os; print(sorted(os.environ.items()))"],
                      timeout_s=30, output_limit_bytes=100_000)
    assert out.ok and "SITE_SETTING" in out.output_tail
    for name, value in SECRETS.items():
        assert name not in out.output_tail and value not in out.output_tail
    assert "PATH" in child_env() and not set(SECRETS) & set(child_env())


def test_local_workers_do_not_inherit_the_controllers_secrets(tmp_path, monkeypatch):
    from autoscaler.actuators.local import LocalActuator
    from autoscaler.policy.loader import load_policy
    from tests.support.procs import free_port

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    text = (REPO / "policies/demo.yaml").read_text()
    port = free_port()
    import re

    urls = iter([f"http://127.0.0.1:{port}", f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"])
    text = re.sub(r"worker_url: \S+", lambda _m: f"worker_url: {next(urls)}", text)
    policy_path = tmp_path / "p.yaml"
    policy_path.write_text(text)
    policy = load_policy(str(policy_path)).policy
    actuator = LocalActuator(policy, log_dir=str(tmp_path / "workers"))
    group = policy.fleet.groups[0]
    result = actuator.start(group)
    assert result.ok, result.detail
    child = actuator._children[group.name]
    pid = child.pid
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        names = {e.split(b"=", 1)[0].decode() for e in environ if e}
        assert "PATH" in names
        assert not set(SECRETS) & names, names
    finally:
        os.killpg(pid, 9)  # its own session: the worker and anything it started
        child.wait(10)
        actuator.close()


# ------------------------------------------------------------------------------ controls
def test_a_control_aimed_at_a_ledger_no_controller_uses_is_refused_and_names_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSCALER_")}
    # no --db: the default ./autoscaler.db, where no controller runs; it must not be created
    err = bad(cli("pause", "--reason", "incident", cwd=tmp_path, env=env), "pause: no ledger at sqlite:///autoscaler.db",
              "the default")
    assert "obeys" not in err and not (tmp_path / "autoscaler.db").exists()
    # a ledger of backtests only: no fleet, no live run, no leader
    from autoscaler.ledger.store import Ledger
    from tests.support.ledger_runs import record_live

    sim = f"sqlite:///{tmp_path / 'sim.db'}"
    with Ledger(sim) as ledger:
        record_live(ledger, source="simulation", hours=2)
    bad(cli("pin", "--db", sim, "--groups", "2", "--until", _soon(), "--reason", "r", cwd=tmp_path),
        f"pin: the ledger {sim} (given by --db) has no fleet, no live or advisory run and no leader recorded")
    with Ledger(sim) as ledger, ledger.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM operator_controls").scalar() == 0
    # prepared on purpose, before a first run: recorded
    new = tmp_path / "new.db"
    p = cli("pause", "--db", f"sqlite:///{new}", "--reason", "first run: advisory", "--new-ledger", cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.startswith("paused by "), p.stderr


def _soon(days: float = 7) -> str:
    from autoscaler.core.types import iso

    return iso(float(int(time.time() + days * 86400)))


@pytest.mark.parametrize("argv, needle", [
    (["pause", "--reason", "incident\nFAKE decision line"], "--reason: holds a line break"),
    (["pause", "--reason", "a\rb"], "--reason: holds a line break"),
    (["pause", "--reason", "r", "--by", "eve\x1b[2J"], "--by: holds a line break or control character"),
    (["pin", "--groups", "2", "--until", "9999-12-31", "--reason", "r"], "--until: 9999-12-31T00:00:00Z is more than 31 days"),
])
def test_control_arguments_that_would_mislead_are_bad_input(tmp_path, capsys, argv, needle):
    db = tmp_path / "l.db"
    code = main([*argv, "--db", f"sqlite:///{db}"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith(needle), err
    assert not db.exists()


def test_status_shows_the_pin_the_core_holds_and_why_it_is_clamped(tmp_path, capsys):
    from sqlalchemy import insert, update

    from autoscaler.ledger.models import ControllerStateRow, Run
    from autoscaler.ledger.schema import make_engine
    from autoscaler.ledger.store import Ledger
    from autoscaler.service.controls import record_control
    from autoscaler.service.status import build_status, render_status

    url = f"sqlite:///{tmp_path / 'l.db'}"
    with Ledger(url) as ledger:
        run = ledger.start_run("live", _default_policy(), at=1e9, label="x")
        with ledger.engine.begin() as conn:
            sha = conn.execute(update(Run).where(Run.id == run).values(label="x").returning(Run.policy_sha256)).scalar()
            conn.execute(insert(ControllerStateRow).values(key="policy", epoch=1, updated_at=1e9,
                                                           value={"path": "p.yaml", "hash": sha}))
        record_control(ledger, "pin", by="bob", reason="launch", groups=5, until=time.time() + 3600, at=time.time())
    status = build_status(make_engine(url, read_only=True), time.time())
    # default.yaml's ceiling is 3: a pin of 5 holds 3
    assert status["pin"]["groups"] == 5 and status["pin"]["effective_groups"] == 3
    assert status["pin"]["clamped"] == "above fleet.ceiling_groups (3): holds 3"
    assert "5 groups (clamped: above fleet.ceiling_groups (3): holds 3)" in render_status(status)


def _default_policy():
    from autoscaler.policy.loader import load_policy

    return load_policy(POLICY)
