"""``autoscaler run``: the long-lived service.

- **Leadership** (``service.leadership``): a lease in PostgreSQL, or an exclusive ``flock`` beside a
  SQLite file. The lease is renewed every ``retry_s`` by a thread of its own that does no I/O but
  the lease: it never waits on the fleet, a slow status call or the tick. Only the leader acts;
  the controller is built in the tick thread once the lease is held (the run, the records, the
  first reconcile), never in the lease thread. A standby serves ``/healthz``, ``/status`` and
  ``/metrics`` and takes over once the lease has expired, with epoch + 1. A leader that loses the
  lease stops acting at once (the act in flight is killed, its journal row says ``interrupted``)
  and the process exits 1, so that its supervisor restarts it as a standby (client-go's users
  do the same in ``OnStoppedLeading``).
- **The tick** (APScheduler, one at a time: ``max_instances=1``, coalesced, misfires within one
  interval run late rather than never): reload the policy if its file changed, then
  ``Controller.tick()`` (reconcile, signals, decide, record, act), then the metrics.
- **HTTP** on ``--listen`` from its own thread, never waiting on the tick: ``/healthz`` (200 while
  ticks run on time, 503 when the last one is older than three intervals), ``/metrics``, ``/status``
  (bearer ``AUTOSCALER_STATUS_TOKEN`` when set).
- **Shutdown** on SIGTERM/SIGINT: no new tick starts; the lease keeps being renewed while the tick
  in progress finishes (a drain in progress is parked: its state is in the database and the next
  leader resumes it). An act still running after ``CUT_AFTER_S`` is cut (its process group killed,
  recorded as interrupted; its group's phase already says what may be running). Then the run is
  ended and, only after the last act, the lease is released: exit 0 within 30 s.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from sqlalchemy.exc import SQLAlchemyError

from autoscaler import __version__
from autoscaler.actuators import actuator_for
from autoscaler.adapters.gateway import GatewayClient
from autoscaler.adapters.worker_probe import WorkerProbe
from autoscaler.core.bounds import effective_bounds
from autoscaler.core.types import iso
from autoscaler.errors import AutoscalerError, BadInput, RuntimeFailure
from autoscaler.ledger.live import LiveLedger
from autoscaler.ledger.schema import one_line
from autoscaler.ledger.store import Ledger
from autoscaler.policy.loader import LoadedPolicy, PolicyInvalid, parse_policy
from autoscaler.policy.model import ActuatorKind, Group, Policy
from autoscaler.service.controller import POLICY_KEY, Controller, Controls
from autoscaler.service.executor import CORE_PHASE, Executor, Fence
from autoscaler.service.metrics import ServiceMetrics
from autoscaler.service.shadow import ShadowFleet
from autoscaler.service.status import build_status
from autoscaler.service.warmstart import WarmStart
from autoscaler.settings import Settings

log = logging.getLogger("autoscaler.service")

SHUTDOWN_BUDGET_S = 25.0  # SIGTERM -> exit 0 within 30 s
CUT_AFTER_S = 18.0  # an act still running this long after SIGTERM is cut (its kill and record fit the rest)
HTTP_TIMEOUT_S = 10.0  # a client that sends nothing for this long is dropped
HTTP_MAX_CONNECTIONS = 32  # handler threads at once (BoundedHTTPServer: the slowest is dropped for a newcomer)
HTTP_HEADER_DEADLINE_S = 5.0  # the whole request head (line and headers) within this, however it trickles
WATCH_S = 2.0  # the policy file and new operator controls are looked at this often, whatever the tick interval
COMPACT_EVERY_S = 3600.0  # fold old hold decisions once an hour ...
COMPACT_OLDER_THAN_S = 7 * 86400.0  # ... when they are older than a week (a 15 s tick writes 5,760 a day)


def _identity(group: Group) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What a group is acted on as: its worker URL and its nodes (name, address), in order."""
    return group.worker_url, tuple((n.name, n.address) for n in group.nodes)


def identity_changes(running: Policy, edited: Policy, phases: Mapping[str, str]) -> str | None:
    """Why ``edited`` may not replace ``running`` while groups are on (None: it may): it moves a group
    whose phase (``phases``, the records) is not off to other nodes or another worker URL. The old
    nodes would keep running behind records that no longer name them: never stopped, never in a
    status sweep, never charged (issue 34, item 4). A group that is off may be moved freely."""
    before = {g.name: g for g in running.fleet.groups}
    moved = []
    for g in edited.fleet.groups:
        was = before.get(g.name)
        phase = phases.get(g.name, "off")
        if was is None or phase == "off" or _identity(was) == _identity(g):
            continue
        what = []
        if was.worker_url != g.worker_url:
            what.append(f"worker_url {was.worker_url} -> {g.worker_url}")
        if _identity(was)[1] != _identity(g)[1]:
            what.append("nodes " + ", ".join(f"{n.name} ({n.address})" for n in was.nodes) + " -> "
                        + ", ".join(f"{n.name} ({n.address})" for n in g.nodes))
        moved.append(f"{g.name} ({phase}): {'; '.join(what)}")
    if not moved:
        return None
    return (f"fleet.groups: moving {' | '.join(moved)} is refused while not off (its old nodes would keep running "
            f"unswept and uncharged); `autoscaler cordon GROUP` drains and stops it on its old nodes, then the edit "
            f"applies by itself (and `autoscaler uncordon GROUP` lets it start on the new ones)")


