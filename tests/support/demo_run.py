"""``autoscaler demo --json`` as a background run for the demo's test: started once per session (by the
xdist controller, or the only pytest process, so three test processes do not run three demos), its
folder passed to the test process that runs the test in ``AUTOSCALER_TEST_DEMO``; its exit code lands
in ``rc`` beside its ``stdout`` and ``stderr``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEMO_MINUTES = "2"
ENV = "AUTOSCALER_TEST_DEMO"


def start() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="demo-test-"))
    # sh writes the demo's exit code when it ends; the demo's own process group is the shell's.
    proc = subprocess.Popen(["/bin/sh", "-c", 'exec 1>stdout 2>stderr; "$@"; echo $? > rc', "sh", sys.executable,
                             "-m", "autoscaler", "demo", "--minutes", DEMO_MINUTES, "--json",
                             "--db", f"sqlite:///{folder / 'demo.db'}"], cwd=folder, start_new_session=True)
    (folder / "pid").write_text(str(proc.pid))
    return folder


def wait(folder: Path, timeout_s: float) -> int:
    """The demo's exit code, once it has ended (AssertionError after ``timeout_s``)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        rc = folder / "rc"
        if rc.exists() and rc.read_text().strip():
            return int(rc.read_text())
        time.sleep(0.5)
    raise AssertionError(f"the demo did not end within {timeout_s:g} s:\n{(folder / 'stderr').read_text()[-3000:]}")


def _alive(pid: int) -> bool:
    """Whether any process of the group is left (the shell, this process's child, is reaped first)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop(folder: Path) -> None:
    """SIGTERM the demo's process group (the demo stops what it started), SIGKILL after 60 s."""
    pid = int((folder / "pid").read_text())
    if not _alive(pid):
        return
    os.killpg(pid, signal.SIGTERM)
    end = time.monotonic() + 60
    while time.monotonic() < end and _alive(pid):
        time.sleep(0.2)
    if _alive(pid):
        os.killpg(pid, signal.SIGKILL)
        time.sleep(0.2)
        _alive(pid)
