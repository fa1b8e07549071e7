"""Money that is not true (issue 35, items 1-4): a backtest interrupted or out of disk leaves no run
that reports a saving; stopped nodes are charged as the policy's actuator leaves them; a backtest
dated after today is reportable; a day reads the same in any range and rows add up to the total.

The interruptions are real: an ``autoscaler simulate --db`` process frozen (SIGSTOP, by the fault
point ``backtest_write:run_inserted``, inside its ledger transaction) and then sent a real SIGTERM
or SIGINT, or a real full filesystem (a small tmpfs, mounted as root).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from autoscaler.cli import main
from autoscaler.ledger.store import Ledger
from tests.support.fullfs import fill, small_tmpfs
from tests.support.procs import PYTHON, REPO, Proc, wait_until

MOONCAKE = REPO / "examples" / "traces" / "mooncake-fast25-conversation" / "conversation_trace.jsonl"
POLICY = REPO / "policies" / "default.yaml"
FAULT = "stop:backtest_write:run_inserted"


def simulate_argv(db: str, *extra: str, trace: Path = MOONCAKE, policy: Path = POLICY) -> list[str]:
    return [PYTHON, "-m", "autoscaler", "simulate", "--policy", str(policy), "--trace", str(trace),
            "--db", db, "--json", *extra]


def stopped(pid: int) -> bool:
    """The process is frozen by SIGSTOP (state T in /proc)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (FileNotFoundError, IndexError):
        return False


@contextlib.contextmanager
def frozen_in_write(tmp_path: Path, url: str) -> Iterator[Proc]:
    """A real ``simulate --db URL`` frozen inside its ledger transaction (killed at the end)."""
    with Proc(simulate_argv(url), tmp_path / "simulate.log", env={"AUTOSCALER_FAULTS": FAULT}) as proc:
        wait_until(lambda: stopped(proc.pid) or not proc.alive(), 120, what="simulate frozen inside its write")
        assert proc.alive(), proc.log()[-2000:]
        yield proc


def runs_in(db_path: Path) -> list[tuple]:
    import sqlite3

    with contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as conn:
        try:
            return conn.execute("SELECT id, source, ended_at FROM runs").fetchall()
        except sqlite3.OperationalError:  # no tables yet
            return []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_backtest_interrupted_while_it_writes_leaves_no_run(tmp_path, capsys, sig):
    db_path = tmp_path / "int.db"
    url = f"sqlite:///{db_path}"
    with frozen_in_write(tmp_path, url) as proc:
        os.kill(proc.pid, sig)
        os.kill(proc.pid, signal.SIGCONT)
        code = proc.wait(timeout=60)
        log = proc.log()
    assert code == 130, (code, log[-2000:])  # interrupted, as Ctrl-C
    assert "interrupted while writing the backtest" in log and "nothing of it was recorded" in log
    assert runs_in(db_path) == []  # no run, so no report of a 100% saving
    assert main(["report", "--db", url, "--source", "simulation", "--from", "2026-01-05", "--to", "2026-01-06"]) == 0
    assert "No simulation runs recorded anything" in capsys.readouterr().out


@pytest.fixture
def small_fs(tmp_path):
    """A 3 MB tmpfs (root only: skipped with the reason otherwise), unmounted at the end."""
    with small_tmpfs(tmp_path / "small") as mnt:
        yield mnt


def test_a_backtest_on_a_full_disk_fails_in_one_line_and_leaves_no_run(tmp_path, capsys, small_fs):
    db_path = small_fs / "full.db"
    url = f"sqlite:///{db_path}"
    with frozen_in_write(tmp_path, url) as proc:
        fill(small_fs)  # the disk fills up while the backtest is being written
        os.kill(proc.pid, signal.SIGCONT)
        code = proc.wait(timeout=60)
        log = proc.log()
    assert code == 1, (code, log[-2000:])
    last = log.strip().splitlines()[-1]
    assert "disk is full" in last and "the backtest was not recorded" in last, log[-2000:]
    assert "Traceback" not in log
    (small_fs / "filler").unlink()
    assert runs_in(db_path) == []
    assert main(["report", "--db", url, "--source", "simulation", "--from", "2026-01-05", "--to", "2026-01-06"]) == 0
    assert "No simulation runs recorded anything" in capsys.readouterr().out


