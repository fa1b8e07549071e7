"""``autoscaler run`` under faults that used to leave it looking healthy (issue 35 #7-#9): a ledger
on a full filesystem (a real tmpfs, mounted for the test), a wall clock stepped forward an hour and
back (the process's own clock source, stepped by a signal), and SIGHUP.

Signals come straight from three emulated workers (``--signals direct``), the actuator is advisory.
Every process and the mount are released by the test that made them, also when it fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support.fullfs import fill, small_tmpfs
from tests.support.procs import PYTHON, REPO, Proc, free_port, wait_until
from tests.test_service import advisory_policy, metric, workers  # noqa: F401  (workers: the fixture)


def run_argv(policy: Path, db: str, listen_port: int) -> list[str]:
    return ["run", "--policy", str(policy), "--db", db, "--signals", "direct",
            "--listen", f"127.0.0.1:{listen_port}", "--gateway", f"http://127.0.0.1:{free_port()}"]


def healthz(url: str) -> tuple[int, str]:
    r = httpx.get(url + "/healthz", timeout=2)
    return r.status_code, r.text


# ------------------------------------------------------------------------------ 7: a full disk
def test_a_ledger_on_a_full_disk_makes_healthz_503_counts_failures_and_stops_the_decision_clock(tmp_path, workers):
    """Before: every tick logged 'decision not recorded, no action taken', yet /healthz answered
    200, autoscaler_last_decision_timestamp_seconds kept advancing (AutoscalerNoDecision never
    fired) and no metric counted the failures."""
    with small_tmpfs(tmp_path / "ledger") as mnt:
        policy = advisory_policy(tmp_path / "p.yaml", workers)  # demo.yaml: a tick every second
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with Proc([PYTHON, "-m", "autoscaler", *run_argv(policy, f"sqlite:///{mnt}/l.db", port)],
                  tmp_path / "run.log") as proc:
            wait_until(lambda: metric(url, "autoscaler_last_decision_timestamp_seconds"), 30, what="a decision",
                       proc=proc)
            assert healthz(url)[0] == 200
            filler = fill(mnt)
            # Within a few ticks a decision no longer fits: /healthz says so.
            code, body = wait_until(lambda: (h := healthz(url))[0] == 503 and h, 30, what="healthz 503", proc=proc)
            assert "not recorded" in body, body
            assert metric(url, "autoscaler_decisions_unrecorded_total") >= 1
            stalled = metric(url, "autoscaler_last_decision_timestamp_seconds")
            time.sleep(4)  # four more ticks, none recorded
            assert metric(url, "autoscaler_last_decision_timestamp_seconds") == stalled
            assert metric(url, "autoscaler_decisions_unrecorded_total") >= 4
            assert healthz(url)[0] == 503
            assert "decision not recorded, no action taken" in proc.log()
            # Space again: decisions are recorded, the clock moves, health returns.
            filler.unlink()
            wait_until(lambda: healthz(url)[0] == 200, 30, what="healthz 200 again", proc=proc)
            wait_until(lambda: metric(url, "autoscaler_last_decision_timestamp_seconds") > stalled, 10,
                       what="decisions recorded again", proc=proc)
            proc.terminate()
            assert proc.wait(30) == 0


# ------------------------------------------------------------------------------ 8: a clock step
# ``autoscaler run`` in a process whose wall clock is stepped by signals: SIGUSR1 puts it an hour
# ahead, SIGUSR2 back. Everything that reads the time of day in that process follows it (time.time,
# and datetime.now in the scheduler's and the runner's modules, which is how APScheduler read it),
# as after an NTP step or an operator's `date -s`; time.monotonic does not move, as on a real host.
STEPPED_RUN = r"""
import datetime as _dt, signal, sys, time

_real_time = time.time
_offset = [0.0]
time.time = lambda: _real_time() + _offset[0]


class _SteppedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return _dt.datetime.fromtimestamp(time.time(), tz)

    @classmethod
    def utcnow(cls):
        return _dt.datetime.fromtimestamp(time.time(), _dt.timezone.utc).replace(tzinfo=None)


def _step(seconds):
    def handler(_signum, _frame):
        _offset[0] = seconds
        print(f"CLOCK STEPPED to {seconds:+.0f} s", file=sys.stderr, flush=True)
    return handler


