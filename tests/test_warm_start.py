"""The live warm start (docs/live.md, "Warm start"): a first start reads the fleet's recorded demand
from Prometheus and folds it into the core's memory, as the ticks would have.

- the fold is the ticks' own: the memory from ``fold_demand_history`` equals, field for field,
  the demand fields of the memory ``decide`` builds from the same demands at the same times;
- a real ``autoscaler run`` on a real Prometheus (Debian's 2.42) holding 24 h of backfilled
  gauges (TSDB blocks from ``promtool``, tests/support/prometheus.py) starts warm: the stored
  memory has slots and rises from before the run, with the recorded values; /status and the log
  say so; a second start with that memory does not read again;
- no history, an unreachable Prometheus or one that never answers: a warning, a cold start, and
  the run goes on (bounded by the budget).

Every process is stopped by PID (``Proc`` kills its process group) also when a test fails.
"""

from __future__ import annotations

import json
import math
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from core_helpers import T0, decide, fleet, make_policy, signals

from autoscaler.core.types import Memory
from autoscaler.core.warm import fold_demand_history, has_demand_history
from autoscaler.ledger.live import LiveLedger
from autoscaler.ledger.store import Ledger
from autoscaler.policy.loader import load_policy
from autoscaler.service.controller import stored_memory
from autoscaler.service.warmstart import WarmStart, history_range
from tests.support.live import write_policy
from tests.support.procs import PYTHON, Proc, free_port, wait_until
from tests.support.prometheus import Series, prepare

DEMAND_FIELDS = ("demand_samples", "demand_by_slot", "slot_now", "minute_now", "minute_max", "rise_log",
                 "rises_sorted", "seasonal_skill")


def daily(t: float) -> float:
    """A demand that rises and falls over the day: 2 to 12, busiest at noon UTC."""
    return round(7 - 5 * math.cos(2 * math.pi * (t % 86400) / 86400) + 2 * math.sin(t / 600), 3)


def test_the_fold_builds_the_memory_the_ticks_build():
    # 26 hours of 15 s ticks on a fixed fleet of three ready groups: g1 carries the demand (its
    # running up to 6, the rest queued), g2 and g3 report 0. decide() folds each tick's demand into
    # its memory; the fold must give the same trend window, slots, minutes, rises and skill.
    policy = make_policy(forecast={"enabled": True, "seasonal_days": 1})
    f = fleet("ready", "ready", "ready", since=T0 - 86400 * 3)
    ticked = Memory()
    samples = []
    for k in range(26 * 240):
        now = T0 + 15.0 * k
        d = daily(now)
        snap = signals(at=now, g1=(min(d, 6.0), max(0.0, d - 6.0), 0.1), g2=(0.0, 0.0, 0.0), g3=(0.0, 0.0, 0.0))
        _, ticked = decide(snap, f, policy, ticked, now)
        samples.append((now, d))
    folded = fold_demand_history(Memory(), policy, samples)
    for name in DEMAND_FIELDS:
        assert getattr(folded, name) == getattr(ticked, name), name
    assert len(folded.history_by_slot()) >= 24 * 12 and folded.seasonal_skill is not None and folded.rise_log
    assert has_demand_history(folded) and not has_demand_history(Memory(startup_durations_s=(600.0,)))


def test_the_range_read_covers_the_seasonal_days_or_the_recent_rises():
    week = make_policy(forecast={"enabled": True, "seasonal_days": 7})
    # The default 15 s tick, on the step's grid: b is a whole number of minutes, b + 7 is 7 s past it.
    b = 999_999_960.0
    assert history_range(week, b + 7) == (b - 7 * 86400, b, 15.0)
    none = make_policy(forecast={"enabled": True, "seasonal_days": 0}, scaling={"tick_interval_s": 120})
    # three hours, at most a minute a step, and two steps a core minute (60 s): 30 s
    assert history_range(none, b + 7) == (b - 3 * 3600, b, 30.0)
    # a compressed fleet (the demo: minute 2 s, ticks of 1 s): its 180 minutes of 2 s at 1 s
    demo = make_policy(forecast={"enabled": True, "seasonal_days": 0, "minute_s": 2, "trend_window_s": 10},
                       scaling={"tick_interval_s": 1})
    assert history_range(demo, b + 7) == (b + 7 - 360, b + 7, 1.0)


