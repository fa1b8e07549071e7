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
from tests.support.procs import PYTHON, Proc, wait_until


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


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
        assert _alive(int(pid_file.read_text()))
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
        wait_until(lambda: not _alive(int(pid_file.read_text())), 5, what="the group's sleep killed")
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
        wait_until(lambda: not _alive(cmd_pid), 2 + KILL_GRACE_S + 6, what="the command dead while its parent is frozen")
        assert time.monotonic() - started < 2 + KILL_GRACE_S + 6
        assert Path(f"/proc/{driver.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"  # still frozen
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(driver.pid, signal.SIGCONT)
        driver.kill()
        if cmd_pid:
            _kill(cmd_pid)