signal.signal(signal.SIGUSR1, _step(3600.0))
signal.signal(signal.SIGUSR2, _step(0.0))
import importlib
for name in ("apscheduler.schedulers.base", "apscheduler.triggers.interval", "apscheduler.util",
             "autoscaler.service.runner", "autoscaler.service.schedule"):
    try:
        module = importlib.import_module(name)
    except ImportError:
        continue
    if getattr(module, "datetime", None) is _dt.datetime:
        module.datetime = _SteppedDatetime
from autoscaler.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_wall_clock_stepped_forward_and_back_delays_no_tick(tmp_path, workers):
    """Before: the scheduler booked the next tick on the wall clock; after a step forward an hour
    and back, no tick ran for over 100 s while /healthz answered 200 (its age came from the wall
    clock too). Now ticks go on every second and health follows the monotonic clock."""
    policy = advisory_policy(tmp_path / "p.yaml", workers)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    script = tmp_path / "stepped_run.py"
    script.write_text(STEPPED_RUN)
    argv = [PYTHON, str(script), *run_argv(policy, f"sqlite:///{tmp_path}/l.db", port)]
    with Proc(argv, tmp_path / "run.log", env={"PYTHONPATH": str(REPO)}) as proc:

        def ticks() -> float:
            """Decisions taken and recorded (every tick decides, holds included); a tick that
            fails is counted by the tick histogram, not here."""
            text = httpx.get(url + "/metrics", timeout=2).text
            return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                       if line.startswith("autoscaler_decisions_total{"))

        wait_until(lambda: ticks() >= 2, 30, what="ticking", proc=proc)
        proc.signal(signal.SIGUSR1)  # an hour ahead
        wait_until(lambda: "CLOCK STEPPED to +3600" in proc.log(), 5, what="stepped forward", proc=proc)
        before = ticks()
        wait_until(lambda: ticks() >= before + 2, 15, what="ticks after the step forward", proc=proc)
        proc.signal(signal.SIGUSR2)  # and back
        wait_until(lambda: "CLOCK STEPPED to +0" in proc.log(), 5, what="stepped back", proc=proc)
        after = ticks()
        # The tick interval is 1 s: three decisions within 15 s, not one an hour later.
        wait_until(lambda: ticks() >= after + 3, 15, what="ticks after the step back", proc=proc)
        assert healthz(url)[0] == 200
        assert "tick failed" not in proc.log() and "Traceback" not in proc.log(), proc.log()[-3000:]
        proc.terminate()
        assert proc.wait(30) == 0


def test_healthz_ages_ticks_on_the_monotonic_clock(tmp_path, workers):
    """The other half of #8: a stalled tick loop is seen even when the wall clock went back (the
    last tick's wall time then lies in the future and its age came out negative: 'ok')."""
    from autoscaler.policy.loader import load_policy
    from autoscaler.service.runner import Service
    from autoscaler.settings import load_settings

    policy = advisory_policy(tmp_path / "p.yaml", workers)
    settings = load_settings(db=f"sqlite:///{tmp_path}/l.db")
    wall = [time.time()]
    service = Service(settings, load_policy(policy), signals_mode="direct", clock=lambda: wall[0])
    try:
        service.last_tick_at = wall[0] + 3600  # a tick an hour "ahead", then the clock went back
        service.last_tick_mono = time.monotonic() - 60  # ... 60 s ago by the monotonic clock
        ok, why = service.healthy()
        assert not ok and "60 s old" in why, why
        service.last_tick_mono = time.monotonic()
        assert service.healthy() == (True, "ok")
    finally:
        service.ledger.close()


