"""The bound on one site command holds whatever its children and the controller do (issue 34, items 2
and 7), with real processes:

- a command that leaves a background process holding its output pipe (``nohup worker &``, what a
  start script does) returns as soon as the command itself exits, not when the pipe closes;
- a command that ignores SIGTERM still dies at its timeout plus the kill grace;
- a controller frozen (real SIGSTOP) while its command runs: the command still dies at its
  timeout, because coreutils ``timeout`` in the command's own session carries the deadline.

Every process a test starts is killed by its pid at the end, also on failure.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from autoscaler.actuators.base import KILL_GRACE_S, run_bounded
from tests.support.fake_site import alive
from tests.support.postgres import pg_server, pg_url  # noqa: F401  (fixtures)
from tests.support.procs import PYTHON, Proc, wait_until


def _kill(*pids: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_background_child_holding_the_pipe_does_not_hold_the_command(tmp_path):
    pid_file = tmp_path / "bg.pid"
    # The case: rc 0 at once, a backgrounded child that inherits stdout and lives 25 s.
    argv = ["sh", "-c", f"sleep 25 & echo $! > {pid_file}; echo launched"]
    t0 = time.monotonic()
    try:
        out = run_bounded(argv, timeout_s=5, output_limit_bytes=1024)
        took = time.monotonic() - t0
        assert out.exit_code == 0 and out.output_tail == "launched\n", out
        assert took < 3.0, f"run_bounded waited {took:.1f} s on a pipe held by a background child"
        # The background child was not killed: a start script's worker must outlive the script.
        assert alive(int(pid_file.read_text()))
    finally:
        if pid_file.exists():
            _kill(int(pid_file.read_text()))


def test_a_command_ignoring_sigterm_dies_at_its_timeout_plus_the_grace(tmp_path):
    pid_file = tmp_path / "child.pid"
    argv = ["sh", "-c", f"trap '' TERM; sleep 30 & echo $! > {pid_file}; wait"]
    t0 = time.monotonic()
    try:
        out = run_bounded(argv, timeout_s=1, output_limit_bytes=1024)
        took = time.monotonic() - t0
        assert out.timed_out and out.exit_code is None, out
        assert took < 1 + KILL_GRACE_S + 3.0, took
        wait_until(lambda: not alive(int(pid_file.read_text())), 5, what="the group's sleep killed")
    finally:
        if pid_file.exists():
            _kill(int(pid_file.read_text()))


DRIVER = """
import sys
from autoscaler.actuators.base import run_bounded
print(run_bounded(["sh", "-c", "echo $$ > " + sys.argv[1] + "; exec sleep 60"], timeout_s=2,
                  output_limit_bytes=1024), flush=True)
