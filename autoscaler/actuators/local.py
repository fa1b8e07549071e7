"""The ``local`` actuator: one ``autoscaler emulate worker`` process per group on this machine.

Each runs on the port of its group's ``worker_url``, as ``[sys.executable, "-m", "autoscaler",
"emulate", "worker", ...]`` (the controller's own interpreter, so the venv's ``bin/`` need not be on
PATH), with ``actuator.startup_s`` as its load time, ``fleet.requests_per_group`` slots and the
policy's ``simulation`` speeds. The workers run in their own sessions and outlive the controller,
as a real fleet does. A group counts as stopped when its port is closed (a zombie still answers
``kill -0``), and this process reaps the workers it started itself.

Worker logs go to ``$AUTOSCALER_LOCAL_LOG_DIR`` (default: ``<tmp>/autoscaler-local``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from autoscaler.actuators.base import NO_CONTEXT, ActContext, ActResult, GroupStatus, child_env
from autoscaler.policy.model import Group, Policy


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout_s):
        return True
    return False


class LocalActuator:
    kind = "local"

    def __init__(self, policy: Policy, *, log_dir: str | None = None, owner: str = "") -> None:
        self.policy = policy
        self.log_dir = Path(log_dir or os.environ.get("AUTOSCALER_LOCAL_LOG_DIR")
                            or Path(tempfile.gettempdir()) / "autoscaler-local")
        # The fleet's id (``LiveLedger.fleet_id``: one per ledger, so every controller and restart
        # of the fleet has the same). Each worker is started with it (``--owner``) and reports it: a
        # port another fleet's worker took (a demo and a test on one machine) is never counted,
        # started onto or signalled as ours. "" (no id): no worker is told and none is checked.
        self.owner = owner
        self._children: dict[str, subprocess.Popen] = {}

    @property
    def stopped_power_state(self) -> str:
        return self.policy.actuator.power_state_when_stopped.value

    def close(self) -> None:
        self._reap()  # the workers themselves keep running: they outlive the controller

    def argv(self, group: Group) -> list[str]:
        parts = urlsplit(group.worker_url)
        sim, sig = self.policy.simulation, self.policy.signals
        return [
            sys.executable, "-m", "autoscaler", "emulate", "worker",
            "--host", parts.hostname or "127.0.0.1", "--port", str(parts.port),
            "--startup-s", f"{self.policy.actuator.startup_s:g}",
            "--max-running", str(self.policy.fleet.requests_per_group),
            "--prefill-tokens-per-s", f"{sim.prefill_tokens_per_s:g}",
            "--decode-tokens-per-s", f"{sim.decode_tokens_per_s:g}",
            "--kv-capacity-tokens", str(sim.kv_cache_tokens),
            "--metric-prefix", sig.metric_prefix,
            *(["--owner", self.owner] if self.owner else []),
        ]

    def start(self, group: Group, *, ctx: ActContext = NO_CONTEXT) -> ActResult:
        self._reap()
        if ctx.aborted():
            return ActResult(False, "not started: the act was aborted (leadership lost or shutdown)", interrupted=True)
        parts = urlsplit(group.worker_url)
        if port_open(parts.hostname or "127.0.0.1", parts.port or 0):
            foreign = self._foreign(group)
            if foreign is not None:
                return ActResult(False, f"not started: {foreign}")
            return ActResult(True, f"a worker already listens on {parts.hostname}:{parts.port}; not starting a second")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{group.name}-{parts.port}.log"
        try:
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(
                    self.argv(group), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True, close_fds=True, env=child_env(),
                )
        except OSError as exc:
            return ActResult(False, f"could not start the emulated worker: {exc.strerror or exc}")
        self._children[group.name] = proc
        return ActResult(True, f"started emulated worker pid {proc.pid} on port {parts.port} (log {log_path})", 0)

    def _state(self, group: Group) -> dict | None:
        """What the worker on the group's port says it is (``/_emulator/state``), or None."""
        try:
            state = httpx.get(group.worker_url + "/_emulator/state", timeout=2.0, trust_env=False).json()
        except (httpx.HTTPError, ValueError):
            return None
        return state if isinstance(state, dict) else None

    def _foreign(self, group: Group) -> str | None:
        """One line naming another fleet's worker on the group's port; None when the process there is
        ours (our child, or one that reports our owner) or does not say (a worker started by hand,
        or one that did not answer: never taken for foreign on a slow answer)."""
        if not self.owner:
            return None
        child = self._children.get(group.name)
        if child is not None and child.poll() is None:
            return None
        state = self._state(group)
        owner = None if state is None else state.get("owner")
        if not isinstance(owner, str) or owner in ("", self.owner):
            return None
        return (f"port {urlsplit(group.worker_url).port} is held by another fleet's emulated worker "
                f"(pid {state.get('pid') if state else '?'}, fleet {owner}, not {self.owner})")

    def _pid(self, group: Group) -> int | None:
        child = self._children.get(group.name)
        if child is not None and child.poll() is None:
            return child.pid
        state = self._state(group)
        try:
            return None if state is None else int(state["pid"])
        except (KeyError, TypeError, ValueError):
            return None

    def stop(self, group: Group, *, force: bool = False, ctx: ActContext = NO_CONTEXT) -> ActResult:
        """SIGTERM (the worker finishes what it admitted, then exits), or SIGKILL with ``force``."""
        if ctx.aborted():
            return ActResult(False, "not stopped: the act was aborted (leadership lost or shutdown)", interrupted=True)
        parts = urlsplit(group.worker_url)
        sig = signal.SIGKILL if force else signal.SIGTERM
        if not port_open(parts.hostname or "127.0.0.1", parts.port or 0):
            self._reap()
            child = self._children.get(group.name)
            if child is None:
                return ActResult(True, f"nothing listens on port {parts.port}: stopped")
            # Our own worker, not listening yet (a loaded machine takes seconds to import it): a
            # closed port is no proof it is gone, and it would bind and serve after "stopped".
            try:
                os.kill(child.pid, sig)
            except ProcessLookupError:
                pass
            return ActResult(True, f"sent {sig.name} to pid {child.pid} (not listening on port {parts.port} yet)", 0)
        foreign = self._foreign(group)
        if foreign is not None:  # never signal another fleet's worker
            return ActResult(True, f"none of ours listens: {foreign}")
        pid = self._pid(group)
        if pid is None:
            return ActResult(False, f"port {parts.port} is open but the worker's pid is unknown")
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError as exc:
            return ActResult(False, f"cannot signal pid {pid}: {exc.strerror}")
        return ActResult(True, f"sent {sig.name} to pid {pid}", 0)

    def status(self, group: Group, *, ctx: ActContext = NO_CONTEXT) -> tuple[GroupStatus, str]:
        self._reap()
        parts = urlsplit(group.worker_url)
        if port_open(parts.hostname or "127.0.0.1", parts.port or 0):
            foreign = self._foreign(group)
            if foreign is not None:
                return GroupStatus.STOPPED, foreign
            return GroupStatus.RUNNING, f"port {parts.port} open"
        return GroupStatus.STOPPED, f"port {parts.port} closed"

    def _reap(self) -> None:
        for name, child in list(self._children.items()):
            if child.poll() is not None:
                del self._children[name]