class PolicyFile:
    """The policy file on disk, re-read when it changes (size, mtime or content)."""

    def __init__(self, path: str, loaded: LoadedPolicy) -> None:
        self.path = path
        self.good = loaded
        self.error: str | None = None
        self.error_sha: str | None = None
        self._stat = self._fingerprint()

    def _fingerprint(self) -> tuple[float, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime, st.st_size)

    def check(self) -> tuple[str, LoadedPolicy | list[str] | None, str | None]:
        """('same'|'valid'|'invalid', loaded policy or error lines, text)."""
        fp = self._fingerprint()
        if fp == self._stat and fp is not None:
            return "same", None, None
        self._stat = fp
        try:
            raw = Path(self.path).read_bytes()
            text = raw.decode("utf-8")
            if "\x00" in text:
                raise UnicodeDecodeError("utf-8", raw, 0, 1, "NUL byte")
        except OSError as exc:
            return "invalid", [f"{self.path}: cannot read: {exc.strerror or exc}"], ""
        except UnicodeDecodeError:
            return "invalid", [f"{self.path}: not UTF-8 text"], raw.decode("utf-8", "replace")
        try:
            policy = parse_policy(text, self.path)
        except PolicyInvalid as exc:
            return "invalid", list(exc.errors), text
        except BadInput as exc:
            return "invalid", [str(exc)], text
        loaded = LoadedPolicy(policy, self.path, text)
        if loaded.sha256 == self.good.sha256:
            # Back to the running policy's text: nothing to reload, but a rejected edit is over.
            return ("restored" if self.error is not None else "same"), None, None
        return "valid", loaded, text