"""


def test_a_frozen_controller_does_not_extend_its_command(tmp_path):
    pid_file = tmp_path / "cmd.pid"
    driver = Proc([PYTHON, "-c", DRIVER, str(pid_file)], tmp_path / "driver.log")
    cmd_pid = None
    try:
        wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), 20, what="the command started")
        cmd_pid = int(pid_file.read_text())
        started = time.monotonic()
        os.kill(driver.pid, signal.SIGSTOP)  # the controller freezes 0-1 s into a 2 s command
        # The command must die by its own deadline (2 s + the kill grace), with the parent frozen.
        wait_until(lambda: not alive(cmd_pid), 2 + KILL_GRACE_S + 6, what="the command dead while its parent is frozen")
        assert time.monotonic() - started < 2 + KILL_GRACE_S + 6
        assert Path(f"/proc/{driver.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"  # still frozen
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(driver.pid, signal.SIGCONT)
        driver.kill()
        if cmd_pid:
            _kill(cmd_pid)


def test_a_leader_whose_tick_stops_deciding_stops_leading_and_exits(tmp_path):
    # Issue 34 item 2: a tick wedged for good (here: a fault point that never returns, between a
    # start's intent and its act) kept the lease renewed by its own thread: leader=True, /healthz 503,
    # no decision, no takeover. Now the tick watchdog stops renewing and the process exits 1 (its
    # supervisor restarts it; on SQLite the kernel releases the flock at once).
    from tests.support.procs import gateway
    from tests.test_fenced_acts import command_policy, fleet_folder, kill_workers, run_proc, status

    folder = fleet_folder(tmp_path)
    policy = command_policy(tmp_path / "p.yaml", folder, timeout_s=2, lifecycle={"health_timeout_s": 3})
    bound = 34.0  # service.watchdog.bound_s: max(3 x 1 s, 2 + 2 s, 3 s) + 30 s
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    try:
        with gateway(tmp_path) as gw:
            proc, url = run_proc(tmp_path, policy, db, gw.url, name="wedged",
                                 env={"AUTOSCALER_FAULTS": "hang:before_act:start"})
            with proc:
                wait_until(lambda: status(url)["groups"]["g1"]["phase"] == "starting", 60, what="g1's start marked",
                           proc=proc, interval_s=0.5)
                wedged_at = time.monotonic()
                # The lease thread stops renewing after the bound; the shutdown's budget (25 s) follows.
                rc = proc.wait(bound + 25 + 30)
                took = time.monotonic() - wedged_at
                assert rc == 1, (rc, proc.log()[-2000:])
                assert "the tick made no progress" in proc.log()
                assert took > bound - 5, took  # not before the bound: a slow tick is not a stalled one
    finally:
        kill_workers(folder)


def test_the_service_tells_systemd_it_is_ready_and_feeds_its_watchdog(tmp_path):
    # deploy/systemd/autoscaler.service: Type=notify, WatchdogSec. A real AF_UNIX datagram socket
    # stands in for systemd's NOTIFY_SOCKET; `autoscaler run` (advisory, SQLite) must send READY=1
    # and then WATCHDOG=1 every lease retry (2 s) while its tick runs.
    import socket

    from tests.support.live import write_policy
    from tests.support.procs import free_port

    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(1.0)
    policy = write_policy(tmp_path / "p.yaml", actuator={"kind": "advisory"})
    argv = [PYTHON, "-m", "autoscaler", "run", "--policy", str(policy), "--db", f"sqlite:///{tmp_path}/l.db",
            "--signals", "direct", "--listen", f"127.0.0.1:{free_port()}",
            "--gateway", f"http://127.0.0.1:{free_port()}"]
    got: list[str] = []
    try:
        with Proc(argv, tmp_path / "run.log", env={"NOTIFY_SOCKET": str(sock_path)}) as proc:
            end = time.monotonic() + 60
            while time.monotonic() < end and got.count("WATCHDOG=1") < 2:
                try:
                    got.append(sock.recv(256).decode())
                except TimeoutError:
                    assert proc.alive(), proc.log()[-2000:]
    finally:
        sock.close()
    assert got and got[0] == "READY=1", got
    assert got.count("WATCHDOG=1") >= 2, got


def test_a_frozen_leaders_start_dies_at_its_timeout_and_the_new_leader_acts_only_after(tmp_path, pg_url):  # noqa: F811
    # Issue 34 item 7, as reported: SIGSTOP 2 s into a start with timeout_s 10. Before, the start ran
    # as long as the script wanted (70 s there, 60 s here), because its timeout was enforced by the
    # frozen parent, and the new leader's acts on g1 overlapped it.
    from sqlalchemy import create_engine, text

    from tests.support.fleet_script import calls
    from tests.support.procs import gateway
    from tests.test_fenced_acts import command_policy, fleet_folder, kill_workers, run_proc, status

    folder = fleet_folder(tmp_path, start_sleep_s=60)
    policy = command_policy(tmp_path / "p.yaml", folder, timeout_s=10, lifecycle={"health_deadline_s": 120})
    try:
        with gateway(tmp_path) as gw:
            a, url_a = run_proc(tmp_path, policy, pg_url, gw.url, name="a")
            with a:
                wait_until(lambda: any(c["call"] == "start" and c["group"] == "g1" for c in calls(folder)), 60,
                           what="a's start of g1 runs", proc=a)
                time.sleep(2)
                a.signal(signal.SIGSTOP)
                b, url_b = run_proc(tmp_path, policy, pg_url, gw.url, name="b")
                with b:
                    wait_until(lambda: status(url_b)["leader"], 40, what="b takes over", proc=b)
                    wait_until(lambda: status(url_b)["groups"]["g1"]["phase"] == "ready", 120,
                               what="g1 ready under b", proc=b, interval_s=0.5)
                a.signal(signal.SIGCONT)
            starts = [c for c in calls(folder) if c["call"] == "start" and c["instance"] == "a"]
            assert starts
            for c in starts:  # killed by its own deadline: 10 s, SIGTERM; the script dies with it
                assert c["end"] is None and c["last"] - c["begin"] < 10 + KILL_GRACE_S + 2, c
            engine = create_engine(pg_url)
            try:
                with engine.connect() as conn:
                    b_first = conn.execute(text("SELECT MIN(intent_at) FROM actions WHERE group_name = 'g1' "
                                                "AND epoch = 2")).scalar()
            finally:
                engine.dispose()
            assert b_first is not None and b_first.timestamp() > max(c["last"] for c in starts)
    finally:
        kill_workers(folder)


def test_a_start_script_leaving_a_child_on_its_output_never_holds_the_tick(tmp_path):
    # Issue 34 item 2, in a controller: the start script returns rc 0 at once but leaves a child
    # holding its stdout for 60 s. Before, the tick waited for that pipe: no decision, /healthz 503,
    # g1 never registered for a minute. Now g1 is ready within seconds and the ticks go on.
    import httpx

    from tests.support.procs import gateway
    from tests.test_fenced_acts import command_policy, fleet_folder, kill_workers, run_proc, status

    folder = fleet_folder(tmp_path, bg_holds_pipe_s=60)
    policy = command_policy(tmp_path / "p.yaml", folder, timeout_s=60)
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    try:
        with gateway(tmp_path) as gw:
            proc, url = run_proc(tmp_path, policy, db, gw.url, name="a")
            with proc:
                wait_until(lambda: status(url)["groups"]["g1"]["phase"] in ("starting", "ready"), 60,
                           what="g1 started", proc=proc, interval_s=0.25)
                t0 = time.monotonic()
                wait_until(lambda: status(url)["groups"]["g1"]["phase"] == "ready", 30,
                           what="g1 ready while its start's child still holds the pipe", proc=proc, interval_s=0.25)
                assert time.monotonic() - t0 < 30
                assert httpx.get(url + "/healthz", timeout=2).status_code == 200
                assert any("bg_pid" in line for line in (folder / "calls.jsonl").read_text().splitlines())
    finally:
        kill_workers(folder)
