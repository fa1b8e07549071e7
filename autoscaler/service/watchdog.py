"""The tick watchdog: a leader that stops deciding stops leading.

The lease is renewed by a thread of its own, so a tick wedged for ever (a call that never returns)
would keep renewing it and block every standby. The tick reports progress (``beat``) when it
begins, before and while every act (a running command's abort poll, every 0.1 s) and at every
group it settles; the lease thread asks ``stalled()`` before each renewal. A tick that made no
progress for ``bound_s(policy)`` has stalled: the instance stops renewing and leading (the lease
expires, a standby takes over) and exits 1, so that its supervisor restarts it.

``sd_notify`` speaks systemd's notification protocol (``READY=1``, ``WATCHDOG=1``) when the
service runs under ``Type=notify`` with ``WatchdogSec=`` (deploy/systemd/autoscaler.service): the
lease thread sends ``WATCHDOG=1`` only while the tick is not stalled, so systemd restarts a
process whose threads are all stuck too. Without ``NOTIFY_SOCKET`` it does nothing.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time

from autoscaler.actuators.base import KILL_GRACE_S
from autoscaler.policy.model import Policy

MARGIN_S = 30.0  # over the longest legitimate wait between two beats


def bound_s(policy: Policy) -> float:
    """How long a tick may go without progress: longer than any one wait inside it. Between two
    beats a tick waits at most for one command without an abort poll (a status: ``timeout_s`` plus
    the kill grace), one /health probe (``health_timeout_s``) or a late tick (three intervals);
    e.g. 60 + 2 + 30 = 92 s for the defaults."""
    timeout = float(getattr(policy.actuator, "timeout_s", 60.0)) + KILL_GRACE_S
    return max(3 * policy.scaling.tick_interval_s, timeout, policy.lifecycle.health_timeout_s) + MARGIN_S


class TickWatchdog:
    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._began: float | None = None  # the tick in progress began (None: no tick running)
        self._beat = 0.0

    def begin(self) -> None:
        with self._lock:
            self._began = self._beat = self._clock()

    def end(self) -> None:
        with self._lock:
            self._began = None

    def beat(self) -> None:
        self._beat = self._clock()  # one float store: no lock needed, called every 0.1 s during acts

    def stalled(self, bound: float) -> float | None:
        """Seconds without progress of the tick in progress, when over ``bound`` (else None)."""
        with self._lock:
            if self._began is None:
                return None
            quiet = self._clock() - max(self._began, self._beat)
        return quiet if quiet > bound else None


def sd_notify(state: str) -> bool:
    """Send ``state`` (``READY=1``, ``WATCHDOG=1``, ``STOPPING=1``) to systemd; False when not
    under systemd's notify socket or the send failed."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # an abstract socket
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(state.encode())
        return True
    return False