# ------------------------------------------------------------------------------ 9: SIGHUP
def test_sighup_rereads_the_policy_and_keeps_running(tmp_path, workers):
    """Before: SIGHUP killed `autoscaler run` silently (no log line, the run left open). Now it
    re-reads the policy file, even an edit that kept the file's size and mtime (which the watch
    alone does not see), and goes on; SIGTERM still ends it with exit 0."""
    policy = advisory_policy(tmp_path / "p.yaml", workers)
    db = f"sqlite:///{tmp_path}/l.db"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with Proc([PYTHON, "-m", "autoscaler", *run_argv(policy, db, port)], tmp_path / "run.log") as proc:
        first = wait_until(lambda: httpx.get(url + "/status", timeout=2).json()["last_decision"] and
                           httpx.get(url + "/status", timeout=2).json()["policy"]["hash"], 30, what="running", proc=proc)
        data = yaml.safe_load(policy.read_text())
        old_text = policy.read_text()
        st = os.stat(policy)
        data["scaling"]["scale_down"]["stabilization_s"] = 13  # demo.yaml's 15: two digits either way
        new_text = yaml.safe_dump(data, sort_keys=False)
        assert len(new_text) == len(old_text)  # same size ...
        policy.write_text(new_text)
        os.utime(policy, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... and the same mtime: the watch sees nothing
        time.sleep(3)  # more than the watch's 2 s
        assert httpx.get(url + "/status", timeout=2).json()["policy"]["hash"] == first
        proc.signal(signal.SIGHUP)
        wait_until(lambda: httpx.get(url + "/status", timeout=2).json()["policy"]["hash"] != first, 10,
                   what="reloaded on SIGHUP", proc=proc)
        assert proc.alive() and "SIGHUP: re-reading the policy file" in proc.log()
        assert healthz(url)[0] == 200
        proc.terminate()
        assert proc.wait(30) == 0
    from autoscaler.ledger.store import Ledger

    ledger = Ledger(db)
    try:
        assert ledger.runs(source="advisory")[-1].ended_at is not None
    finally:
        ledger.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


# ------------------------------------------------------------------------------ 10: advisory, a group off
@pytest.mark.parametrize("source", ["prometheus", "direct"])
def test_advisory_with_a_group_off_in_the_real_fleet_decides(tmp_path, workers, source):
    """Before: advisory mode with one real group off returned ``signal_unavailable`` every tick
    (the shadow fleet starts with every group ready, so the off group's absent series were a
    problem). A real group with no series at all (Prometheus: its target is down; direct: its
    worker refuses connections) is off in the real fleet: demand from it is 0, not unknown."""
    from autoscaler.adapters.prometheus import read_signals
    from autoscaler.ledger.store import Ledger
    from autoscaler.policy.loader import load_policy
    from tests.support.prometheus import running_prometheus

    off_port = free_port()  # g3's worker: nothing listens
    policy = write_policy_advisory(tmp_path / "p.yaml", [workers[0].port, workers[1].port, off_port])
    db = f"sqlite:///{tmp_path}/l.db"
    argv = [PYTHON, "-m", "autoscaler", "run", "--policy", str(policy), "--db", db, "--once",
            "--gateway", f"http://127.0.0.1:{free_port()}"]
    with contextlib.ExitStack() as stack:
        if source == "prometheus":
            prom = stack.enter_context(running_prometheus(
                [f"127.0.0.1:{p}" for p in (workers[0].port, workers[1].port, off_port)], tmp_path / "prom"))
            loaded = load_policy(policy).policy
            # the two live groups' series (rates need two scrapes), so only g3 is missing
            wait_until(lambda: not read_signals(loaded, prom.url, expected_groups=["g1", "g2"]).problems, 30,
                       what="g1 and g2 fully scraped")
            argv += ["--prometheus", prom.url]
        else:
            argv += ["--signals", "direct"]
        p = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    ledger = Ledger(db)
    try:
        (decision,) = ledger.decisions(ledger.runs(source="advisory")[-1].id)
    finally:
        ledger.close()
    assert decision.reason != "signal_unavailable", (decision.reason, decision.detail)
    # g3's absence is no problem; the demand is the two live workers' (idle: 0 running)
    assert "demand 0" in decision.detail, decision.detail  # known, not unknown


def write_policy_advisory(path: Path, ports: list[int]) -> Path:
    from tests.support.live import write_policy

    return write_policy(path, ports=ports, actuator={"kind": "advisory"})


def test_a_fleet_silent_everywhere_is_still_a_problem(tmp_path):
    """The other side of #10: when no worker answers, advisory has nothing to decide on."""
    from autoscaler.adapters.direct_signals import DirectSignals
    from autoscaler.policy.loader import load_policy

    policy = load_policy(write_policy_advisory(tmp_path / "p.yaml", [free_port() for _ in range(3)])).policy
    source = DirectSignals(policy)
    try:
        snap = source.read(expected_groups=["g1", "g2", "g3"], silent_is_off=True)
    finally:
        source.close()
    assert {p.group for p in snap.problems} == {"g1", "g2", "g3"} and snap.fleet.running is None
