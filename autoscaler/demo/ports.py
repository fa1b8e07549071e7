"""Free ports for child processes (the demo's gateway, workers, controller and Prometheus; the tests').

A port from ``bind(("127.0.0.1", 0))`` is one the kernel also hands any outgoing connection as
its local port, so between the pick and the child's own bind (seconds on a loaded machine, minutes
for a demo worker that starts when the fleet scales up) a client elsewhere on the machine can take
it, and the child fails with "Address already in use" (seen in CI on a restarted controller).
``free_port`` picks below the ephemeral range instead, where only another explicit pick can land,
and claims each port for ``HOLD_S`` (an empty file named after the port, its modification time the
claim's, in a folder of the user's that every process picking this way shares; the check and the
claim are made under one lock on that folder), so that no such process is given it again while
its child may still be starting.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import random
import socket
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

CLAIMS = Path(tempfile.gettempdir()) / f"fleet-autoscaler-ports-{os.getuid()}"
HOLD_S = 600.0
SPAN = 12000  # how far below the ephemeral range ports are picked
_warned: list[bool] = [False]


def ephemeral_low() -> int:
    """The lowest port the kernel hands out for outgoing connections and port-0 binds."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _claim(claims: Path, low: int, host: str) -> int | None:
    """Under the folder's lock: forget claims older than the hold, then claim a port that no live
    claim holds and that binds. None when none was found in 500 tries."""
    now = time.time()
    for old in claims.iterdir():
        if old.name.isdigit():
            with contextlib.suppress(OSError):
                if now - old.stat().st_mtime >= HOLD_S:
                    old.unlink()
    for _ in range(500):
        port = random.randrange(max(1025, low - SPAN), low)
        mark = claims / str(port)
        if mark.exists() or not _bindable(host, port):
            continue  # claimed within the hold, or in use by something else
        mark.touch()
        return port
    return None


def free_port(host: str = "127.0.0.1", claims: Path = CLAIMS) -> int:
    """A port that was free a moment ago and that no process of this user picking this way was
    given in the last ``HOLD_S`` seconds. Where the ephemeral range leaves too little room below it,
    or the claims folder cannot be used, ``bind(0)``'s port (said once in the log)."""
    low = ephemeral_low()
    if low - 1025 >= 2000:
        try:
            claims.mkdir(mode=0o700, exist_ok=True)
            with open(claims / "lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
                port = _claim(claims, low, host)
            if port is not None:
                return port
        except OSError as exc:
            if not _warned[0]:
                _warned[0] = True
                log.warning("free ports: %s cannot be used (%s): ports come from bind(0), which an outgoing "
                            "connection may take before the child binds", claims, exc)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
