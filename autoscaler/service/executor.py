"""The executor: carries the core's decisions out on a real fleet, and reconciles every tick.

It never decides. Each tick the service calls ``reconcile`` (compare what the records say with
what the gateway and the actuator report, and make one idempotent step per group), then asks the
core with ``fleet_state()``, then ``apply``s the decision. Every side effect is journalled first
(the intent), then done, then its result written; every phase change is one ledger transaction
(group row, lifecycle event, node power state) carrying the leader's epoch. When a record cannot be
written, no new action starts (``RecordsUnavailable``).

A group's life (``fleet_groups.phase``)::

    off -> starting -> registering -> ready -> draining -> stopping -> off
                (any step) -> failed -> (after the retry backoff) off, or cordoned

- starting: the actuator launched the nodes; waiting for the worker's /health (deadline
  ``lifecycle.health_deadline_s``). A command actuator's pair with one half down fails at once.
- registering: ``POST /workers`` sent; waiting until the gateway lists the worker healthy
  (deadline ``lifecycle.register_deadline_s``, or the gateway's job failed).
- ready: serving. Its /health is read every tick; ``lifecycle.health_failures_before_failed`` in a
  row fail it (taken out of the gateway, stopped, replaced by the core's next decision). A gateway
  that restarted (it keeps workers in memory only) gets the group back (``reregistered``).
- draining: removed from the gateway (every id listed at the group's URL, again each tick: a
  DELETE during a pending add does not cancel it). It is drained when a reading of the worker's
  *own* running + queued, taken at least ``drain.settle_s`` after the removal, is 0. Then the core
  is asked again (``recheck``): a scale-up that wants the group back returns it to service;
  otherwise it is stopped. At ``drain.timeout_s``: ``stop`` (cut and count what is left) or
  ``keep_serving`` (back to service, an alert logged). A group is never stopped while it may still
  be registered: when the gateway cannot be read, the drain waits.
- stopping: the stop was issued; off once the actuator reports the group stopped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from autoscaler.actuators.base import ActResult, Actuator, GroupStatus
from autoscaler.adapters.gateway import GatewayClient, GatewayError, GatewayWorker, normalise_url
from autoscaler.adapters.worker_probe import WorkerProbe
from autoscaler.core.types import Action, Decision, FleetState, GroupState, Phase
from autoscaler.errors import RuntimeFailure
from autoscaler.ledger.live import GroupRecord, LiveLedger
from autoscaler.policy.model import Group, OnDrainTimeout, Policy, UnknownWorker

log = logging.getLogger("autoscaler.executor")

# The executor's phases -> the core's. ``registering`` is a step inside ``starting`` for the core.
CORE_PHASE = {
    "off": Phase.OFF,
    "starting": Phase.STARTING,
    "registering": Phase.STARTING,
    "ready": Phase.READY,
    "draining": Phase.DRAINING,
    "stopping": Phase.STOPPING,
    "failed": Phase.FAILED,
}


class RecordsUnavailable(RuntimeFailure):
    """The ledger refused a write: no new action starts until it accepts writes again."""


@dataclass
class TickReport:
    """What one reconcile saw and did, for the service's log line, metrics and tests."""

    gateway_ok: bool = True
    gateway_problem: str | None = None
    steps: list[str] = field(default_factory=list)
    startup_samples: list[float] = field(default_factory=list)  # measured start-ups that completed
    drains_finished: list[tuple[str, float, float]] = field(default_factory=list)  # (group, seconds, cut)
    records_ok: bool = True
    alerts: list[str] = field(default_factory=list)


Recheck = Callable[[str, float], bool]  # (group, now) -> True when the core wants the group back


