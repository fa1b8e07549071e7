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


@pytest.mark.parametrize("dsn, secret", [
    ("host=127.0.0.1 port=1 password=hunter2 dbname=ledger", ("hunter2",)),
    ("host=127.0.0.1 password = 'hunter 2' dbname=ledger", ("hunter", " 2")),
    ("password='hun\\'ter2 x' host=127.0.0.1", ("hun", "ter2")),
    ("host=127.0.0.1 sslpassword=hun;ter2", ("hun;ter2", "ter2")),
])
@pytest.mark.parametrize("where", ["--db", "AUTOSCALER_DATABASE_URL"])
def test_a_libpq_key_value_password_is_never_printed(tmp_path, dsn, secret, where):
    """Issue 34 item 12: a libpq DSN (key=value, not a URL) is bad input, and its error line named it
    with the password in clear, from --db and from the environment alike."""
    if where == "--db":
        p = cli("status", "--db", dsn, cwd=tmp_path)
    else:
        p = cli("status", cwd=tmp_path, env={**os.environ, "AUTOSCALER_DATABASE_URL": dsn})
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and where in p.stderr, p.stderr
    assert "password" in p.stderr and "***" in p.stderr, p.stderr  # still says which part it hid
    for s in secret:
        assert s not in p.stderr, p.stderr
        assert s not in redact_url(dsn)
    assert "host=127.0.0.1" in redact_url(dsn)  # what is not secret stays readable
    demo = cli("demo", "--db", dsn, cwd=tmp_path)  # a command with a check of its own
    assert demo.returncode == 2 and not any(s in demo.stderr for s in secret), demo.stderr


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
        # Popen returns once the exec has begun (its error pipe closes early in execve), and the kernel
        # sets the new program's environment a little later: read empty until then (seen under load).
        deadline = time.monotonic() + 10
        while not (environ := Path(f"/proc/{pid}/environ").read_bytes()) and time.monotonic() < deadline:
            assert child.poll() is None, f"the worker exited at once ({child.returncode})"
            time.sleep(0.01)
        names = {e.split(b"=", 1)[0].decode() for e in environ.split(b"\0") if e}
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


# ------------------------------------------------------------------------------ the currency
def test_a_currency_edit_leaves_every_hour_reportable(tmp_path, capsys):
    """A ledger written before live currency edits were refused: run 1 in USD, EUR from 24:00 on,
    back to USD from 36:00. Ranges on either side report in their currency; a range across the
    change says where to cut it (--run cannot split one run)."""
    import json

    from autoscaler.ledger.store import Ledger
    from tests.support.ledger_runs import T0, H, policy_with_cost, record_live

    url = f"sqlite:///{tmp_path / 'l.db'}"
    with Ledger(url) as ledger:
        run = record_live(ledger, hours=48)
        ledger.record_policy(run, policy_with_cost(currency="EUR"), at=T0 + 24 * H)
        ledger.record_policy(run, policy_with_cost(currency="USD", pue=1.31), at=T0 + 36 * H)

    def report(start: str, end: str) -> tuple[int, str, str]:
        code = main(["report", "--db", url, "--from", start, "--to", end, "--format", "json"])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = report("2026-01-05", "2026-01-06")  # entirely before the edit
    assert code == 0, err
    assert json.loads(out)["currency"] == "USD"
    code, out, err = report("2026-01-06T00:00:00Z", "2026-01-06T12:00:00Z")  # within the EUR stretch
    assert code == 0 and json.loads(out)["currency"] == "EUR", err
    code, out, err = report("2026-01-06T12:00:00Z", "2026-01-07")  # after the revert
    assert code == 0 and json.loads(out)["currency"] == "USD", err
    code, out, err = report("2026-01-05", "2026-01-07")  # across it: where to cut, not --run
    assert code == 2 and err.count("\n") == 1
    assert "run 1 changed from USD to EUR at 2026-01-06T00:00:00Z" in err and "--to 2026-01-06T00:00:00Z" in err
    assert "--run" not in err


def test_a_live_currency_edit_is_refused_by_the_policy_layer(tmp_path):
    from autoscaler.policy.loader import live_edit_problems, parse_policy

    text = Path(POLICY).read_text()
    running = parse_policy(text, "p.yaml")
    assert live_edit_problems(running, parse_policy(text.replace("pue: 1.3", "pue: 1.4"), "p.yaml"), "p.yaml") == []
    edited = parse_policy(text.replace("currency: USD", "currency: EUR"), "p.yaml")
    (line,) = live_edit_problems(running, edited, "p.yaml")
    assert line.startswith("p.yaml: cost.currency: 'EUR' differs from the running policy's 'USD'")
    assert "restart" in line


