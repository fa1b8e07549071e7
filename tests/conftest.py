"""Session hooks. The demo test takes about three minutes of mostly waiting (a two-minute load
phase, then the drains): its ``autoscaler demo`` process is started once when the session starts
(tests/support/demo_run.py) and runs beside the others; the test, moved to the end, collects its
result. It is stopped at the end of the session if it is still running (it stops everything it
started on SIGTERM)."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

from tests.support import demo_run

# A suite started as a background job of a shell without job control (``scripts/test.sh &`` from a
# script) inherits SIGINT ignored, and so would every process the tests start: the tests of Ctrl-C
# (the demo's, the backtest interrupted in its write) then fail for the shell's reason, not the
# code's. Python's own handler here: the processes the tests start get the default (an exec resets
# a handled signal, not an ignored one).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

DEMO_TEST = "tests/test_demo.py::test_the_demo_scales_up_drains_loses_nothing_and_leaves_nothing_behind"


def _runs_the_demo_test(config) -> bool:
    """Whether this session's selection includes the demo's test, judged from the command line (the
    xdist controller does not collect): no -k/-m, and a path that is or holds tests/test_demo.py."""
    if config.getoption("keyword") or config.getoption("markexpr"):
        return False
    demo = (Path(__file__).parent / "test_demo.py").resolve()
    for arg in config.args or ["tests"]:
        path = Path(arg.split("::")[0]).resolve()
        if path == demo and "::" not in arg or path in demo.parents:
            return True
    return False


def pytest_collection_modifyitems(session, config, items) -> None:
    # The demo's test runs last (in every test process alike, so xdist's split agrees): by then the
    # demo, started when the session began, has long finished beside the others.
    demo_items = [item for item in items if item.nodeid == DEMO_TEST]
    items[:] = [item for item in items if item.nodeid != DEMO_TEST] + demo_items


def pytest_unconfigure(config) -> None:
    folder = getattr(config, "stash_demo", None)
    if folder is not None:
        demo_run.stop(folder)
    cache = getattr(config, "stash_cache", None)
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)


def pytest_configure(config) -> None:
    # ``simulate --compare`` caches reference replays under $XDG_CACHE_HOME: the tests' runs use
    # a folder of their own (inherited by the commands they start), not the user's cache.
    config.stash_cache = tempfile.mkdtemp(prefix="autoscaler-test-cache-")  # (removed at the end: traces are MBs)
    os.environ["XDG_CACHE_HOME"] = config.stash_cache
    # The demo runs once per session, beside the tests (about three minutes of mostly waiting): the
    # xdist controller (or the only pytest process) starts it; the test processes inherit its folder.
    if not hasattr(config, "workerinput") and demo_run.ENV not in os.environ and _runs_the_demo_test(config):
        config.stash_demo = demo_run.start()
        os.environ[demo_run.ENV] = str(config.stash_demo)
