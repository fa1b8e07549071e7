"""Fault points for crash tests of the live side (never set in production).

``AUTOSCALER_FAULTS`` holds comma-separated points, each ``ACTION:WHERE``::

    AUTOSCALER_FAULTS=kill:after_mark:starting     # SIGKILL itself right after the starting mark commits
    AUTOSCALER_FAULTS=kill:after_act:start         # ... after the start command returned, before its result
    AUTOSCALER_FAULTS=stop:before_act:start        # SIGSTOP itself between the start's intent and its act
    AUTOSCALER_FAULTS=hang:before_act:start        # this thread (the tick) never returns from there

``kill`` is a real SIGKILL of this process (nothing runs after it: no finally, no atexit);
``hang`` blocks the calling thread for good; ``stop`` a real SIGSTOP (every thread freezes until a SIGCONT, as in a long GC pause or a
frozen VM). A point fires once per process. The executor calls :func:`fault_point` at each
named place; the names are listed in ``docs/live.md`` ("Crash tests").
"""

from __future__ import annotations

import os
import signal
import time

ENV = "AUTOSCALER_FAULTS"
_fired: set[str] = set()


def fault_point(where: str) -> None:
    """Fire the fault configured for ``where`` (e.g. ``after_mark:starting``), if any."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    for item in spec.split(","):
        action, _, point = item.strip().partition(":")
        if point != where or item in _fired:
            continue
        _fired.add(item)
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "hang":
            # A call that never returns (a wedged driver, a deadlock): the other threads run on.
            while True:
                time.sleep(3600)
        elif action == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
            # The group stop reaches every thread a moment after kill() returns: wait here for it,
            # so this thread freezes at this point, not a few statements further on.
            time.sleep(0.2)
