"""Session hooks. The demo test takes about four minutes of mostly waiting (a two-minute load
phase, then the drains): its ``autoscaler demo`` process is started as soon as the tests are
collected and runs beside the others; the test, moved to the end, collects its result. It is killed at the end of
the session if it is still running (it stops everything it started on SIGTERM)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

DEMO_TEST = "tests/test_demo.py::test_the_demo_scales_up_drains_loses_nothing_and_leaves_nothing_behind"
DEMO_MINUTES = "2"


def pytest_collection_modifyitems(session, config, items) -> None:
    demo_items = [item for item in items if item.nodeid == DEMO_TEST]
    if not demo_items:
        return
    # The demo's test runs last, by which time the demo has long finished beside the others.
    items[:] = [item for item in items if item.nodeid != DEMO_TEST] + demo_items
    folder = Path(tempfile.mkdtemp(prefix="demo-test-"))
    db = folder / "demo.db"
    out, err = open(folder / "stdout", "w"), open(folder / "stderr", "w")
    proc = subprocess.Popen([sys.executable, "-m", "autoscaler", "demo", "--minutes", DEMO_MINUTES, "--json",
                             "--db", f"sqlite:///{db}"], stdout=out, stderr=err, cwd=folder,
                            start_new_session=True)
    config.stash_demo = {"proc": proc, "folder": folder, "db": db, "files": (out, err)}


def pytest_unconfigure(config) -> None:
    demo = getattr(config, "stash_demo", None)
    if demo is None:
        return
    proc = demo["proc"]
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # the demo stops what it started, then exits
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for f in demo["files"]:
        f.close()


def pytest_configure(config) -> None:
    # ``simulate --compare`` caches reference replays under $XDG_CACHE_HOME: the tests' runs use
    # a folder of their own (inherited by the commands they start), not the user's cache.
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="autoscaler-test-cache-")