def test_an_incomplete_run_from_an_older_autoscaler_is_left_out_and_refused_by_run(tmp_path, capsys):
    """A ledger written before the one-transaction backtest may hold a simulation run that was
    started but never ended (and has no intervals): it is not reported as a 100% saving."""
    from tests.support.ledger_runs import T0, default_policy, record_bulk

    url = f"sqlite:///{tmp_path / 'old.db'}"
    with Ledger(url) as ledger:
        whole = record_bulk(ledger, hours=24)
        broken = ledger.start_run("simulation", default_policy(), at=T0 + 86400, label="interrupted")
    assert main(["report", "--db", url, "--run", str(broken)]) == 2
    err = capsys.readouterr().err
    assert f"run {broken} (simulation 'interrupted') was never completed" in err
    assert main(["report", "--db", url, "--source", "simulation", "--from", "2026-01-05", "--to", "2026-01-07",
                 "--format", "json"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert [r["runs"] for r in doc["rows"]] == [[whole], []]  # the second day has no complete run
    assert f"Left out: run {broken}" in out.err
    assert main(["report", "--db", url, "--source", "simulation", "--from", "2026-01-05", "--to", "2026-01-07"]) == 0
    text = capsys.readouterr().out
    assert f"Left out: run {broken} (simulation 'interrupted') was never completed" in text
    assert "100.0% of variable cost" not in text


# ------------------------------------------------------------------------- item 2: stopped power
def policy_with_actuator(tmp_path: Path, **actuator) -> Path:
    data = yaml.safe_load(POLICY.read_text())
    data["actuator"] = actuator
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def burst_trace(path: Path) -> Path:
    """8 hours: a busy first hour (about 1 request/s), then one every 2 minutes: the default policy
    drains groups in the quiet hours (seeded, so the same every run)."""
    import random

    r = random.Random(1)
    rows, t = ["timestamp_s,input_tokens,output_tokens"], 0.0
    while t < 8 * 3600:
        rows.append(f"{t:.1f},{r.randint(500, 3000)},{r.randint(50, 300)}")
        t += r.expovariate(1.0 if t < 3600 else 1 / 120)
    path.write_text("\n".join(rows) + "\n")
    return path


def node_hours_by_state(capsys, url: str) -> dict:
    assert main(["report", "--db", url, "--run", "1", "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)["totals"]


IDLE_CASES = [
    ({"kind": "advisory", "stopped_power_state": "idle"}, "idle"),
    ({"kind": "command", "start": ["start-node"], "stop": ["stop-node"], "status": ["status-node"]}, "idle"),
    ({"kind": "command", "start": ["s"], "stop": ["t"], "status": ["u"], "power_off": ["ipmitool", "off"],
      "power_status": ["ipmitool", "status"]}, "off"),
    ({"kind": "advisory"}, "off"),
]


@pytest.mark.parametrize("actuator, state", IDLE_CASES, ids=["explicit-idle", "command-default", "power-off",
                                                              "advisory-default"])
def test_a_backtest_charges_stopped_nodes_as_the_actuator_leaves_them(tmp_path, capsys, actuator, state):
    """A trace quiet enough for the default policy to drain groups; the stopped hours land in the
    actuator's power state and are charged at its watts (default policy: idle 45 W, off 3 W)."""
    policy = policy_with_actuator(tmp_path, **actuator)
    url = f"sqlite:///{tmp_path / 'b.db'}"
    p = subprocess.run(simulate_argv(url, trace=burst_trace(tmp_path / "burst.csv"), policy=policy),
                       capture_output=True, text=True, cwd=REPO, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    sim = json.loads(p.stdout)
    totals = node_hours_by_state(capsys, url)
    by_state = totals["node_hours_by_state"]
    stopped_h = sim["baseline_node_hours"] - sim["node_hours"]
    assert stopped_h > 10, sim  # the test needs stopped hours to mean anything (24.3 measured)
    other = "off" if state == "idle" else "idle"
    assert by_state[state] == pytest.approx(stopped_h, abs=0.001) and by_state[other] == 0
    assert by_state["active"] == pytest.approx(sim["node_hours"], abs=0.001)
    # energy: active x 240 W + stopped x (45 or 3) W, x PUE 1.3 / 1000
    watts = {"idle": 45, "off": 3}[state]
    assert totals["energy_kwh"] == pytest.approx((by_state["active"] * 240 + stopped_h * watts) * 1.3 / 1000, abs=0.002)



# ------------------------------------------------------------------- item 3: dated after today
def simulate_json(tmp_path: Path, url: str, trace: Path, *extra: str) -> dict:
    p = subprocess.run(simulate_argv(url, *extra, trace=trace), capture_output=True, text=True, cwd=REPO, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def azure_2099(path: Path) -> Path:
    """The Azure conversation trace's first 3,000 rows, shifted to 2099 (same day and time)."""
    lines = AZURE.read_text().splitlines()
    path.write_text("\n".join([lines[0]] + ["2099" + line[4:] for line in lines[1:3001]]) + "\n")
    return path


AZURE = REPO / "examples" / "traces" / "azure-2023-conv" / "AzureLLMInferenceTrace_conv.csv"


@pytest.mark.parametrize("case", ["start-at-2027", "azure-2099"])
def test_a_backtest_dated_after_today_is_reported(tmp_path, capsys, case):
    url = f"sqlite:///{tmp_path / 'plan.db'}"
    if case == "start-at-2027":
        sim = simulate_json(tmp_path, url, burst_trace(tmp_path / "burst.csv"), "--start-at", "2027-03-01T00:00:00Z")
        day, after = "2027-03-01", "2027-03-02"
    else:
        sim = simulate_json(tmp_path, url, azure_2099(tmp_path / "azure-2099.csv"))
        day, after = "2099-11-16", "2099-11-17"
    assert main(["report", "--db", url, "--run", "1", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"] and doc["rows"][0]["start"].startswith(day)
    assert doc["totals"]["node_hours"] == pytest.approx(sim["node_hours"], abs=0.0001)
    assert doc["totals"]["baseline_node_hours"] == pytest.approx(sim["baseline_node_hours"], abs=0.0001)
    assert doc["totals"]["coverage_pct"] == 100
    # by range too, to a far end: the rows stop where the data stops
    assert main(["report", "--db", url, "--source", "simulation", "--from", day, "--to", "9999-12-31",
                 "--format", "csv"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == [day, "TOTAL"]
    assert main(["report", "--db", url, "--source", "simulation", "--from", day, "--to", after]) == 0
    assert "the report is empty" not in capsys.readouterr().out


# ------------------------------------------------------------- item 4: a day reads the same anywhere
def test_a_day_reads_the_same_in_every_range_and_rows_add_up_to_the_cent(tmp_path, capsys):
    """14 always-on days (6.7392 variable, 21.6986 fixed each): the issue saw 2026-01-18 as 6.73 /
    21.69 / saved -0.01 in the 14-day report and 6.74 / 21.70 / 0.00 alone."""
    from autoscaler.ledger.store import NodeInterval
    from tests.support.ledger_runs import NODES, T0, default_policy

    url = f"sqlite:///{tmp_path / 'on.db'}"
    end = T0 + 14 * 86400
    with Ledger(url) as ledger:
        intervals = [iv for g, nodes in NODES.items() for iv in NodeInterval.for_group(nodes, g, "active", T0, end)]
        ledger.record_run("simulation", default_policy(), start=T0, end=end, label="always on", intervals=intervals)

    def rows(*args: str) -> dict[str, dict]:
        assert main(["report", "--db", url, "--source", "simulation", "--format", "json", *args]) == 0
        doc = json.loads(capsys.readouterr().out)
        return {r["start"][:10]: r for r in doc["rows"]} | {"TOTAL": doc["totals"]}

    keys = ("variable_cost", "fixed_cost", "total_cost", "baseline_variable_cost", "saving_variable", "energy_kwh")
    alone = rows("--from", "2026-01-18", "--to", "2026-01-19")["2026-01-18"]
    assert [alone[k] for k in keys] == [6.74, 21.7, 28.44, 6.74, 0, 44.928]
    fortnight = rows("--from", "2026-01-05", "--to", "2026-01-19")
    for day in ("2026-01-05", "2026-01-11", "2026-01-18"):
        assert [fortnight[day][k] for k in keys] == [alone[k] for k in keys], day
    assert [rows("--from", "2026-01-17", "--to", "2026-01-19")["2026-01-18"][k] for k in keys] == [alone[k] for k in keys]
    from decimal import Decimal

    for by in ("day", "week", "month"):
        got = rows("--from", "2026-01-05", "--to", "2026-01-19", "--by", by)
        total = got.pop("TOTAL")
        for k in keys:  # every column adds up to its total, to the cent, whatever the rows are
            assert sum(Decimal(str(r[k])) for r in got.values()) == Decimal(str(total[k])), (by, k)
        assert (total["variable_cost"], total["fixed_cost"], total["saving_variable"]) == (94.36, 303.8, 0), by


# ------------------------------------------------- item 6: which saving, which coverage, said in the output
def test_each_saving_and_each_coverage_says_what_it_is_a_share_of(tmp_path, capsys):
    import csv
    import io

    from autoscaler.demo.runner import summary_line

    url = f"sqlite:///{tmp_path / 'b.db'}"
    sim = simulate_json(tmp_path, url, burst_trace(tmp_path / "burst.csv"))
    assert main(["report", "--db", url, "--run", "1"]) == 0
    text = capsys.readouterr().out
    # the node-hours saving simulate printed, beside the money savings, and how they differ
    pct = f"{sim['savings_pct']:.1f}%"
    assert (f"Node-hours: {sim['node_hours']:,.2f} switched on of {sim['baseline_node_hours']:,.2f} always on, "
            f"{pct} fewer (the 'saving' simulate and demo print)") in text
    assert "% of variable cost" in text and "stopped nodes still draw idle or off power" in text
    assert ("Covered: on a row, the share of its whole day that runs recorded; on TOTAL, the share of the hours "
            "asked for") in text
    assert main(["report", "--db", url, "--run", "1", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out, newline="")))
    assert [(r["period"], r["coverage_of"]) for r in rows] == [("2026-01-05", "day"), ("TOTAL", "range")]
    assert float(rows[0]["coverage_pct"]) < 100 and rows[1]["coverage_pct"] == "100.00"  # 8 h of a day; all asked
    assert float(rows[1]["saving_pct_node_hours"]) == pytest.approx(sim["savings_pct"], abs=0.01)
    assert float(rows[1]["saving_pct_variable"]) < float(rows[1]["saving_pct_node_hours"])  # off nodes draw 3 W
    assert main(["report", "--db", url, "--run", "1", "--by", "week", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"][0]["coverage_of"] == "week" and doc["totals"]["coverage_of"] == "range"
    assert main(["report", "--db", url, "--run", "1", "--format", "html"]) == 0
    assert "fewer (the &#x27;saving&#x27; simulate and demo print)" in capsys.readouterr().out
    line = summary_line({"requests_sent": 116, "requests_failed": 0, "scale_ups": 2, "scale_downs": 2,
                         "node_hours": 0.2493, "baseline_node_hours": 0.2866, "savings_pct": 13.01})
    assert "(13.01% of node-hours saved; in money, the report above: 'Var %' of variable cost" in line


# ----------------------------------------------------------- also expected: a default range
def test_a_ledger_with_one_run_is_reported_without_a_range(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'one.db'}"
    sim = simulate_json(tmp_path, url, burst_trace(tmp_path / "burst.csv"))
    assert main(["report", "--db", url, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"] == "simulation" and doc["from"] == "2026-01-05T00:00:00Z"
    assert doc["totals"]["node_hours"] == pytest.approx(sim["node_hours"], abs=0.0001)
    assert main(["report", "--db", url]) == 0
    assert capsys.readouterr().out.startswith("Fleet cost 2026-01-05T00:00:00Z to 2026-01-05T07:57:")
    # --source that holds no run, a second run, or half a range: say what to give
    assert main(["report", "--db", url, "--source", "live"]) == 2
    assert "the ledger holds no live run to report by default" in capsys.readouterr().err
    simulate_json(tmp_path, url, burst_trace(tmp_path / "burst.csv"), "--start-at", "2026-02-02T00:00:00Z")
    assert main(["report", "--db", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the ledger holds 2 runs (1 (simulation" in err and "--run" in err
    assert main(["report", "--db", url, "--from", "2026-01-05"]) == 2
    assert "--from and --to go together" in capsys.readouterr().err
