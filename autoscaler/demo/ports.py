"""Free ports for child processes (the demo's gateway, workers, controller and Prometheus; the tests').

A port from ``bind(("127.0.0.1", 0))`` is one the kernel also hands any outgoing connection as
its local port, so between the pick and the child's own bind (seconds on a loaded machine, minutes
for a demo worker that starts when the fleet scales up) a client elsewhere on the machine can take
it, and the child fails with "Address already in use" (seen in CI on a restarted controller).
``free_port`` picks below the ephemeral range instead, where only another explicit pick can land,
and claims each port (an empty marker file in a folder shared by every process that picks this
way) so that it is not handed out again for ten minutes.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import tempfile
import time
from pathlib import Path

CLAIMS = Path(tempfile.gettempdir()) / "fleet-autoscaler-ports"
HOLD_S = 600
SPAN = 12000  # how far below the ephemeral range ports are picked


def ephemeral_low() -> int:
    """The lowest port the kernel hands out for outgoing connections and port-0 binds."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1", claims: Path = CLAIMS) -> int:
    """A port that was free a moment ago and that no process picking this way was given in the last
    ten to twenty minutes; ``bind(0)``'s port where the range leaves too little room below it."""
    low = ephemeral_low()
    if low - 1025 >= 2000:
        with contextlib.suppress(OSError):
            claims.mkdir(exist_ok=True)
        bucket = int(time.time() // HOLD_S)
        with contextlib.suppress(OSError):
            for old in claims.iterdir():
                if not old.suffix[1:].isdigit() or int(old.suffix[1:]) < bucket - 1:
                    with contextlib.suppress(OSError):
                        old.unlink()  # claims older than the hold: the folder stays small
        for _ in range(500):
            port = random.randrange(max(1025, low - SPAN), low)
            if (claims / f"{port}.{bucket - 1}").exists():
                continue  # claimed in the previous ten minutes
            try:
                os.close(os.open(claims / f"{port}.{bucket}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                continue  # claimed in these ten minutes
            except OSError:
                break  # the folder cannot be written: fall back to bind(0)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue  # in use by something else
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
