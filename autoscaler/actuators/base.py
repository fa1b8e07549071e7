"""What every actuator offers, and the bounded subprocess runner the command actuator uses."""

from __future__ import annotations

import collections
import contextlib
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

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
KILL_GRACE_S = 2.0  # ``timeout -k``: SIGTERM at the deadline, SIGKILL to the whole group this long after
EOF_GRACE_S = 0.2  # after the command exits, how long its output may still be read (a grandchild may hold the pipe)


def _timeout_binary() -> str | None:
    """coreutils ``timeout``: it carries each command's deadline in the command's own process group,
    so the command dies on time even when this process is frozen (SIGSTOP, a stalled VM)."""
    return shutil.which("timeout", path=os.environ.get("PATH") or os.defpath)


def _missing(argv0: str) -> str | None:
    """Why ``argv0`` cannot be run (as Popen's OSError would say), or None."""
    if "/" not in argv0:
        return None if shutil.which(argv0, path=os.environ.get("PATH") or os.defpath) else "No such file or directory"
    if not os.path.exists(argv0):
        return "No such file or directory"
    if os.path.isdir(argv0) or not os.access(argv0, os.X_OK):
        return "Permission denied"
    return None


def run_bounded(argv: Sequence[str], *, timeout_s: float, output_limit_bytes: int,
                abort: Callable[[], bool] | None = None) -> CommandOutcome:
    """Run ``argv`` (no shell) in its own process group (a new session), with ``child_env()``.

    The deadline is carried twice. The command runs under coreutils ``timeout -k``: at ``timeout_s``
    its whole group gets SIGTERM, and SIGKILL ``KILL_GRACE_S`` later, from the command's own session,
    so it dies on time even when this process is frozen or wedged. And this process kills the group
    itself (SIGKILL) at the deadline plus the grace, or as soon as ``abort()`` answers True (polled
    every 0.1 s); ``abort`` True before the start: nothing runs.

    Output (stdout and stderr together) is read continuously in this thread (a flood never blocks
    the child) and only the last ``output_limit_bytes`` are kept. Once the command has exited its
    output is read for at most ``EOF_GRACE_S`` more: a process it left running in the background
    (``nohup worker &``, a daemon) may hold the pipe open for ever, and is never waited on."""
    if abort is not None and abort():
        return CommandOutcome(tuple(argv), None, "", 0.0, interrupted=True)
    argv = tuple(argv)
    missing = _missing(argv[0]) if argv else "no command"
    if missing:
        return CommandOutcome(argv, None, "", 0.0, error=missing)
    carrier = _timeout_binary()
    full = argv if carrier is None else (carrier, "-k", f"{KILL_GRACE_S:g}s", f"{max(timeout_s, 0.01):.3f}s", *argv)
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            full, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True, env=child_env(),
        )
    except OSError as exc:
        return CommandOutcome(argv, None, "", 0.0, error=exc.strerror or str(exc))
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    tail: collections.deque[bytes] = collections.deque()
    size = 0

    def read_available() -> bool:
        """Read what the pipe holds now; True at EOF."""
        nonlocal size
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return False
            except OSError:
                return True
            if not chunk:
                return True
            tail.append(chunk)
            size += len(chunk)
            while size - len(tail[0]) >= output_limit_bytes and len(tail) > 1:
                size -= len(tail.popleft())

    timed_out = interrupted = eof = False
    # Our own kill comes after the carrier's (its SIGKILL at timeout + grace): normally ``timeout``
    # ends the command and we read its exit; without ``timeout`` on PATH we are the only bound.
    deadline = t0 + timeout_s + (KILL_GRACE_S + 1.0 if carrier is not None else 0.0)
    exit_code: int | None = None
    while True:
        step = max(0.0, min(ABORT_POLL_S, deadline - time.monotonic()))
        if not eof:
            readable, _, _ = select.select([fd], [], [], step)
            if readable:
                eof = read_available()
        exit_code = proc.poll()
        if exit_code is None and eof:
            with contextlib.suppress(subprocess.TimeoutExpired):
                exit_code = proc.wait(timeout=step)
        if exit_code is not None:
            break
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
    if exit_code is not None and carrier is not None and (exit_code == 124 or exit_code == -signal.SIGKILL) \
            and time.monotonic() - t0 >= timeout_s:
        timed_out, exit_code = True, None  # ``timeout`` ended it at the deadline
    # The command has exited; a process it left behind may keep the pipe open: read what is there
    # for a moment, never until EOF.
    grace_end = time.monotonic() + EOF_GRACE_S
    while not eof and time.monotonic() < grace_end:
        readable, _, _ = select.select([fd], [], [], max(0.0, grace_end - time.monotonic()))
        if readable:
            eof = read_available()
    with contextlib.suppress(OSError):
        proc.stdout.close()
    data = b"".join(tail)[-output_limit_bytes:]
    output = data.decode("utf-8", errors="replace")
    if carrier is not None and exit_code in (126, 127) and output.startswith("timeout: failed to run command"):
        return CommandOutcome(argv, None, output, time.monotonic() - t0, error=output.strip().rsplit(": ", 1)[-1])
    return CommandOutcome(argv, exit_code, output, time.monotonic() - t0, timed_out, interrupted=interrupted)