def test_a_prometheus_that_never_answers_gives_up_within_the_budget():
    # A socket that accepts connections and never answers: the warm start gives up after its budget
    # (1 s here; whole seconds, under a second more) and the memory stays as it was.
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(server.accept()[0]), daemon=True).start()
    try:
        policy = make_policy(forecast={"enabled": True, "seasonal_days": 1})
        t0 = time.monotonic()
        memory, info = WarmStart(f"http://127.0.0.1:{server.getsockname()[1]}", budget_s=1.0).apply(
            Memory(), policy, T0)
        assert time.monotonic() - t0 < 3.0
        assert info is None and memory == Memory()
    finally:
        for s in held:
            s.close()
        server.close()


# ------------------------------------------------------------------------------------ live
STEP_S = 60  # the recorded gauges' sample interval
HOLE_H = (10, 9)  # no samples at all from 10 h to 9 h before the end (Prometheus was down)


def recorded_demand(t: float, group: int) -> tuple[float, float]:
    """(running, queued) of group 1..3 at t: by the hour of day, so that a slot in the middle of
    an hour has one value throughout."""
    hour = int(t // 3600) % 24
    running = float((hour + group) % 5)
    queued = 1.0 if group == 1 and hour % 2 == 0 else 0.0
    return running, queued


def fleet_demand(t: float) -> float:
    return sum(sum(recorded_demand(t, g)) for g in (1, 2, 3))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A Prometheus holding 25 h of the three groups' gauges, up to a minute ago."""
    folder = tmp_path_factory.mktemp("warm")
    ports = [free_port() for _ in range(3)]
    end = (time.time() // STEP_S) * STEP_S - STEP_S
    times = [end - k * STEP_S for k in range(25 * 3600 // STEP_S, -1, -1)]
    times = [t for t in times if not end - HOLE_H[0] * 3600 < t < end - HOLE_H[1] * 3600]
    series = []
    for g, port in enumerate(ports, start=1):
        labels = {"instance": f"127.0.0.1:{port}", "job": "sglang", "model_name": "m"}
        series.append(Series("sglang:num_running_reqs", labels, [(t, recorded_demand(t, g)[0]) for t in times]))
        series.append(Series("sglang:num_queue_reqs", labels, [(t, recorded_demand(t, g)[1]) for t in times]))
    prom = prepare(folder / "prometheus", [], history=series)
    prom.start()
    prom.ports, prom.end = ports, end
    try:
        yield prom
    finally:
        prom.close()


def run_proc(tmp_path: Path, policy: Path, db: str, prometheus: str, name: str) -> tuple[Proc, str]:
    port = free_port()
    argv = [PYTHON, "-m", "autoscaler", "run", "--policy", str(policy), "--db", db, "--signals", "prometheus",
            "--prometheus", prometheus, "--listen", f"127.0.0.1:{port}",
            "--gateway", f"http://127.0.0.1:{free_port()}"]
    return Proc(argv, tmp_path / f"{name}.log"), f"http://127.0.0.1:{port}"


def first_decision(proc: Proc, url: str) -> dict:
    def decided():
        s = httpx.get(url + "/status", timeout=2).json()
        return s if s.get("leader") and s.get("last_decision") else None

    return wait_until(decided, 40, what="a first decision", proc=proc)


def stop(proc: Proc) -> None:
    proc.signal(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.log()[-2000:]


def warm_policy(path: Path, ports: list[int]) -> Path:
    # The demo policy (1 s ticks, advisory here) with one seasonal day and a real fleet's minute
    # (60 s, not the demo's compressed 2 s): a day is read at 15 s steps.
    return write_policy(path, ports=ports, actuator={"kind": "advisory"},
                        forecast={"enabled": True, "trend_window_s": 30, "seasonal_days": 1, "min_startup_samples": 3,
                                  "minute_s": 60})


def test_a_first_start_is_warm_and_a_second_start_keeps_its_memory(tmp_path, recorded):
    policy = warm_policy(tmp_path / "p.yaml", recorded.ports)
    db = f"sqlite:///{tmp_path}/l.db"
    before = time.time()
    proc, url = run_proc(tmp_path, policy, db, recorded.url, "first")
    with proc:
        status = first_decision(proc, url)
        warm = status["warm_start"]
        assert warm is not None and warm["source"] == "prometheus" and warm["url"] == recorded.url
        # A day back from the start, at 15 s steps: 5,761 steps, of which the hour without samples
        # (less the 5 minutes Prometheus's lookback fills) are gaps: 55 min = 220 steps, give or take one.
        assert warm["step_s"] == 15.0
        assert abs(warm["samples"] + warm["gaps"] - 5761) <= 1 and 215 <= warm["gaps"] <= 225
        assert warm["from"] < time.strftime("%Y-%m-%dT%H:%M", time.gmtime(before - 86400 + 120))
        log = proc.log()
        assert "warm start: read" in log and f"{warm['gaps']} of" in log
        stop(proc)
    # `autoscaler status` from the database says the same.
    done = subprocess.run([PYTHON, "-m", "autoscaler", "status", "--db", db, "--json"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["warm_start"] == warm
    done = subprocess.run([PYTHON, "-m", "autoscaler", "status", "--db", db], capture_output=True, text=True,
                          timeout=60)
    assert f"warm start  {warm['samples']:,} demand samples from prometheus" in done.stdout

    ledger = Ledger(db)
    try:
        memory = stored_memory(LiveLedger(ledger))
        slots = {int(k): v for k, v in memory["demand_by_slot"].items()}
        # 5-minute slots from a day before the run, each the recorded demand: e.g. 20 h before the
        # end, at 20 past the hour, the three groups' running + queued as recorded_demand says.
        for hours_back in (20, 12, 3):
            at = (recorded.end - hours_back * 3600) // 3600 * 3600 + 20 * 60
            assert slots[int(at // 300)] == fleet_demand(at), hours_back
        assert int((recorded.end - 9.5 * 3600) // 300) not in slots  # the hole has no slot
        assert min(slots) * 300 < before - 23 * 3600
        # The risk's recent rises: measured on minutes before the run started.
        assert memory["rise_log"] and memory["rise_log"][0][0] * 60 < before - 2 * 3600
    finally:
        ledger.close()

    proc, url = run_proc(tmp_path, policy, db, recorded.url, "second")
    with proc:
        status = first_decision(proc, url)
        assert status["warm_start"] is None
        log = proc.log()
        assert "warm start: not needed" in log and "warm start: read" not in log
        stop(proc)
    ledger = Ledger(db)
    try:
        kept = {int(k): v for k, v in stored_memory(LiveLedger(ledger))["demand_by_slot"].items()}
        at = (recorded.end - 20 * 3600) // 3600 * 3600 + 20 * 60
        assert kept[int(at // 300)] == fleet_demand(at)  # the memory was kept, not read again
    finally:
        ledger.close()


def test_no_history_or_no_prometheus_is_a_cold_start_and_the_run_goes_on(tmp_path, recorded):
    # Groups on ports the recorded Prometheus has no series for: it answers, with nothing.
    policy = warm_policy(tmp_path / "p.yaml", [free_port() for _ in range(3)])
    proc, url = run_proc(tmp_path, policy, f"sqlite:///{tmp_path}/a.db", recorded.url, "empty")
    with proc:
        status = first_decision(proc, url)
        assert status["warm_start"] is None
        assert "has no demand history of the fleet" in proc.log() and "starting cold" in proc.log()
        stop(proc)
    # Nothing listens at the Prometheus URL at all.
    nowhere = f"http://127.0.0.1:{free_port()}"
    proc, url = run_proc(tmp_path, policy, f"sqlite:///{tmp_path}/b.db", nowhere, "unreachable")
    with proc:
        status = first_decision(proc, url)
        assert status["warm_start"] is None
        assert "warm start: no history read" in proc.log()
        stop(proc)
    ledger = Ledger(f"sqlite:///{tmp_path}/b.db")
    try:
        assert not stored_memory(LiveLedger(ledger))["demand_by_slot"]  # cold
    finally:
        ledger.close()


def test_the_policy_of_the_live_test_reads_one_day(tmp_path):
    policy = load_policy(str(warm_policy(tmp_path / "p.yaml", [1, 2, 3]))).policy
    start, end, step = history_range(policy, 999_999_960.0)
    assert (end - start, step) == (86400, 15.0)