def test_a_report_of_centuries_is_refused_before_the_ledger_is_read(tmp_path):
    started = time.monotonic()
    bad(cli("report", "--db", f"sqlite:///{tmp_path / 'none.db'}", "--from", "0001-01-01", "--to", "9999-12-31",
            cwd=tmp_path), "--from: about 739,", "days up to now is more than 10,000 rows")
    p = cli("report", "--db", f"sqlite:///{tmp_path / 'none.db'}", "--from", "1990-01-01", "--to", "2030-01-01",
            cwd=tmp_path)
    assert "or --by week" in p.stderr
    assert time.monotonic() - started < 20
    # to the end of time by month from a recent start is fine: periods after now have no rows
    url = _live_ledger(tmp_path / "l.db")
    p = cli("report", "--db", url, "--from", "2026-01-01", "--to", "9999-12-31", "--by", "month", "--format", "csv",
            cwd=tmp_path, timeout=60)
    assert p.returncode == 0, p.stderr


# ------------------------------------------------------------------------------ the policy
def _policy_with(tmp_path: Path, old: str, new: str) -> str:
    text = Path(POLICY).read_text()
    assert old in text, old
    path = tmp_path / "p.yaml"
    path.write_text(text.replace(old, new, 1))
    return str(path)


@pytest.mark.parametrize("old, new, needle", [
    ("tick_interval_s: 15", "tick_interval_s: 6e2",
     "scaling.tick_interval_s: '6e2' is text to YAML, not a number (it reads an exponent only as in 6.0e+2); "
     "write 600 or 600.0"),
    ("energy_price_per_kwh: 0.15", "energy_price_per_kwh: 1.0e12", "write 1000000000000 or 1000000000000.0"),
    ("tick_interval_s: 15", "tick_interval_s: 3600", "scaling.tick_interval_s: 3600"),
])
def test_policy_numbers_that_mislead_are_named(tmp_path, old, new, needle):
    path = _policy_with(tmp_path, old, new)
    err = bad(cli("policy", "validate", path), needle)
    assert "valid number" not in err


@pytest.mark.parametrize("old, new, field", [
    ("address: 10.0.0.11}", "address: '-oProxyCommand=touch /tmp/x'}", "fleet.groups[0].nodes[0].address"),
    ("address: 10.0.0.11}", "address: 'spark-1;reboot'}", "fleet.groups[0].nodes[0].address"),
    ("address: 10.0.0.11}", "address: '$(id)'}", "fleet.groups[0].nodes[0].address"),
    ("address: 10.0.0.11}", "address: 'spark 1'}", "fleet.groups[0].nodes[0].address"),
    ("address: 10.0.0.11}", "address: 'root@spark-1'}", "fleet.groups[0].nodes[0].address"),
    ("worker_url: http://10.0.0.11:30000", "worker_url: 'http://spark-1;id:30000'", "fleet.groups[0].worker_url"),
    ("worker_url: http://10.0.0.11:30000", "worker_url: 'http://-x:30000'", "fleet.groups[0].worker_url"),
    ("worker_url: http://10.0.0.11:30000", "worker_url: 'http://$(id):30000'", "fleet.groups[0].worker_url"),
    ("worker_url: http://10.0.0.11:30000", "worker_url: 'http://u:pw@spark-1:30000'", "fleet.groups[0].worker_url"),
])
def test_node_addresses_and_worker_hosts_are_host_names_or_ip_addresses_only(tmp_path, old, new, field):
    bad(cli("policy", "validate", _policy_with(tmp_path, old, new)), f"{field}:")


def test_ip_addresses_and_plain_host_names_stay_valid(tmp_path):
    for old, new in (("address: 10.0.0.11}", "address: 10.0.0.21}"), ("address: 10.0.0.11}", "address: 'fe80::1'}"),
                     ("worker_url: http://10.0.0.11:30000", "worker_url: 'http://[fd00::11]:30000'"),
                     ("address: 10.0.0.11}", "address: spark-1.rack2.example.}")):
        p = cli("policy", "validate", _policy_with(tmp_path, old, new))
        assert p.returncode == 0, (new, p.stderr)


# ------------------------------------------------------------------------------ traces
def test_a_row_of_empty_cells_is_a_counted_bad_row(tmp_path):
    from autoscaler.errors import BadInput
    from autoscaler.sim.traces import load_trace

    lines = Path(AZURE).read_text().splitlines()[:40]  # the header and 39 requests
    trace = tmp_path / "t.csv"
    # a row of empty cells in the middle, a blank line and a line of spaces (those two are not rows)
    trace.write_text("\n".join(lines[:10] + [",,", "", "   "] + lines[10:]) + "\n")
    with pytest.raises(BadInput, match=r"t\.csv:11: every cell is empty \(,,\)"):
        load_trace(str(trace), "auto")
    loaded = load_trace(str(trace), "auto", skip_bad_rows=True)
    assert loaded.bad_rows == 1 and loaded.requests_read == 40 and len(loaded) == 39


