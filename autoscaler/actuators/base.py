"""What every actuator offers, and the bounded subprocess runner the command actuator uses."""

from __future__ import annotations

import collections
import contextlib
import io
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, cast

from autoscaler.policy.model import Group


class GroupStatus(StrEnum):
    RUNNING = "running"  # every node of the group is up
    STOPPED = "stopped"  # every node is down
    PARTIAL = "partial"  # some nodes up, some down: the pair is broken
    UNKNOWN = "unknown"  # the status could not be read


@dataclass(frozen=True, slots=True)
class ActResult:
    ok: bool
    detail: str  # one line: what happened, per node where it matters
    exit_code: int | None = None  # the first failing command's exit code (or the last one's)
    output_tail: str | None = None  # the end of that command's output, bounded
    interrupted: bool = False  # cut before it finished: leadership lost, or the shutdown's budget ran out


@dataclass(frozen=True, slots=True)
class ActContext:
    """Who acts, and whether it may go on: the acting leader's ``epoch`` and ``instance`` (template
    fields ``{epoch}`` and ``{instance}``, so a site's own script can refuse a stale fencing token),
    and ``abort``, polled while a command runs: True when leadership was lost or the shutdown cut
    the act, and the command's process group is then killed (the act is recorded as interrupted)."""

    epoch: int = 0
    instance: str = ""
    abort: Callable[[], bool] | None = None

    def aborted(self) -> bool:
        return self.abort is not None and self.abort()


NO_CONTEXT = ActContext()


class Actuator(Protocol):
    kind: str

    @property
    def stopped_power_state(self) -> str: ...  # "idle" or "off"

    # launch every node; returns once launched
    def start(self, group: Group, *, ctx: ActContext = NO_CONTEXT) -> ActResult: ...

    # returns once the stop is issued
    def stop(self, group: Group, *, force: bool = False, ctx: ActContext = NO_CONTEXT) -> ActResult: ...

    # and a one-line detail; ``ctx`` only fills the templates' {epoch} and {instance}
    def status(self, group: Group, *, ctx: ActContext = NO_CONTEXT) -> tuple[GroupStatus, str]: ...

    def close(self) -> None: ...


# The controller's secrets (docs/interfaces.md, "Secrets"): a worker or a site script never needs
# them, and a worker outlives the controller, so it would keep them for good.
SECRET_ENV = (
    "AUTOSCALER_GATEWAY_API_KEY", "AUTOSCALER_DATABASE_URL", "AUTOSCALER_STATUS_TOKEN",
    "PGPASSWORD",  # libpq reads it: the ledger's password by another name
)


def child_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a child process (a worker, a site's start/stop/status script) is given:
    the controller's own, without its secrets and the files that hold them (``*_FILE``)."""
    environ = os.environ if environ is None else environ
    hidden = set(SECRET_ENV) | {name + "_FILE" for name in SECRET_ENV}
    return {name: value for name, value in environ.items() if name not in hidden}


@dataclass(frozen=True, slots=True)
class CommandOutcome:
    argv: tuple[str, ...]
    exit_code: int | None  # None: killed at the timeout
    output_tail: str
    seconds: float
    timed_out: bool = False
    error: str | None = None  # could not start it at all (no such file, permission)
    interrupted: bool = False  # killed because the act was aborted (leadership lost, shutdown cut)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def describe(self) -> str:
        if self.error:
            return f"{self.argv[0]}: {self.error}"
        if self.interrupted:
            return f"{self.argv[0]}: interrupted after {self.seconds:.1f} s (leadership lost or shutdown)"
        if self.timed_out:
            return f"{self.argv[0]}: killed after {self.seconds:.0f} s (timeout)"
        return f"{self.argv[0]}: exit {self.exit_code}"


ABORT_POLL_S = 0.1  # how often a running command checks ``abort``: an act dies within 0.1 s of losing the lease


def run_bounded(argv: Sequence[str], *, timeout_s: float, output_limit_bytes: int,
                abort: Callable[[], bool] | None = None) -> CommandOutcome:
    """Run ``argv`` (no shell) in its own process group, with ``child_env()``. Output (stdout and stderr together) is
    read continuously, so a flood never blocks the child, and only the last ``output_limit_bytes``
    are kept. At the timeout, or as soon as ``abort()`` answers True (polled every 0.1 s), the
    whole group is killed (children included). ``abort`` True before the start: nothing runs."""
    if abort is not None and abort():
        return CommandOutcome(tuple(argv), None, "", 0.0, interrupted=True)
    argv = tuple(argv)
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True, env=child_env(),
        )
    except OSError as exc:
        return CommandOutcome(argv, None, "", 0.0, error=exc.strerror or str(exc))
    tail: collections.deque[bytes] = collections.deque()
    size = [0]

    def reader() -> None:
        assert proc.stdout is not None
        stream = cast(io.BufferedReader, proc.stdout)  # stdout=PIPE in binary mode
        for chunk in iter(lambda: stream.read1(65536), b""):
            tail.append(chunk)
            size[0] += len(chunk)
            while size[0] - len(tail[0]) >= output_limit_bytes and len(tail) > 1:
                size[0] -= len(tail.popleft())

    thread = threading.Thread(target=reader, name="actuator-output", daemon=True)
    thread.start()
    timed_out = interrupted = False
    deadline = t0 + timeout_s
    exit_code: int | None = None
    while True:
        step = max(0.0, min(ABORT_POLL_S if abort is not None else timeout_s, deadline - time.monotonic()))
        try:
            exit_code = proc.wait(timeout=step)
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                timed_out = True
            elif abort is not None and abort():
                interrupted = True
            else:
                continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        exit_code = None
        break
    # A grandchild that escaped the group may keep the pipe open: never wait on it for long.
    thread.join(timeout=1.0)
    with contextlib.suppress(OSError):
        if proc.stdout is not None:
            proc.stdout.close()
    data = b"".join(tail)[-output_limit_bytes:]
    return CommandOutcome(argv, exit_code, data.decode("utf-8", errors="replace"), time.monotonic() - t0, timed_out,
                          interrupted=interrupted)