class Service:
    def __init__(
        self,
        settings: Settings,
        loaded: LoadedPolicy,
        *,
        signals_mode: str = "prometheus",
        instance: str | None = None,
        status_token: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.policy_file = PolicyFile(loaded.path, loaded)
        self.signals_mode = signals_mode
        from autoscaler.service import leadership

        self.instance = instance or leadership.instance_id()
        self.status_token = status_token
        self.clock = clock
        self.metrics = ServiceMetrics(instance=self.instance, version=__version__)
        self._set_policy_metrics(loaded.policy, loaded.sha256)
        self.ledger = Ledger(settings.database_url)
        self.leadership = leadership.leadership_for(settings.database_url, self.instance)
        self.leader_state: leadership.LeaderState | None = None
        self.controller: Controller | None = None
        self.last_tick_at: float | None = None
        self.started_at = clock()
        self._stop = threading.Event()
        self._cut = threading.Event()  # set by the shutdown: the act in flight is killed
        self._deposed: str | None = None  # why this instance stopped leading (the process then exits 1)
        self._led = False  # this process has led: losing the lease then ends it
        self._lease_thread: threading.Thread | None = None
        self._lease_stop = threading.Event()
        self.fence = Fence(leading=self.leadership.leading, instance=self.instance, cut=self._cut,
                           epoch=lambda: int(self.leadership.epoch))
        self._led_epoch: int | None = None
        self.reload_refused: str | None = None
        self._pending: tuple[LoadedPolicy, str] | None = None  # a valid edit not applied yet (refused, or unrecorded)
        self.last_tick_ok: bool | None = None  # --once exits 1 when its tick failed
        self._control_kicked: int | None = None  # the control the watch last ran a tick for
        self._interrupted_seen = 0
        self._tick_lock = threading.Lock()
        self._scheduler: BackgroundScheduler | None = None
        self._http: ThreadingHTTPServer | None = None
        self._gateway: GatewayClient | None = None
        self._signals: Any = None  # a SignalSource once leading
        self._saving_at = 0.0
        self._controls_cache: tuple[int | None, Controls] | None = None
        self._compacted_at = clock()  # the first compaction an hour after the start

    # ------------------------------------------------------------------ wiring
    @property
    def loaded(self) -> LoadedPolicy:
        return self.policy_file.good

    def _set_policy_metrics(self, policy: Policy, sha: str) -> None:
        self.metrics.set_policy(sha, policy.scaling.tick_interval_s, policy.drain.timeout_s, policy.slo.ttft_target_s)

    def _make_signals(self, policy: Policy):
        if self.signals_mode == "direct":
            from autoscaler.adapters.direct_signals import DirectSignals

            return DirectSignals(policy)
        from autoscaler.adapters.prometheus import PrometheusSignals

        return PrometheusSignals(policy, self.settings.prometheus_url)

    def _executor_factory(self, policy: Policy, live: LiveLedger, run_id: int, epoch: int):
        if policy.actuator.kind is ActuatorKind.ADVISORY:
            return ShadowFleet(policy, live, run_id=run_id, epoch=epoch, clock=self.clock)
        actuator = actuator_for(policy, fleet_id=self._fleet_id(policy, live, epoch))
        assert actuator is not None  # None only for advisory, handled above
        if self._gateway is None:
            self._gateway = GatewayClient(self.settings.gateway_url, api_key=self.settings.gateway_api_key)
        probe = WorkerProbe(metric_prefix=policy.signals.metric_prefix,
                            health_timeout_s=policy.lifecycle.health_timeout_s)
        return Executor(policy, live, self._gateway, actuator, probe, run_id=run_id, epoch=epoch, clock=self.clock,
                        fence=self.fence)

    def _fleet_id(self, policy: Policy, live: LiveLedger, epoch: int) -> str:
        """The ledger's fleet id for the ``local`` actuator's workers (no other actuator needs one:
        ""); "" (no check) as well when it cannot be had: the workers are then told apart by their
        ports alone, as before the id."""
        if policy.actuator.kind is not ActuatorKind.LOCAL:
            return ""
        try:
            return live.fleet_id(epoch=epoch)
        except RuntimeFailure as exc:
            log.warning("no fleet id (%s): another fleet's workers on our ports are not told apart", exc)
            return ""

    def _controls(self, now: float) -> Controls:
        """The operator controls in force. Recomputed only when a new control was recorded (one
        cheap max(id) query a tick instead of three) or when the pin in force expires."""
        from autoscaler.service import controls as ctl

        latest = self._latest_control()
        cached = self._controls_cache
        if cached is not None and cached[0] == latest and (cached[1].pin is None or now < cached[1].pin.until):
            return cached[1]
        controls = ctl.effective_controls(self.ledger.engine, now)
        self._controls_cache = (latest, controls)
        return controls

    def _become_leader(self, epoch: int) -> None:
        self._close_signals()  # a leader that lost its lease and won it back: a fresh source
        self.ledger.fence_epoch = epoch
        loaded = self._policy_in_force(self.loaded)
        source = "advisory" if loaded.policy.actuator.kind is ActuatorKind.ADVISORY else "live"
        self._signals = self._make_signals(loaded.policy)
        self.controller = Controller(
            loaded, self.ledger, self._signals, executor_factory=self._executor_factory, source=source,
            epoch=epoch, instance=self.instance, controls=self._controls, clock=self.clock,
            warm_start=self._warm_start(),
        )
        log.info("leading with epoch %d: run %d (%s)", epoch, self.controller.run_id, source)

    def _policy_in_force(self, file: LoadedPolicy) -> LoadedPolicy:
        """The policy a new leader runs with: the file's, unless the file moves a group that the records
        say is not off to other nodes or another worker URL (edited while no controller ran). Then the
        policy last in force (its text is in the ledger) keeps running, so the old nodes are still
        swept, stopped and charged, and the file's edit waits, as a refused live edit does, until the
        group is off. Raises RuntimeFailure (not leading; tried again at the next tick) when that
        policy cannot be read back."""
        if file.policy.actuator.kind is ActuatorKind.ADVISORY:
            return file  # nothing is acted on: no node can be left running
        live = LiveLedger(self.ledger)
        phases = {n: r.phase for n, r in live.groups().items()}
        stored = live.load_state(POLICY_KEY) or {}
        sha = stored.get("hash")
        if not isinstance(sha, str) or sha == file.sha256 or all(p == "off" for p in phases.values()):
            return file
        from sqlalchemy import select

        from autoscaler.ledger.models import PolicyVersion

        with self.ledger._read() as conn:
            text = conn.execute(select(PolicyVersion.text).where(PolicyVersion.sha256 == sha)).scalar()
        try:
            running = parse_policy(text, file.path) if text is not None else None
        except (PolicyInvalid, BadInput) as exc:
            running, why = None, one_line(exc)
        else:
            why = "not recorded" if running is None else ""
        if running is None:
            busy = ", ".join(f"{n} ({p})" for n, p in phases.items() if p != "off")
            raise RuntimeFailure(f"the records say {busy} may be running under the policy last in force "
                                 f"(sha256 {sha[:12]}), which cannot be read back ({why}): put the groups' nodes and "
                                 f"worker URLs in {file.path} back as they were, then cordon what should move")
        moved = identity_changes(running, file.policy, phases)
        if moved is None or running.actuator.kind is not file.policy.actuator.kind:
            return file
        kept = LoadedPolicy(running, file.path, text or "")
        self.policy_file.good = kept
        self._set_policy_metrics(kept.policy, kept.sha256)
        self._pending = (file, file.text)  # the tick's reload says why, in the log, /status and the ledger
        log.warning("%s: the policy last in force (sha256 %s) runs until the groups the file moves are off",
                    file.path, sha[:12])
        return kept

    def _warm_start(self) -> WarmStart | None:
        """Where a first start reads its history (service.warmstart): the Prometheus the signals come
        from; with ``--signals direct`` (a site without Prometheus), only one named by ``--prometheus``
        or ``AUTOSCALER_PROMETHEUS_URL``."""
        if self.signals_mode == "direct" and self.settings.prometheus_url_from == "default":
            return None
        return WarmStart(self.settings.prometheus_url)

    def _close_signals(self) -> None:
        if self._signals is not None and hasattr(self._signals, "close"):
            self._signals.close()
        self._signals = None

    # ------------------------------------------------------------------ the lease
    def renew(self) -> None:
        """One renewal (or acquisition) of the lease: lease I/O only, never the fleet. A leader of
        this process that lost the lease ends the process (``_deposed``)."""
        state = self.leadership.try_acquire_or_renew()
        self.leader_state = state
        self.metrics.leader.set(1 if state.leader else 0)
        self.metrics.epoch.set(state.epoch or 0)
        if state.leader and self.leadership.leading() and self._led_epoch not in (None, state.epoch) \
                and self._deposed is None and not self._stop.is_set():
            # Led with one epoch, now holds another: someone else led in between (this instance was
            # frozen or cut off). Its records and its act in flight are stale: end, as on a loss.
            self._deposed = f"the lease was taken over in between (epoch {self._led_epoch} -> {state.epoch})"
            log.error("no longer leading (%s): exiting so that the supervisor restarts this instance as a standby",
                      self._deposed)
            self._stop.set()
        elif state.leader and self.leadership.leading():
            if not self._led:
                self._led, self._led_epoch = True, state.epoch
                self._kick_tick()  # the controller is built by the next tick, at once
        elif self._led and self._deposed is None and not self._stop.is_set():
            if state.holder and state.holder != self.instance:
                self._deposed = f"lease held by {state.holder}"
            elif getattr(self.leadership, "exclusive", False):  # SQLite: the lock file was removed or replaced
                self._deposed = f"the ledger's lock was given up ({state.error or 'lost'})"
            else:
                self._deposed = f"the lease could not be renewed within its deadline ({state.error or 'no answer'})"
            log.error("no longer leading (%s): the act in flight is cut; exiting so that the supervisor restarts "
                      "this instance as a standby", self._deposed)
            self._stop.set()

    def _lease_loop(self) -> None:
        retry = getattr(self.leadership, "retry_s", 2.0)
        while not self._lease_stop.wait(retry):
            try:
                self.renew()
            except Exception:  # noqa: BLE001 - the lease loop must never die
                log.exception("lease renewal failed; retrying")
            if self._led and not self.leadership.leading() and self._deposed is None and not self._stop.is_set():
                self.renew()  # the deadline passed without a successful renewal: settle it now

    def watch(self) -> None:
        """Between ticks, every ``WATCH_S``: a policy edit is applied (a long ``tick_interval_s``
        reverted takes effect now, not an interval later), and a newly recorded operator control
        (pause, pin, cordon) runs the next tick at once. Never waits on a tick in progress."""
        if self._stop.is_set() or self.controller is None or not self._tick_lock.acquire(blocking=False):
            return
        kick = False
        try:
            if not self.leadership.leading():
                return
            self._reload_policy()
            latest = self._latest_control()
            seen = self._controls_cache[0] if self._controls_cache is not None else latest  # by the last tick
            if latest != seen and latest != self._control_kicked:
                self._control_kicked = latest
                kick = True
        except Exception:  # noqa: BLE001 - a watch that fails is tried again in WATCH_S
            log.exception("watch failed")
        finally:
            self._tick_lock.release()
        if kick:  # after the lock is released, so the tick it asks for is not skipped
            log.info("a new operator control was recorded: ticking now")
            self._kick_tick()

    def _latest_control(self) -> int | None:
        """The newest operator control's id (None: none yet): one cheap max(id) query."""
        from sqlalchemy import func, select

        from autoscaler.ledger.models import OperatorControlRow

        with self.ledger._read() as conn:
            return conn.execute(select(func.max(OperatorControlRow.id))).scalar()

    def _kick_tick(self) -> None:
        if self._scheduler is not None and self._scheduler.running:
            try:
                self._scheduler.modify_job("tick", next_run_time=datetime.now(timezone.utc))
            except Exception:  # noqa: BLE001 - the tick is scheduled anyway; this only makes it sooner
                pass

    def _lead(self) -> bool:
        """In the tick thread: build the controller once the lease is held (bounded: the run, the
        records, the node states; the first reconcile is the tick's own). False when not leading."""
        state = self.leader_state
        if self._deposed is not None or state is None or not state.leader or not self.leadership.leading():
            return False
        if self.controller is not None and self.controller.epoch == state.epoch:
            return True
        if self.controller is not None:  # a new epoch under a running controller: deposed (renew ends it)
            return False
        try:
            self._become_leader(state.epoch)
        except AutoscalerError as exc:
            log.error("could not start leading: %s", exc)
            self.controller = None
            return False
        return True

    def tick(self) -> None:
        if not self._tick_lock.acquire(timeout=1.0):  # the watch holds it for milliseconds
            return  # a tick is still running: this one is skipped (APScheduler also never overlaps)
        t0 = time.monotonic()
        try:
            if self._stop.is_set():
                return
            # leading() checks the renew deadline on the local clock now, not the last renewal's answer:
            # a renewal that hangs must not leave this instance acting.
            if not self._lead():
                self.last_tick_at = self.clock()
                return
            self._reload_policy()
            controller = self.controller
            assert controller is not None  # _lead() built it
            self.last_tick_ok = controller.tick() is not None
            self._observe(controller)
            self.last_tick_at = self.clock()
            self.metrics.last_tick.set(self.last_tick_at)
        except Exception:  # noqa: BLE001 - the scheduler loop is the one place that catches broadly
            self.last_tick_ok = False
            log.exception("tick failed; the next tick tries again")
        finally:
            self.metrics.tick_duration.observe(time.monotonic() - t0)
            self._tick_lock.release()

    def _reload_policy(self) -> None:
        """Apply a policy edit between ticks, whole or not at all. A valid edit that cannot be applied
        now (refused while a group it changes is not off, or its ledger write failed) is kept
        pending and tried again at every tick and watch, with the reason in ``/status``
        ``policy.error``; the hash shown is always the policy in use."""
        outcome, value, text = self.policy_file.check()
        controller = self.controller
        if controller is None:
            return
        if outcome == "same":
            if self._pending is not None:
                self._apply_edit(controller, *self._pending)
            return
        self._pending = None  # the file changed again: what it says now is what counts
        if outcome == "restored":
            self.policy_file.error = None
            self.reload_refused = None
            self.metrics.policy_error.set(0)
            self.metrics.reload_refused.set(0)
            controller.save_policy_state(error=None)
            log.info("policy file valid again (the running policy's text)")
            return
        if outcome == "invalid":
            errors = value if isinstance(value, list) else ["invalid"]
            self.policy_file.error = errors[0]
            self.reload_refused = None
            self.metrics.reload_refused.set(0)
            self.metrics.reload_errors.inc()
            self.metrics.policy_error.set(1)
            log.error("policy edit rejected, the last good policy keeps running: %s", " | ".join(errors))
            self._record_rejection(controller, text or "", errors)
            controller.save_policy_state(error=errors[0])
            return
        assert isinstance(value, LoadedPolicy)
        self._apply_edit(controller, value, text or "")

    def _record_rejection(self, controller: Controller, text: str, errors: list[str]) -> None:
        try:
            self.ledger.record_rejected_policy(at=self.clock(), text=text, errors=errors, path=self.policy_file.path,
                                               run_id=controller.run_id)
        except RuntimeFailure as exc:
            log.error("could not record the rejected policy: %s", exc)

    def _hold_edit(self, controller: Controller, value: LoadedPolicy, text: str, why: str, *, refused: bool) -> None:
        """The edit stays pending with ``why`` shown; logged and recorded once per reason."""
        self._pending = (value, text)
        if why == self.policy_file.error:
            return  # the same reason as at the last try: nothing new to say
        self.policy_file.error = why
        self.reload_refused = why if refused else None
        self.metrics.reload_errors.inc()
        self.metrics.policy_error.set(1)
        self.metrics.reload_refused.set(1 if refused else 0)
        if refused:
            log.error("policy edit refused for now, the running policy keeps running: %s", why)
            self._record_rejection(controller, text, [why])
        else:
            log.error("policy edit not applied, the running policy keeps running: %s", why)
        controller.save_policy_state(error=why)

    def _apply_edit(self, controller: Controller, value: LoadedPolicy, text: str) -> None:
        refused = self._refuse_live(controller, value.policy)
        if refused is not None:
            self._hold_edit(controller, value, text, refused, refused=True)
            return
        old = self.loaded.policy
        old_interval = old.scaling.tick_interval_s
        actuator = None
        if value.policy.actuator != old.actuator and isinstance(controller.executor, Executor):
            # new templates or timeouts: the hands rebuilt, between ticks
            actuator = actuator_for(value.policy,
                                    fleet_id=self._fleet_id(value.policy, controller.live, controller.epoch))
        try:
            controller.reload(value, actuator)  # records the version first: a failure there changes nothing
        except RuntimeFailure as exc:
            if actuator is not None:
                actuator.close()
            self._hold_edit(controller, value, text,
                            f"{value.path}: the edit (sha256 {value.sha256[:12]}) is valid but not applied yet: the "
                            f"ledger could not record it ({one_line(exc)}); the running policy "
                            f"(sha256 {self.loaded.sha256[:12]}) stays in use and the edit is tried again at every "
                            f"tick", refused=False)
            return
        if actuator is not None:
            log.info("actuator rebuilt from the edited policy (kind %s)", value.policy.actuator.kind.value)
        self._pending = None
        self.reload_refused = None
        self.metrics.reload_refused.set(0)
        self.policy_file.good = value
        self.policy_file.error = None
        self.metrics.policy_error.set(0)
        self._set_policy_metrics(value.policy, value.sha256)
        log.info("policy reloaded: %s (sha256 %s)", value.path, value.sha256[:12])
        if value.policy.scaling.tick_interval_s != old_interval and self._scheduler is not None:
            self._scheduler.reschedule_job("tick", trigger=IntervalTrigger(seconds=value.policy.scaling.tick_interval_s))

    @staticmethod
    def _refuse_live(c: Controller, new: Policy) -> str | None:
        """Why a valid edit cannot be applied while running (None: it can). Never half-applied: a
        change of ``actuator.kind`` would leave the fleet's groups without the hands that started
        them; dropping a group that is not off would leave it running, charged and invisible; so
        would moving a group that is not off to other nodes or another worker URL (its old nodes
        would never be stopped, swept or charged again). A refused edit is tried again at every
        tick: once the groups it changes are off (``autoscaler cordon``), it applies by itself."""
        old = c.policy
        from autoscaler.policy.loader import live_edit_problems

        problems = live_edit_problems(old, new, c.loaded.path)
        if problems:  # cost.currency: a run's costs are in one currency
            return problems[0]
        if new.actuator.kind is not old.actuator.kind:
            return (f"actuator.kind: {old.actuator.kind.value} -> {new.actuator.kind.value} is not applied while "
                    f"running (the {old.actuator.kind.value} actuator keeps acting); restart the controller to "
                    f"switch, or `autoscaler pause` to stop acting now")
        if isinstance(c.executor, Executor):
            kept = set(new.fleet.group_names())
            busy = [f"{n} ({r.phase})" for n, r in c.executor.records.items() if n not in kept and r.phase != "off"]
            if busy:
                return (f"fleet.groups: dropping {', '.join(busy)} is refused while not off; "
                        f"`autoscaler cordon GROUP` drains and stops it, then the edit applies by itself")
            moved = identity_changes(old, new, {n: r.phase for n, r in c.executor.records.items()})
            if moved:
                return moved
        return None

    def _observe(self, c: Controller) -> None:
        m = self.metrics
        counts = {p: 0 for p in ("off", "starting", "ready", "draining", "stopping", "failed")}
        fleet = c.executor.fleet_state()
        for g in fleet.groups.values():
            counts[g.phase.value] += 1
        for phase, n in counts.items():
            m.groups.labels(phase).set(n)
        d = c.last_decision
        if d is not None:
            m.groups_desired.set(d.target_groups)
            m.decisions.labels(str(d.action), str(d.reason)).inc()
            m.last_decision.set(c.last_decision_at or 0)
        m.groups_ceiling.set(effective_bounds(c.policy, self.clock()).ceiling)
        m.paused.set(1 if c.controls.paused else 0)
        cordoned = len(c.controls.cordoned)
        if isinstance(c.executor, Executor):
            cordoned = sum(1 for r in c.executor.records.values() if r.cordoned)
            draining = [r.since for r in c.executor.records.values() if r.phase == "draining"]
            m.drain_oldest_age.set(self.clock() - min(draining) if draining else 0)
        m.groups_cordoned.set(cordoned)
        report = c.last_report
        if report is not None:
            m.gateway_up.set(1 if report.gateway_ok else 0)
            for _group, seconds, cut in report.drains_finished:
                m.drain_duration.observe(seconds)
                if cut:
                    m.requests_cut.inc(cut)
        if isinstance(c.executor, Executor):
            new = c.executor.interrupted_acts - self._interrupted_seen
            if new > 0:
                m.acts_interrupted.inc(new)
            self._interrupted_seen = c.executor.interrupted_acts
        snap = c.last_snapshot
        if snap is not None:
            for p in snap.problems:
                m.signal_errors.labels(p.signal, p.kind).inc()
            m.set_optional(m.fleet_requests, snap.fleet.running, "running")
            m.set_optional(m.fleet_requests, snap.fleet.queued, "queued")
            m.slo_ttft.set(float("nan") if snap.fleet.ttft_p99_s is None else snap.fleet.ttft_p99_s)  # NaN: absent
        now = self.clock()
        if now - self._compacted_at >= COMPACT_EVERY_S:
            self._compacted_at = now
            try:
                result = self.ledger.compact(COMPACT_OLDER_THAN_S, now=now, source=c.source)
                log.info("ledger compacted: %s", result)
            except RuntimeFailure as exc:
                log.warning("ledger not compacted: %s", exc)
        if now - self._saving_at >= 30 or self._saving_at == 0:
            self._saving_at = now
            try:
                self._update_saving(c, now)
            except (RuntimeFailure, ValueError) as exc:
                log.debug("saving not updated: %s", exc)

    def _update_saving(self, c: Controller, now: float) -> None:
        from autoscaler.ledger.cost import FleetSize, Prices, cost_of, moment, usage_between
        from autoscaler.ledger.store import fleet_shape

        run = self.ledger.runs(run_id=c.run_id)[0]
        data = self.ledger.period_data([run], run.started_at, now)
        usage = usage_between(data.intervals[run.id], data.tokens[run.id], moment(run.started_at), moment(now),
                              moment(now))
        figures = cost_of(usage, Prices.from_cost(c.policy.cost.model_dump(mode="json")),
                          FleetSize.from_fleet(fleet_shape(c.policy)))
        self.metrics.saving.labels(c.policy.cost.currency).set(float(figures.baseline_variable_cost - figures.variable_cost))
        self.metrics.node_hours.set(float(figures.node_hours))

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        """The /status object (never waits on a tick). The leader answers from memory; a standby
        reads the leader's records from the database (``service.status.build_status``)."""
        state = self.leader_state
        c = self.controller
        leading = bool(state and state.leader and c is not None and self.leadership.leading())
        good = self.loaded
        if c is None or not leading:
            try:
                out = build_status(self.ledger.engine, self.clock(), instance=self.instance)
            except (RuntimeFailure, SQLAlchemyError) as exc:
                out = {"error": one_line(exc), "paused": False, "groups": {}, "pin": None, "last_decision": None}
            loaded_at = (out.get("policy") or {}).get("loaded_at")
        else:
            loaded_at = c.policy_loaded_at
            if isinstance(c.executor, Executor):
                groups = {n: {"phase": CORE_PHASE[r.phase].value, "since": iso(r.since),
                              "cordoned": r.cordoned or n in c.controls.cordoned}
                          for n, r in list(c.executor.records.items())}
            else:
                groups = {n: {"phase": g.phase.value, "since": iso(g.since), "cordoned": n in c.controls.cordoned}
                          for n, g in c.executor.fleet_state().groups.items()}
            pin = c.controls.pin
            d = c.last_decision
            report = c.last_report
            out = {
                "gateway": None if report is None or not isinstance(c.executor, Executor) else {
                    "ok": report.gateway_ok, "problem": report.gateway_problem},
                "paused": c.controls.paused,
                "groups": groups,
                "pin": None if pin is None else {"groups": pin.groups, "until": iso(pin.until), "by": pin.by,
                                                 "reason": pin.reason},
                "last_decision": None if d is None else {
                    "at": iso(c.last_decision_at), "action": str(d.action), "target_groups": d.target_groups,
                    "group": d.group, "reason": str(d.reason), "detail": d.detail},
            }
            out["warm_start"] = c.warm_start
        out["instance"] = self.instance
        out["leader"] = leading
        out["epoch"] = int(state.epoch) if state and state.epoch else int(out.get("epoch") or 0)
        out["policy"] = {"path": good.path, "hash": good.sha256, "loaded_at": loaded_at, "error": self.policy_file.error}
        return out

    def healthy(self) -> tuple[bool, str]:
        interval = self.loaded.policy.scaling.tick_interval_s
        last = self.last_tick_at or self.started_at
        age = self.clock() - last
        if age > 3 * interval + 1:
            return False, f"the last tick is {age:.0f} s old (interval {interval:g} s)"
        return True, "ok"

    # ------------------------------------------------------------------ lifecycle
    def serve_http(self) -> None:
        host, _, port = self.settings.listen.rpartition(":")
        service = self

        class Handler(HeadDeadlineHandler):
            timeout = HTTP_TIMEOUT_S  # socket timeout: a client that sends nothing is dropped

            def log_message(self, *args) -> None:  # access logs off: one line per scrape is noise
                pass

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    ok, why = service.healthy()
                    self._send(200 if ok else 503, (why + "\n").encode(), "text/plain")
                elif path == "/metrics":
                    self._send(200, service.metrics.render(), service.metrics.content_type)
                elif path == "/status":
                    token = service.status_token
                    given = (self.headers.get("Authorization") or "").encode("utf-8", "replace")
                    if token and not hmac.compare_digest(given, f"Bearer {token}".encode()):
                        self._send(401, b'{"error": "a bearer token is required (AUTOSCALER_STATUS_TOKEN)"}\n',
                                   "application/json")
                        return
                    body = json.dumps(service.status(), default=str).encode() + b"\n"
                    self._send(200, body, "application/json")
                else:
                    self._send(404, b"not found\n", "text/plain")

        try:
            self._http = BoundedHTTPServer((host or "127.0.0.1", int(port)), Handler)
        except OSError as exc:
            raise RuntimeFailure(f"--listen {self.settings.listen}: cannot listen: {exc.strerror or exc}") from exc
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, name="http", daemon=True).start()
        log.info("serving /healthz, /metrics and /status on http://%s:%s", host, self._http.server_address[1])

    def run(self, *, once: bool = False) -> int:
        """Serve until SIGTERM/SIGINT (0), or until this instance loses the lease it held (1)."""
        from autoscaler.service.leadership import SqliteFlock

        if isinstance(self.leadership, SqliteFlock):  # exclusive: acquired once, up front
            self.leadership.acquire()  # SQLite: a second instance exits 1 naming the holder (LeaseHeld)
        self.renew()
        if once:
            # The lease is renewed during the one tick too: a start longer than the renew deadline
            # is not cut for want of a renewal.
            self._lease_thread = threading.Thread(target=self._lease_loop, name="lease", daemon=True)
            self._lease_thread.start()
            if not self._lead():
                state = self.leader_state
                raise RuntimeFailure(f"not the leader: the lease is held by {state.holder if state else 'another instance'}")
            self.tick()
            self.shutdown("--once")
            if not self.last_tick_ok:
                raise RuntimeFailure("--once: the tick failed (records unavailable or an error: see the log above)")
            return 0
        self.serve_http()
        interval = self.loaded.policy.scaling.tick_interval_s
        sched = self._scheduler = BackgroundScheduler(timezone="UTC")
        sched.add_job(self.tick, IntervalTrigger(seconds=interval), id="tick", max_instances=1, coalesce=True,
                      misfire_grace_time=max(1, int(interval)), next_run_time=None)
        sched.add_job(self.watch, IntervalTrigger(seconds=WATCH_S), id="watch", max_instances=1, coalesce=True,
                      misfire_grace_time=max(1, int(WATCH_S)))
        sched.start()
        sched.modify_job("tick", next_run_time=datetime.now(timezone.utc))  # the first tick at once
        self._lease_thread = threading.Thread(target=self._lease_loop, name="lease", daemon=True)
        self._lease_thread.start()
        received: list[str] = []

        def on_signal(signum, _frame) -> None:
            received.append(signal.Signals(signum).name)
            self.fence.stopping.set()  # no new act from here on; the one in flight may finish
            self._stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        while not self._stop.wait(0.5):
            pass
        code = 1 if self._deposed is not None and not received else 0
        self.shutdown(f"lost the lease: {self._deposed}" if code else (received[0] if received else "stopped"))
        if self._tick_lock.locked():
            # A tick still blocked past the budget (a status command that ignores its timeout): the
            # records are written and the lease released or expiring; do not wait on it.
            log.error("a tick is still running after the shutdown's budget; exiting without it")
            logging.shutdown()
            os._exit(code)
        return code

    def shutdown(self, why: str) -> None:
        self._stop.set()
        self.fence.stopping.set()  # the act in flight may finish; no new one starts
        t0 = time.monotonic()
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)  # no new tick; the lease thread keeps renewing
        got = self._tick_lock.acquire(timeout=CUT_AFTER_S)  # the tick in progress ends ...
        if not got:
            log.warning("shutdown: the act in flight is still running after %.0f s; cutting it", CUT_AFTER_S)
            self._cut.set()  # ... or its act is killed (and recorded as interrupted)
            got = self._tick_lock.acquire(timeout=max(0.1, SHUTDOWN_BUDGET_S - (time.monotonic() - t0)))
        try:
            if self.controller is not None and self._deposed is None:
                self.controller.end(f"stopped ({why}); drains in progress resume at the next start")
            self.controller = None
            self._lease_stop.set()
            if self._lease_thread is not None:
                self._lease_thread.join(timeout=5)
            if self._deposed is None and got:  # released only after the last act has ended
                try:
                    self.leadership.release()
                except Exception as exc:  # noqa: BLE001 - releasing is best effort; the lease expires anyway
                    log.warning("lease not released: %s", exc)
        finally:
            if got:
                self._tick_lock.release()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        self._close_signals()
        if self._gateway is not None:
            self._gateway.close()
        self.ledger.close()
        log.info("stopped (%s)", why)


class BoundedHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that slow clients cannot fill (issue 34 item 10: 32 sockets each
    sending a header line every 5 s kept ``/healthz`` at 503 for 40 s).

    - **A whole-request-head deadline** (Go's ``ReadHeaderTimeout``): a connection that has not sent
      its request line and every header within ``header_deadline_s`` of being accepted is shut
      down by a reaper thread, however steadily it trickles bytes (the handler's socket timeout only
      bounds the wait for *one* read).
    - **Bounded concurrency** (``max_connections`` handler threads): when every slot is taken, the
      connection that has been sending its head the longest is dropped to make room, so a client
      that sends its request at once (a probe of ``/healthz``) is served; only when every slot
      holds a complete request (answered from memory in milliseconds) is the newcomer refused
      with 503 after a wait of at most ``SLOT_WAIT_S``.
    """

    daemon_threads = True
    SLOT_WAIT_S = 1.0

    def __init__(self, *args, max_connections: int = HTTP_MAX_CONNECTIONS,
                 header_deadline_s: float = HTTP_HEADER_DEADLINE_S, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._slots = threading.BoundedSemaphore(max_connections)
        self.header_deadline_s = header_deadline_s
        self._heads_lock = threading.Lock()
        self._heads: dict[socket.socket, float] = {}  # connections still sending their head -> deadline (monotonic)
        self._closed = threading.Event()
        threading.Thread(target=self._reap, name="http-head-deadline", daemon=True).start()

    def _reap(self) -> None:
        while not self._closed.wait(min(0.25, self.header_deadline_s / 4)):
            now = time.monotonic()
            with self._heads_lock:
                late = [sock for sock, deadline in self._heads.items() if deadline <= now]
                for sock in late:
                    del self._heads[sock]
            for sock in late:
                self._cut(sock)

    @staticmethod
    def _cut(sock: socket.socket) -> None:
        """Shut the connection down: its handler's blocked read returns at once and the thread ends."""
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def head_done(self, sock: socket.socket) -> None:
        """The handler has read the whole request head: the deadline no longer applies."""
        with self._heads_lock:
            self._heads.pop(sock, None)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            with self._heads_lock:
                slowest = min(self._heads, key=self._heads.__getitem__, default=None)
                if slowest is not None:
                    del self._heads[slowest]
            if slowest is not None:
                self._cut(slowest)  # its thread ends and frees a slot
            if slowest is None or not self._slots.acquire(timeout=self.SLOT_WAIT_S):
                try:
                    request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass
                self.shutdown_request(request)
                return
        with self._heads_lock:
            self._heads[request] = time.monotonic() + self.header_deadline_s
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.head_done(request)
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.head_done(request)
            self._slots.release()

    def server_close(self) -> None:
        self._closed.set()
        super().server_close()


class HeadDeadlineHandler(BaseHTTPRequestHandler):
    """A handler that tells a ``BoundedHTTPServer`` when the request head is in (its deadline ends)."""

    def parse_request(self) -> bool:
        try:
            return super().parse_request()  # reads the headers
        finally:
            if isinstance(self.server, BoundedHTTPServer):
                self.server.head_done(self.connection)