def test_verbose_goes_after_the_subcommand_too():
    from autoscaler.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["run", "--policy", "p.yaml", "-v"]).verbose == 1  # as docs/live.md shows it
    assert parser.parse_args(["-vv", "run", "--policy", "p.yaml"]).verbose == 2
    assert parser.parse_args(["run", "--policy", "p.yaml"]).verbose == 0


# ------------------------------------------------------------------------------ core memory
def test_the_memory_the_core_writes_reads_back_through_falling_rising_and_flat_demand():
    """Every memory the core returns must load again as the snapshot format (a restart or a failover
    reads it so); falling demand wrote negative rises that the schema refused, so every restart after
    a quiet spell threw the learned history away. Demand rises 1 -> 17, holds, falls back to 1, holds,
    one tick every 15 s for 3 hours, with all three groups ready."""
    from autoscaler.adapters.snapshot_file import snapshot_from_dict
    from autoscaler.core.types import iso
    from tests.core_helpers import T0, decide, fleet, fresh, make_policy, signals

    policy = make_policy(scaling={"scale_down": {"tick_rises": True}})
    memory = fresh()
    state = fleet("ready", "ready", "ready")
    seen_negative = seen_tick = False
    for tick in range(3 * 240):
        minute = tick / 4
        demand = min(17.0, 1 + minute / 2) if minute < 45 else 17.0 if minute < 90 else \
            max(1.0, 17 - (minute - 90) / 2) if minute < 135 else 1.0
        now = T0 + 15 * tick
        running = min(demand, 18.0)
        per = running / 3
        snap = signals(at=now, ttft=1.0, queue_wait=0.0, g1=(per, 0, 0.3), g2=(per, 0, 0.3), g3=(per, 0, 0.3))
        _, memory = decide(snap, state, policy, memory, now)
        stored = memory.to_dict()
        seen_negative |= any(e[1] < 0 for e in stored["rise_log"])
        doc = {"at": iso(now), "fleet": {"groups": {g: {"phase": "ready"} for g in ("g1", "g2", "g3")}},
               "memory": stored}
        loaded = snapshot_from_dict(doc, policy, "<stored memory>")[2]
        assert loaded.to_dict() == stored, f"tick {tick}"
        assert loaded.rises_sorted == memory.rises_sorted
        assert loaded.rise_reach == memory.rise_reach and loaded.tick_rises == memory.tick_rises
        assert loaded.tick_window == memory.tick_window
        seen_tick |= bool(stored["tick_rises"])
    assert seen_negative  # the falling stretch was exercised
    assert seen_tick and memory.rise_reach  # the cold start's tick rises, and the bases, were kept


def test_a_policy_pin_note_is_one_line(tmp_path):
    import yaml

    # default.yaml has no schedules.pin: add one whose note would split the decision's log line
    path = tmp_path / "p.yaml"
    data = yaml.safe_load(Path(POLICY).read_text())
    data.setdefault("schedules", {})["pin"] = {"groups": 2, "until": "2099-01-01T00:00:00Z",
                                               "note": "launch\nINFO autoscaler.decision: fake"}
    path.write_text(yaml.safe_dump(data))
    bad(cli("policy", "validate", str(path)), "schedules.pin.note: holds a line break")