class Executor:
    def __init__(
        self,
        policy: Policy,
        live: LiveLedger,
        gateway: GatewayClient,
        actuator: Actuator,
        probe: WorkerProbe,
        *,
        run_id: int,
        epoch: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy = policy
        self.live = live
        self.gateway = gateway
        self.actuator = actuator
        self.probe = probe
        self.run_id = run_id
        self.epoch = epoch
        self.clock = clock
        self.records = self._load_records()
        self.recheck: Recheck | None = None
        self._listed: list[GatewayWorker] | None = None  # this tick's gateway listing (None: unreadable)
        self._orphans: set[str] = set()  # off groups found running at start-up
        self._reconciled = False

    # ---------------------------------------------------------------------------- state
    def _load_records(self) -> dict[str, GroupRecord]:
        stored = self.live.groups()
        now = self.clock()
        out: dict[str, GroupRecord] = {}
        for g in self.policy.fleet.groups:
            rec = stored.get(g.name) or GroupRecord(g.name, "off", now, worker_url=g.worker_url)
            out[g.name] = rec.with_(worker_url=g.worker_url) if rec.worker_url != g.worker_url else rec
        return out

    def set_policy(self, policy: Policy) -> None:
        """A reloaded policy: groups it adds start off; groups it drops are left as recorded."""
        self.policy = policy
        now = self.clock()
        for g in policy.fleet.groups:
            if g.name not in self.records:
                self.records[g.name] = GroupRecord(g.name, "off", now, worker_url=g.worker_url)

    def group(self, name: str) -> Group:
        return next(g for g in self.policy.fleet.groups if g.name == name)

    def fleet_state(self) -> FleetState:
        """The fleet as the core sees it. A group in retry backoff is not startable: the core sees it
        as failed. A cordoned group is marked (the core never starts it and drains it if active)."""
        now = self.clock()
        groups = {}
        for g in self.policy.fleet.groups:
            rec = self.records[g.name]
            phase = CORE_PHASE[rec.phase]
            if phase is Phase.OFF and rec.retry_at is not None and now < rec.retry_at:
                phase = Phase.FAILED
            groups[g.name] = GroupState(g.name, phase, rec.since, cordoned=rec.cordoned)
        # Synced once a reconcile has read the records and settled each group. An unreachable gateway
        # does not unsync the fleet: the records say what each group is; registrations and drains
        # wait for the gateway, but a scale-up (starting nodes) need not.
        return FleetState(groups, synced=self._reconciled)

    def _write(self, rec: GroupRecord, now: float, event: str | None = None, detail: str = "",
               node_state: str | None = None, decision_id: int | None = None) -> GroupRecord:
        try:
            self.live.transition(rec, epoch=self.epoch, at=now, run_id=self.run_id, event=event, detail=detail,
                                 node_state=node_state, decision_id=decision_id)
        except RuntimeFailure as exc:
            raise RecordsUnavailable(f"records unavailable: {exc}") from exc
        self.records[rec.name] = rec
        if event:
            log.info("group %s: %s%s", rec.name, event, f" ({detail})" if detail else "")
        return rec

    def _act(self, group: str, kind: str, detail: str, act: Callable[[], ActResult]) -> ActResult:
        """Intent, act, result. No intent written -> no act."""
        now = self.clock()
        try:
            action_id = self.live.intent(epoch=self.epoch, group=group, kind=kind, at=now, detail=detail,
                                         run_id=self.run_id)
        except RuntimeFailure as exc:
            raise RecordsUnavailable(f"records unavailable, not doing {kind} {group}: {exc}") from exc
        result = act()
        try:
            self.live.result(action_id, epoch=self.epoch, at=self.clock(), outcome="ok" if result.ok else "failed",
                             detail=f"{detail}: {result.detail}", exit_code=result.exit_code,
                             output_tail=result.output_tail)
        except RuntimeFailure as exc:
            log.error("records unavailable after %s %s (%s); the next reconcile settles it", kind, group, exc)
        return result

    # ---------------------------------------------------------------------------- gateway steps
    def _read_gateway(self, report: TickReport) -> None:
        try:
            self._listed = self.gateway.list()
        except GatewayError as exc:
            self._listed = None
            report.gateway_ok, report.gateway_problem = False, str(exc)

    def _listed_at(self, url: str) -> list[GatewayWorker]:
        target = normalise_url(url)
        return [w for w in self._listed or () if w.url == target]

    def _register(self, rec: GroupRecord) -> str:
        """POST /workers; returns the new id. Raises GatewayError."""
        box: dict[str, str] = {}

        def act() -> ActResult:
            try:
                box["id"] = self.gateway.add(rec.worker_url or self.group(rec.name).worker_url)
            except GatewayError as exc:
                return ActResult(False, str(exc))
            return ActResult(True, f"worker id {box['id']}")

        result = self._act(rec.name, "register", f"POST /workers {rec.worker_url}", act)
        if not result.ok:
            raise GatewayError(self.gateway.base_url + "/workers", result.detail)
        return box["id"]

    def _deregister(self, rec: GroupRecord) -> bool:
        """DELETE every id the gateway lists at the group's URL, and the recorded id (a pending add).
        True when the gateway answered every call."""
        ids = {w.id for w in self._listed_at(rec.worker_url or "")}
        if rec.worker_id:
            ids.add(rec.worker_id)
        ok = True
        for worker_id in sorted(ids):
            def act(worker_id=worker_id) -> ActResult:
                try:
                    known = self.gateway.remove(worker_id)
                except GatewayError as exc:
                    return ActResult(False, str(exc))
                return ActResult(True, "removed" if known else "the gateway did not know it")

            ok = self._act(rec.name, "deregister", f"DELETE /workers/{worker_id}", act).ok and ok
        return ok

    # ---------------------------------------------------------------------------- recovery
    def recover(self) -> list[str]:
        """At start-up: settle the journal's intents that have no result (a crash between an act and
        its record), and stop leftovers the records call off that no pending step owns."""
        notes: list[str] = []
        now = self.clock()
        open_actions = self.live.open_actions()
        for action in open_actions:
            rec = self.records.get(action.group)
            outcome = "abandoned"
            if rec is not None and action.kind == "start" and rec.phase == "off":
                status, detail = self.actuator.status(self.group(action.group))
                if status is GroupStatus.RUNNING:
                    self._write(rec.with_(phase="starting", since=action.intent_at, start_began_at=action.intent_at),
                                now, "started", f"found running after a restart ({detail})", node_state="active")
                    outcome = "ok"
            self.live.result(action.id, epoch=self.epoch, at=now, outcome=outcome,
                             detail=f"{action.detail}: no result recorded (controller restarted); settled by reconcile")
            notes.append(f"{action.group}: {action.kind} without a result -> {outcome}")
        for g in self.policy.fleet.groups:
            rec = self.records[g.name]
            if rec.phase != "off":
                continue
            status, detail = self.actuator.status(g)
            if status in (GroupStatus.RUNNING, GroupStatus.PARTIAL):
                notes.append(f"{g.name}: running although the records say off ({detail}); reconcile settles it")
                self._orphans.add(g.name)
        return notes

    # ---------------------------------------------------------------------------- reconcile
    def reconcile(self) -> TickReport:
        report = TickReport()
        self._read_gateway(report)
        for g in self.policy.fleet.groups:
            rec = self.records[g.name]
            try:
                step = getattr(self, f"_settle_{rec.phase}")
                step(g, rec, report)
            except RecordsUnavailable as exc:
                report.records_ok = False
                report.steps.append(f"{g.name}: {exc}")
                log.error("%s", exc)
                break
        else:
            self._reconciled = True
        return report

    def _settle_off(self, g: Group, rec: GroupRecord, report: TickReport) -> None:
        listed = self._listed_at(g.worker_url)
        now = self.clock()
        if not listed:
            if g.name in self._orphans and self._listed is not None:
                # Running, not in the gateway, and no record owns it: a leftover. Stop it.
                self._orphans.discard(g.name)
                result = self._act(g.name, "stop", f"stop leftover {g.name} (running, records say off)",
                                   lambda: self.actuator.stop(g, force=True))
                report.steps.append(f"{g.name}: stopped a leftover worker: {result.detail}")
                self._write(rec, now, "removed", f"a leftover worker was running; stopped ({result.detail})")
            return
        self._orphans.discard(g.name)
        if self.policy.lifecycle.unknown_worker is UnknownWorker.ADOPT and not rec.cordoned and any(
            w.healthy for w in listed
        ):
            worker = next(w for w in listed if w.healthy)
            report.steps.append(f"{g.name}: adopted worker {worker.id} the records called off")
            self._write(rec.with_(phase="ready", since=now, worker_id=worker.id, health_failures=0), now,
                        "adopted", f"the gateway lists {g.worker_url} (id {worker.id}) but the records said off",
                        node_state="active")
            return
        report.steps.append(f"{g.name}: removing {len(listed)} gateway entr(ies) the records call off")
        if self._deregister(rec):
            self._write(rec.with_(worker_id=None), now, "removed",
                        f"the gateway listed {g.worker_url} but the records said off; removed")

    def _settle_starting(self, g: Group, rec: GroupRecord, report: TickReport) -> None:
        now = self.clock()
        if self.actuator.kind == "command":
            status, detail = self.actuator.status(g)
            if status is GroupStatus.PARTIAL:
                self._fail(g, rec, report, f"one half of the pair is down ({detail})")
                return
        healthy, detail = self.probe.healthy(g.worker_url)
        if healthy:
            if self._listed is None:
                return  # register when the gateway answers
            try:
                worker_id = self._register(rec)
            except GatewayError as exc:
                report.steps.append(f"{g.name}: register failed: {exc}")
                return
            self._write(rec.with_(phase="registering", since=now, worker_id=worker_id), now, "registering",
                        f"POST /workers {g.worker_url} -> {worker_id}")
            self._settle_registering(g, self.records[g.name], report)
            return
        began = rec.start_began_at or rec.since
        if now - began > self.policy.lifecycle.health_deadline_s:
            self._fail(g, rec, report, f"no healthy /health within {self.policy.lifecycle.health_deadline_s:g} s ({detail})")

    def _settle_registering(self, g: Group, rec: GroupRecord, report: TickReport) -> None:
        if self._listed is None:
            return
        now = self.clock()
        listed = self._listed_at(g.worker_url)
        healthy = next((w for w in listed if w.healthy), None)
        if healthy is not None:
            began = rec.start_began_at or rec.since
            report.startup_samples.append(now - began)
            self._write(rec.with_(phase="ready", since=now, worker_id=healthy.id, attempts=0, retry_at=None,
                                  cause=None, health_failures=0), now, "ready",
                        f"listed healthy by the gateway; start-up took {now - began:.1f} s")
            return
        try:
            info = self.gateway.get(rec.worker_id) if rec.worker_id else None
        except GatewayError as exc:
            report.steps.append(f"{g.name}: {exc}")
            return
        if info is not None and info.job_status == "failed":
            self._fail(g, rec, report, f"the gateway could not add the worker: {info.job_message}")
            return
        if info is None:  # the gateway forgot the pending add (it restarted): add again
            try:
                worker_id = self._register(rec)
            except GatewayError as exc:
                report.steps.append(f"{g.name}: register failed: {exc}")
                return
            self._write(rec.with_(worker_id=worker_id), now, None)
            return
        if now - rec.since > self.policy.lifecycle.register_deadline_s:
            self._fail(g, rec, report,
                       f"the gateway did not list the worker healthy within {self.policy.lifecycle.register_deadline_s:g} s")

    def _settle_ready(self, g: Group, rec: GroupRecord, report: TickReport) -> None:
        now = self.clock()
        healthy, detail = self.probe.healthy(g.worker_url)
        if not healthy:
            failures = rec.health_failures + 1
            if failures >= self.policy.lifecycle.health_failures_before_failed:
                self._fail(g, rec, report, f"/health failed {failures} ticks in a row ({detail})")
                return
            self._write(rec.with_(health_failures=failures), now, None)
            report.steps.append(f"{g.name}: health failure {failures} ({detail})")
            return
        if rec.health_failures:
            rec = self._write(rec.with_(health_failures=0), now, None)
        if self._listed is not None and not self._listed_at(g.worker_url):
            # The gateway keeps its workers in memory: after a restart it comes back empty.
            try:
                worker_id = self._register(rec)
            except GatewayError as exc:
                report.steps.append(f"{g.name}: re-register failed: {exc}")
                return
            self._write(rec.with_(worker_id=worker_id), now, "reregistered",
                        f"the gateway did not list {g.worker_url}; POST /workers -> {worker_id}")
            report.steps.append(f"{g.name}: re-registered with the gateway")

    def _settle_draining(self, g: Group, rec: GroupRecord, report: TickReport) -> None:
        now = self.clock()
        drain = self.policy.drain
        if self._listed is None:
            report.steps.append(f"{g.name}: drain waits: the gateway cannot be read ({report.gateway_problem})")
            if now - rec.since > drain.timeout_s:
                report.alerts.append(f"{g.name}: drain past its timeout and the gateway is unreachable; not stopping")
            return
        if rec.removed_at is None or self._listed_at(g.worker_url):
            # First removal, or a pending add that appeared after the DELETE: (re)move, settle again.
            if self._deregister(rec):
                rec = self._write(rec.with_(removed_at=now, worker_id=None), now, None)
            return
        reading = self.probe.load(g.worker_url)
        in_flight = reading.in_flight
        if in_flight is None and self.actuator.status(g)[0] is GroupStatus.STOPPED:
            # The worker is gone (a crash between the stop and its record, or it died): nothing to drain.
            self._write(rec, now, "drained", f"the worker is already stopped ({reading.problem})")
            self._write(rec.with_(phase="off", since=now, removed_at=None, worker_id=None), now, "stopped",
                        "found stopped", node_state=self.actuator.stopped_power_state)
            return
        settled = reading.at >= rec.removed_at + drain.settle_s
        if settled and in_flight == 0:
            self._drained(g, rec, report, cut=0, detail=f"0 running + queued {reading.at - rec.removed_at:.1f} s after removal")
            return
        if now - rec.since > drain.timeout_s:
            left = "unknown" if in_flight is None else f"{in_flight:g}"
            if drain.on_timeout is OnDrainTimeout.STOP:
                cut = in_flight or 0
                self._drained(g, rec, report, cut=cut, timed_out=True,
                              detail=f"timeout after {drain.timeout_s:g} s; {left} requests cut")
            else:
                msg = f"{g.name}: drain timed out after {drain.timeout_s:g} s with {left} in flight; kept serving"
                report.alerts.append(msg)
                log.error("%s", msg)
                self._return_to_service(g, rec, report, f"drain timeout ({left} in flight); on_timeout keep_serving")

    def _drained(self, g: Group, rec: GroupRecord, report: TickReport, *, cut: float, detail: str,
                 timed_out: bool = False) -> None:
        now = self.clock()
        report.drains_finished.append((g.name, now - rec.since, cut))
        if not timed_out and self.recheck is not None and self.recheck(g.name, now):
            self._return_to_service(g, rec, report, f"drained ({detail}), but the core wants it back")
            return
        self._write(rec, now, "drained", detail)
        self._stop(g, rec, report, force=timed_out)

    def _return_to_service(self, g: Group, rec: GroupRecord, report: TickReport, why: str) -> None:
        now = self.clock()
        try:
            worker_id = self._register(rec) if rec.removed_at is not None or not self._listed_at(g.worker_url) else rec.worker_id
        except GatewayError as exc:
            report.steps.append(f"{g.name}: could not return to service: {exc}")
            return
        self._write(rec.with_(phase="registering", since=now, worker_id=worker_id, removed_at=None,
                              start_began_at=now), now, "drain_cancelled", why)

    def _stop(self, g: Group, rec: GroupRecord, report: TickReport, *, force: bool = False) -> None:
        now = self.clock()
        result = self._act(g.name, "stop", f"stop {g.name}" + (" (forced)" if force else ""),
                           lambda: self.actuator.stop(g, force=force))
        if not result.ok:
            report.steps.append(f"{g.name}: stop failed: {result.detail}")
        self._write(rec.with_(phase="stopping", since=now, worker_id=None), now, "stopping", result.detail)

    def _settle_stopping(self, g: Group, rec: GroupRecord, report: TickReport) -> None:
        now = self.clock()
        status, detail = self.actuator.status(g)
        if status is GroupStatus.STOPPED:
            self._write(rec.with_(phase="off", since=now, removed_at=None, health_failures=0), now, "stopped", detail,
                        node_state=self.actuator.stopped_power_state)
            return
        waited = now - rec.since
        if waited > self.policy.lifecycle.stop_deadline_s:
            self._act(g.name, "stop", f"stop {g.name} again (forced): still {status.value} after {waited:.0f} s",
                      lambda: self.actuator.stop(g, force=True))
            if waited > 2 * self.policy.lifecycle.stop_deadline_s:
                self._write(rec.with_(phase="failed", since=now, cause=f"did not stop: {detail}"), now, "failed",
                            f"did not stop within {2 * self.policy.lifecycle.stop_deadline_s:g} s ({detail})")

    def _settle_failed(self, g: Group, rec: GroupRecord, report: TickReport) -> None:
        now = self.clock()
        if self._listed_at(g.worker_url):
            self._deregister(rec)
        if rec.cordoned or rec.retry_at is None or now < rec.retry_at:
            return
        status, detail = self.actuator.status(g)
        if status is GroupStatus.RUNNING or status is GroupStatus.PARTIAL:
            self._act(g.name, "stop", f"stop the failed {g.name} before a retry", lambda: self.actuator.stop(g, force=True))
            return
        # Back off done: startable again (the core decides whether to start it).
        self._write(rec.with_(phase="off", since=now), now, None, node_state=self.actuator.stopped_power_state
                    if status is GroupStatus.STOPPED else None)

    def _fail(self, g: Group, rec: GroupRecord, report: TickReport, cause: str) -> None:
        """Take the group out of the gateway, stop what is up, record the failure; retry with
        backoff; after the last retry, cordon it with the cause."""
        now = self.clock()
        if self._listed is not None:
            self._deregister(rec)
        result = self._act(g.name, "stop", f"stop the failed {g.name}", lambda: self.actuator.stop(g, force=True))
        lc = self.policy.lifecycle
        attempts = rec.attempts + 1
        cordon = attempts > lc.start_retries
        retry_at = None if cordon else now + lc.backoff_s(attempts)
        detail = cause + (f"; cordoned after {attempts} failed attempts (uncordon to retry)" if cordon
                          else f"; retry {attempts}/{lc.start_retries} after {lc.backoff_s(attempts):g} s")
        report.steps.append(f"{g.name}: failed: {detail}")
        log.warning("group %s failed: %s", g.name, detail)
        status, _ = self.actuator.status(g) if result.ok else (GroupStatus.UNKNOWN, "")
        node_state = self.actuator.stopped_power_state if status is GroupStatus.STOPPED else None
        self._write(rec.with_(phase="failed", since=now, worker_id=None, attempts=attempts, retry_at=retry_at,
                              cordoned=rec.cordoned or cordon, cause=cause, removed_at=None, health_failures=0),
                    now, "failed", detail, node_state=node_state)
        if cordon:
            self._write(self.records[g.name], now, "cordoned", f"after {attempts} failed attempts: {cause}")

    # ---------------------------------------------------------------------------- apply
    def apply(self, decision: Decision, *, decision_id: int | None = None) -> list[str]:
        """Carry out a scale_up or scale_down. Returns one line per step taken."""
        done: list[str] = []
        if decision.action is Action.SCALE_UP:
            for name in decision.groups or ((decision.group,) if decision.group else ()):
                done.append(self._start(name, decision_id))
        elif decision.action is Action.SCALE_DOWN and decision.group:
            done.append(self._begin_drain(decision.group, decision_id))
        return done

    def _start(self, name: str, decision_id: int | None) -> str:
        g, rec = self.group(name), self.records[name]
        now = self.clock()
        if rec.phase == "draining":
            report = TickReport()
            self._read_gateway(report)
            self._return_to_service(g, rec, report, "a scale-up took the draining group back")
            return f"{name}: returned to service from draining"
        if rec.phase != "off":
            return f"{name}: not started: it is {rec.phase}"
        result = self._act(name, "start", f"start {name} ({', '.join(n.name for n in g.nodes)})",
                           lambda: self.actuator.start(g))
        if not result.ok:
            report = TickReport()
            self._fail(g, rec.with_(phase="starting", since=now, start_began_at=now), report, result.detail)
            return f"{name}: start failed: {result.detail}"
        self._write(rec.with_(phase="starting", since=now, start_began_at=now, removed_at=None, worker_id=None,
                              health_failures=0), now, "started", result.detail, node_state="active",
                    decision_id=decision_id)
        return f"{name}: starting"

    def _begin_drain(self, name: str, decision_id: int | None) -> str:
        _g, rec = self.group(name), self.records[name]  # group() refuses an unknown name
        if rec.phase != "ready":
            return f"{name}: not drained: it is {rec.phase}"
        now = self.clock()
        rec = self._write(rec.with_(phase="draining", since=now, removed_at=None), now, "drain_started",
                          "removing from the gateway; waiting for its own running + queued to reach 0",
                          decision_id=decision_id)
        report = TickReport()
        self._read_gateway(report)
        if self._listed is not None and self._deregister(rec):
            self._write(rec.with_(removed_at=self.clock(), worker_id=None), self.clock(), None)
        return f"{name}: draining"

    def cordon(self, name: str, cordoned: bool, why: str) -> None:
        """Mark a group cordoned (kept out of service) or not; the core decides the drain."""
        rec = self.records.get(name)
        if rec is None or rec.cordoned == cordoned:
            return
        now = self.clock()
        changes: dict = {"cordoned": cordoned}
        if cordoned:
            changes["cause"] = why
        else:
            changes.update(attempts=0, retry_at=None, cause=None)
            if rec.phase == "failed":
                changes.update(phase="off", since=now)
        self._write(rec.with_(**changes), now, "cordoned" if cordoned else "uncordoned", why)