def test_a_pin_above_the_ceiling_says_at_once_what_the_controller_will_hold(tmp_path, capsys):
    from sqlalchemy import insert

    from autoscaler.ledger.models import ControllerStateRow, FleetGroupRow, LeaseRow
    from autoscaler.ledger.store import Ledger
    from tests.support.ledger_runs import record_live

    url = f"sqlite:///{tmp_path / 'l.db'}"
    with Ledger(url) as ledger:
        run = record_live(ledger, end=False)
        sha = ledger.runs(run_id=run)[0].policy_sha256
        with ledger.engine.begin() as conn:
            conn.execute(insert(ControllerStateRow).values(key="policy", epoch=1, updated_at=1e9,
                                                           value={"path": "p.yaml", "hash": sha}))
            conn.execute(insert(LeaseRow).values(name="controller", holder="ctl", epoch=1, acquired_at=1e9,
                                                 renewed_at=1e9, expires_at=1e9))
            conn.execute(insert(FleetGroupRow).values(
                name="g1", phase="ready", since=1e9, worker_url=None, worker_id=None, attempts=0, retry_at=None,
                cordoned=False, cause=None, health_failures=0, start_began_at=None, removed_at=None, epoch=1,
                updated_at=1e9))
    code = main(["pin", "--db", url, "--groups", "5", "--until", _soon(1), "--reason", "launch", "--by", "bob"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "note: the running policy clamps this pin: 5 is above fleet.ceiling_groups (3): holds 3" in out


def test_a_stop_before_the_local_worker_listens_still_stops_it(tmp_path):
    """A worker just started (still importing, its port not yet open) is stopped by its pid: a closed
    port is no proof it is gone. Before, the stop said "nothing listens: stopped" and the worker
    bound its port and served afterwards (found as a leaked worker after a loaded test run)."""
    import re

    from autoscaler.actuators.local import LocalActuator, port_open
    from autoscaler.policy.loader import load_policy
    from tests.support.procs import free_port

    port = free_port()
    urls = iter([f"http://127.0.0.1:{port}", f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"])
    text = re.sub(r"worker_url: \S+", lambda _m: f"worker_url: {next(urls)}", (REPO / "policies/demo.yaml").read_text())
    (tmp_path / "p.yaml").write_text(text)
    policy = load_policy(str(tmp_path / "p.yaml")).policy
    actuator = LocalActuator(policy, log_dir=str(tmp_path / "workers"))
    group = policy.fleet.groups[0]
    started = actuator.start(group)
    assert started.ok, started.detail
    child = actuator._children[group.name]
    try:
        assert not port_open("127.0.0.1", port)  # milliseconds after the start: still importing
        stopped = actuator.stop(group)
        assert stopped.ok and f"pid {child.pid}" in stopped.detail, stopped.detail
        assert child.wait(10) is not None
        assert not port_open("127.0.0.1", port)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, 9)
            child.wait(10)
        actuator.close()


def test_the_local_actuator_never_takes_another_fleets_worker_for_its_own(tmp_path):
    """A worker another fleet started took this group's port (seen in a loaded test run: the demo
    adopted another test's worker as its g2 and routed requests to it until it went away). Its
    owner, the other ledger's fleet id, says so: the group is not running, not started onto it, and
    the worker is never signalled. The fleet id is the ledger's: every actuator of one fleet (a
    restart, a test's fleet and its driver, another log folder) has the same."""
    import re

    from autoscaler.actuators.base import GroupStatus
    from autoscaler.actuators.local import LocalActuator
    from autoscaler.ledger.live import LiveLedger
    from autoscaler.ledger.store import Ledger
    from autoscaler.policy.loader import load_policy
    from tests.support.procs import start_worker

    with Ledger(f"sqlite:///{tmp_path / 'ours.db'}") as ours, Ledger(f"sqlite:///{tmp_path / 'theirs.db'}") as theirs:
        mine, other_fleet = LiveLedger(ours).fleet_id(epoch=1), LiveLedger(theirs).fleet_id(epoch=1)
        assert LiveLedger(ours).fleet_id(epoch=2) == mine and mine != other_fleet  # made once, kept
    other = start_worker(tmp_path, name="other", owner=other_fleet)
    try:
        urls = iter([other.url, "http://127.0.0.1:1", "http://127.0.0.1:2"])
        text = re.sub(r"worker_url: \S+", lambda _m: f"worker_url: {next(urls)}", (REPO / "policies/demo.yaml").read_text())
        (tmp_path / "p.yaml").write_text(text)
        policy = load_policy(str(tmp_path / "p.yaml")).policy
        actuator = LocalActuator(policy, log_dir=str(tmp_path / "workers"), owner=mine)
        group = policy.fleet.groups[0]
        status, detail = actuator.status(group)
        assert status is GroupStatus.STOPPED, detail
        assert detail == (f"port {other.port} is held by another fleet's emulated worker "
                          f"(pid {other.proc.popen.pid}, fleet {other_fleet}, not {mine})")
        started = actuator.start(group)
        assert not started.ok and started.detail == f"not started: {detail}"
        stopped = actuator.stop(group, force=True)
        assert stopped.ok and "another fleet's" in stopped.detail
        time.sleep(0.3)
        assert other.proc.alive() and other.state()["owner"] == other_fleet
        # The fleet that started it takes it as its own, whatever its log folder; an actuator with
        # no fleet id checks nothing (and tells its workers nothing).
        theirs_actuator = LocalActuator(policy, log_dir=str(tmp_path / "elsewhere"), owner=other_fleet)
        assert theirs_actuator.status(group)[0] is GroupStatus.RUNNING
        assert theirs_actuator.argv(group)[-2:] == ["--owner", other_fleet]
        blind = LocalActuator(policy)
        assert blind.status(group)[0] is GroupStatus.RUNNING and "--owner" not in blind.argv(group)
    finally:
        other.proc.kill()
