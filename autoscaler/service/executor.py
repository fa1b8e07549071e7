"""The executor: carries the core's decisions out on a real fleet, and reconciles every tick.

It never decides. Each tick the service calls ``reconcile`` (compare what the records say with
what the gateway and the actuator report, and make one idempotent step per group), then asks the
core with ``fleet_state()``, then ``apply``s the decision.

**Mark, intent, act, result.** Every side effect is preceded by one ledger transaction that
writes the group's new phase (the *mark*: ``starting`` before the start command, ``draining``
before the gateway removal, ``stopping`` before the stop command), the node power state and the
journal's *intent*, with the leader's epoch; then the act runs; then its result is written. So
after a crash at any point there is nothing to "recover": the next reconcile finds a group in
``starting`` or ``stopping`` and reads its real state until it settles (Karpenter taints a node
before it deletes it for the same reason). Every phase change is checked against
``ledger.live.TRANSITIONS``. When a record cannot be written, no act starts (``RecordsUnavailable``).

**Act only while leading.** ``Fence.may_act()`` is checked immediately before every act (after
its intent is written: a leader frozen between the two does not act when it wakes), and polled
while a command runs: losing the lease, or the shutdown's cut, kills the command's process group
and records the act as ``interrupted``. A new leader treats an older epoch's open intent as still
in flight until that act's timeout has passed: no act on that group before then.

A group's life (``fleet_groups.phase``)::

    off -> starting -> registering -> ready -> draining -> stopping -> off
                (any step) -> failed -> (taken down, then after the retry backoff) off, or cordoned

- starting: the start was issued; waiting for the worker's /health (deadline
  ``lifecycle.health_deadline_s``). A command actuator's pair with one half down fails at once.
- registering: ``POST /workers`` sent; waiting until the gateway lists the worker healthy
  (deadline ``lifecycle.register_deadline_s`` from the worker's first healthy answer, also while
  the gateway cannot be used; or the gateway's job failed).
- ready: serving. Its /health is read every tick (timeout ``lifecycle.health_timeout_s``); it is
  failed when ``lifecycle.health_failures_before_failed`` probes in a row fail, or when a probe
  fails and the gateway also lists it unhealthy. A gateway that restarted (it keeps workers in
  memory only) gets the group back (``reregistered``).
- draining: removed from the gateway (every id listed at the group's URL, again each tick: a
  DELETE during a pending add does not cancel it). It is drained when a reading of the worker's
  *own* running + queued, taken at least ``drain.settle_s`` after the removal, is 0. Then the core
  is asked again (``recheck``): a scale-up that wants the group back returns it to service;
  otherwise it is stopped. At ``drain.timeout_s``: ``stop`` (cut and count what is left, or
  "unknown" when the worker cannot be read) or ``keep_serving``. A group is never stopped while
  it may still be registered: when the gateway cannot be read, the drain waits.
- failed: a group that served (registering, ready, draining) is taken down like a drain: out of
  the gateway, stopped once its own in-flight count is 0 or at the drain timeout, never while the
  gateway cannot be read or the DELETE failed. One that never registered is stopped at once. Its
  nodes are charged as active until its status reads stopped.
- stopping: the stop was issued; off once the actuator reports the group stopped.

**Status sweep.** At the first reconcile and every ``lifecycle.status_sweep_s`` after, the status
of every group is read whatever the records say. A group running that the records call off is
adopted (taken through starting -> registering -> ready) or stopped, as
``lifecycle.unknown_worker`` says, and charged from its last start's intent; a group the records
call ready that is not running is failed and replaced.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from autoscaler.actuators.base import ActContext, ActResult, Actuator, GroupStatus
from autoscaler.adapters.gateway import GatewayClient, GatewayError, GatewayWorker, normalise_url
from autoscaler.adapters.worker_probe import WorkerProbe
from autoscaler.core.types import Action, Decision, FleetState, GroupState, Phase
from autoscaler.errors import RuntimeFailure
from autoscaler.faults import fault_point
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
SERVED = ("registering", "ready", "draining")  # phases in which the gateway may have routed requests to it


class RecordsUnavailable(RuntimeFailure):
    """The ledger refused a write: no new action starts until it accepts writes again."""


class NotLeading(RuntimeFailure):
    """This instance may not act now (leadership lost, or the shutdown cut the act in flight)."""


class GroupBusy(RuntimeFailure):
    """An older leader's act on this group may still be running: no act on it before its timeout."""


@dataclass
class Fence:
    """Whether this instance may act at this moment. ``leading`` is the lease's local check (True
    only within the renew deadline of the last renewal); ``cut`` is set by the shutdown when its
    budget runs out. Tests and single-process tools use the default: always leading."""

    leading: Callable[[], bool] = lambda: True
    instance: str = "local"
    cut: threading.Event = field(default_factory=threading.Event)
    epoch: Callable[[], int] | None = None  # the lease's epoch now: an act needs the executor's own
    stopping: threading.Event = field(default_factory=threading.Event)  # SIGTERM: no new act starts

    def may_act(self, epoch: int | None = None) -> bool:
        """May an act of ``epoch`` run (or go on running) now? Never after a takeover, even if
        this instance took the lease back with a newer epoch (it woke from a freeze)."""
        if self.cut.is_set() or not self.leading():
            return False
        return epoch is None or self.epoch is None or self.epoch() == epoch


@dataclass
class TickReport:
    """What one reconcile saw and did, for the service's log line, metrics and tests."""

    gateway_ok: bool = True
    gateway_problem: str | None = None
    steps: list[str] = field(default_factory=list)
    startup_samples: list[float] = field(default_factory=list)  # measured start-ups that completed
    drains_finished: list[tuple[str, float, float | None]] = field(default_factory=list)  # (group, s, cut or None)
    records_ok: bool = True
    alerts: list[str] = field(default_factory=list)
    swept: bool = False  # the status of every group was read this tick


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
        fence: Fence | None = None,
    ) -> None:
        self.policy = policy
        self.live = live
        self.gateway = gateway
        self.actuator = actuator
        self.probe = probe
        self.run_id = run_id
        self.epoch = epoch
        self.clock = clock
        self.fence = fence or Fence()
        self.records = self._load_records()
        self.recheck: Recheck | None = None
        self._listed: list[GatewayWorker] | None = None  # this tick's gateway listing (None: unreadable)
        self._reconciled = False
        self._swept_at: float | None = None
        self._busy: dict[str, tuple[float, int, str]] = {}  # group -> (until, action id, what): an older act
        self._healthy_at: dict[str, float] = {}  # when a starting group's worker first answered /health
        self.node_states: dict[str, tuple[str, float]] = {}  # group -> (power state charged, since)
        self.interrupted_acts = 0  # acts cut before they finished (for the service's metric)

    # ---------------------------------------------------------------------------- state
    def _load_records(self) -> dict[str, GroupRecord]:
        stored = self.live.groups()
        now = self.clock()
        kept = set(self.policy.fleet.group_names())
        dropped = [f"{n} ({r.phase})" for n, r in stored.items() if n not in kept and r.phase != "off"]
        if dropped:
            # A group the policy no longer names but the records say may run: never silently forgotten.
            raise RuntimeFailure(f"the records say {', '.join(dropped)} may be running but the policy does not name "
                                 f"it: put it back in fleet.groups (then `autoscaler cordon` drains and stops it)")
        out: dict[str, GroupRecord] = {}
        for g in self.policy.fleet.groups:
            rec = stored.get(g.name) or GroupRecord(g.name, "off", now, worker_url=g.worker_url)
            out[g.name] = rec.with_(worker_url=g.worker_url) if rec.worker_url != g.worker_url else rec
        return out

    def set_policy(self, policy: Policy, actuator: Actuator | None = None) -> None:
        """A reloaded policy, applied between ticks: groups it adds start off; a new actuator (its
        templates or timeouts changed) replaces the old one. The service refuses an edit that drops
        a group that is not off, so every recorded group is still in the fleet."""
        self.policy = policy
        if actuator is not None and actuator is not self.actuator:
            self.actuator.close()
            self.actuator = actuator
        self.probe.health_timeout_s = policy.lifecycle.health_timeout_s
        # Workers are probed at the policy's URLs (self.group(...).worker_url): an old one never again.
        self.probe.retain({g.worker_url for g in policy.fleet.groups})
        now = self.clock()
        # Read only when a group is added: a reload must not fail half way on a read it does not need.
        stored = self.live.groups() if any(g.name not in self.records for g in policy.fleet.groups) else {}
        for g in policy.fleet.groups:
            if g.name not in self.records:  # a group added back keeps what the records say of it
                rec = stored.get(g.name) or GroupRecord(g.name, "off", now, worker_url=g.worker_url)
                self.records[g.name] = rec.with_(worker_url=g.worker_url)
        for name in list(self.records):
            if name not in policy.fleet.group_names():
                del self.records[name]  # off (checked by the service): nothing left to reconcile

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
            if phase is Phase.OFF and ((rec.retry_at is not None and now < rec.retry_at)
                                       or g.name in self._busy):
                phase = Phase.FAILED  # not startable now: backoff, or an older leader's act may still run
            groups[g.name] = GroupState(g.name, phase, rec.since, cordoned=rec.cordoned)
        # Synced once a reconcile has read the records and settled each group. An unreachable gateway
        # does not unsync the fleet: the records say what each group is; registrations and drains
        # wait for the gateway, but a scale-up (starting nodes) need not.
        return FleetState(groups, synced=self._reconciled)

    def init_node_states(self, now: float) -> None:
        """A new run opens an interval for every node in its power state: active in every phase but
        off; a failed group as its status says (charged until it reads stopped)."""
        off_state = self.actuator.stopped_power_state
        failed = [self.group(n) for n, r in self.records.items() if r.phase == "failed"]
        statuses = self._statuses(failed) if failed else {}
        for name, rec in self.records.items():
            if rec.phase == "off":
                state = off_state
            elif rec.phase == "failed":
                state = off_state if statuses[name][0] is GroupStatus.STOPPED else "active"
            else:
                state = "active"
            self.live.set_nodes(self.run_id, name, state, now)
            self.node_states[name] = (state, now)

    def _write(self, rec: GroupRecord, now: float, event: str | None = None, detail: str = "",
               node_state: str | None = None, decision_id: int | None = None,
               intent: tuple[str, str] | None = None, charged_from: float | None = None) -> int | None:
        """One transaction: the group's record, its event, its nodes' power state (from
        ``charged_from``, default ``now``) and the intent of the act it marks."""
        node_at = now
        if node_state is not None and charged_from is not None:
            # Never before the group's open interval began (the run's start, or its last change).
            node_at = min(now, max(charged_from, self.node_states.get(rec.name, ("", 0.0))[1]))
        old_phase = self.records[rec.name].phase if rec.name in self.records else None
        try:
            action_id = self.live.transition(rec, epoch=self.epoch, at=now, run_id=self.run_id, event=event,
                                             detail=detail, node_state=node_state, decision_id=decision_id,
                                             intent=intent, node_at=node_at)
        except RuntimeFailure as exc:
            raise RecordsUnavailable(f"records unavailable: {exc}") from exc
        self.records[rec.name] = rec
        if node_state is not None:
            self.node_states[rec.name] = (node_state, node_at)
        if event:
            log.info("group %s: %s%s", rec.name, event, f" ({detail})" if detail else "")
        if rec.phase != old_phase:
            fault_point(f"after_mark:{rec.phase}")
        return action_id

    def _ctx(self) -> ActContext:
        return ActContext(self.epoch, self.fence.instance, abort=lambda: not self.fence.may_act(self.epoch))

    def _may_act(self, group: str, kind: str) -> None:
        if self.fence.stopping.is_set():
            raise NotLeading(f"shutting down: {kind} {group} not started")
        if not self.fence.may_act(self.epoch):
            raise NotLeading(f"not leading: {kind} {group} not done")
        busy = self._busy.get(group)
        if busy is not None:
            until, _, what = busy
            if self.clock() < until:
                raise GroupBusy(f"{group}: {what} may still be running until {until - self.clock():.0f} s from now; "
                                f"no {kind} before then")

    def _act(self, group: str, kind: str, detail: str, act: Callable[[ActContext], ActResult], *,
             mark: GroupRecord | None = None, event: str | None = None, node_state: str | None = None,
             decision_id: int | None = None, charged_from: float | None = None) -> ActResult:
        """Mark and intent (one transaction), act, result. No intent written -> no act. The fence is
        checked after the intent and just before the act, and polled during it."""
        self._may_act(group, kind)
        now = self.clock()
        if mark is not None:
            action_id = self._write(mark, now, event, detail, node_state=node_state, decision_id=decision_id,
                                    intent=(kind, detail), charged_from=charged_from)
            assert action_id is not None
        else:
            try:
                action_id = self.live.intent(epoch=self.epoch, group=group, kind=kind, at=now, detail=detail,
                                             run_id=self.run_id)
            except RuntimeFailure as exc:
                raise RecordsUnavailable(f"records unavailable, not doing {kind} {group}: {exc}") from exc
        fault_point(f"before_act:{kind}")
        if not self.fence.may_act(self.epoch):
            # Frozen or deposed between the intent and the act: never act. The result write is
            # refused by the database if another leader took over; the new one settles the intent.
            log.error("%s %s not done: leadership lost between its intent and the act", kind, group)
            self._result(action_id, kind, group, ActResult(False, "not done: leadership lost before the act",
                                                           interrupted=True), detail)
            raise NotLeading(f"not leading: {kind} {group} not done")
        result = act(self._ctx())
        fault_point(f"after_act:{kind}")
        self._result(action_id, kind, group, result, detail)
        if result.interrupted:
            raise NotLeading(f"{kind} {group} interrupted: {result.detail}")
        return result

    def _result(self, action_id: int, kind: str, group: str, result: ActResult, detail: str) -> None:
        outcome = "interrupted" if result.interrupted else ("ok" if result.ok else "failed")
        if result.interrupted:
            self.interrupted_acts += 1
        try:
            self.live.result(action_id, epoch=self.epoch, at=self.clock(), outcome=outcome,
                             detail=f"{detail}: {result.detail}", exit_code=result.exit_code,
                             output_tail=result.output_tail)
        except RuntimeFailure as exc:
            log.error("records unavailable after %s %s (%s); the next reconcile settles it", kind, group, exc)

    def _gateway_act(self, group: str, kind: str, detail: str, call: Callable[[], ActResult]) -> ActResult:
        """A gateway call as a journalled act (no mark: the phase is written after it)."""
        return self._act(group, kind, detail, lambda _ctx: call())

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

        def call() -> ActResult:
            try:
                box["id"] = self.gateway.add(rec.worker_url or self.group(rec.name).worker_url)
            except GatewayError as exc:
                return ActResult(False, str(exc))
            return ActResult(True, f"worker id {box['id']}")

        result = self._gateway_act(rec.name, "register", f"POST /workers {rec.worker_url}", call)
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
            def call(worker_id=worker_id) -> ActResult:
                try:
                    known = self.gateway.remove(worker_id)
                except GatewayError as exc:
                    return ActResult(False, str(exc))
                return ActResult(True, "removed" if known else "the gateway did not know it")

            ok = self._gateway_act(rec.name, "deregister", f"DELETE /workers/{worker_id}", call).ok and ok
        return ok

    # ---------------------------------------------------------------------------- older acts
    def _act_timeout_s(self, kind: str) -> float:
        """How long an act of ``kind`` can run at most: a command actuator's start runs up to four
        commands per node in a row (power_on, start, then stop and power_off of the half that came
        up), a stop two (stop, power_off), each bounded by ``timeout_s``."""
        if kind in ("register", "deregister"):
            return 30.0
        timeout = getattr(self.policy.actuator, "timeout_s", 60.0)
        if self.actuator.kind != "command":
            return 15.0
        return (4 if kind == "start" else 2) * timeout + 5.0

    def _settle_open_intents(self, now: float, report: TickReport) -> None:
        """Intents without a result from an older epoch (a crash, or a leader deposed mid-act): each
        may still be running until its timeout; then it is settled as abandoned. The row keeps its
        epoch; this leader's goes into ``result_epoch``."""
        for action in self.live.open_actions():
            if action.epoch >= self.epoch:
                continue  # this leader's own: its acts run in this thread, so none is still running
            until = action.intent_at + self._act_timeout_s(action.kind)
            what = f"{action.kind} by epoch {action.epoch} (intent at {action.intent_at:.0f})"
            if now < until:
                if action.group not in self._busy:
                    report.steps.append(f"{action.group}: {what} has no result; no act on it for "
                                        f"{until - now:.0f} s (its timeout)")
                    log.warning("group %s: %s has no result; waiting for its timeout before acting on it",
                                action.group, what)
                self._busy[action.group] = (until, action.id, what)
                continue
            self._busy.pop(action.group, None)
            try:
                self.live.result(action.id, epoch=self.epoch, at=now, outcome="abandoned",
                                 detail=f"{action.detail}: no result recorded by epoch {action.epoch}; its timeout "
                                        f"passed; settled by reconcile (epoch {self.epoch})")
            except RuntimeFailure as exc:
                raise RecordsUnavailable(f"records unavailable: {exc}") from exc
            report.steps.append(f"{action.group}: settled {what} as abandoned")

    # ---------------------------------------------------------------------------- reconcile
    def _status(self, g: Group) -> tuple[GroupStatus, str]:
        # The status commands get the epoch and instance too: a site's script may log or check them.
        return self.actuator.status(g, ctx=ActContext(self.epoch, self.fence.instance))

    def _statuses(self, groups: Iterable[Group]) -> dict[str, tuple[GroupStatus, str]]:
        groups = list(groups)
        many = getattr(self.actuator, "status_many", None)
        if many is not None:
            return many(groups, ctx=ActContext(self.epoch, self.fence.instance))
        return {g.name: self._status(g) for g in groups}

    def reconcile(self) -> TickReport:
        report = TickReport()
        now = self.clock()
        self._read_gateway(report)
        statuses: dict[str, tuple[GroupStatus, str]] = {}
        try:
            if not self._reconciled or self._busy:  # older epochs' intents: read once, then while any wait
                self._settle_open_intents(now, report)
            sweep_every = self.policy.lifecycle.status_sweep_s
            if self._swept_at is None or now - self._swept_at >= sweep_every:
                statuses = self._statuses(self.policy.fleet.groups)
                self._swept_at, report.swept = now, True
            else:  # between sweeps: only the failed groups still charged as active
                up = [self.group(n) for n, r in self.records.items()
                      if r.phase == "failed" and self.node_states.get(n, ("active", 0))[0] == "active"]
                statuses = self._statuses(up) if up else {}
        except RecordsUnavailable as exc:
            report.records_ok = False
            report.steps.append(str(exc))
            return report
        for g in self.policy.fleet.groups:
            rec = self.records[g.name]
            try:
                step = getattr(self, f"_settle_{rec.phase}")
                step(g, rec, report, statuses.get(g.name))
            except GroupBusy as exc:
                report.steps.append(str(exc))
            except NotLeading as exc:
                report.steps.append(str(exc))
                log.warning("%s", exc)
                return report
            except RecordsUnavailable as exc:
                report.records_ok = False
                report.steps.append(f"{g.name}: {exc}")
                log.error("%s", exc)
                return report
        self._reconciled = True
        return report

    def _settle_off(self, g: Group, rec: GroupRecord, report: TickReport, status) -> None:
        listed = self._listed_at(g.worker_url)
        now = self.clock()
        running = status is not None and status[0] in (GroupStatus.RUNNING, GroupStatus.PARTIAL)
        adopt = self.policy.lifecycle.unknown_worker is UnknownWorker.ADOPT and not rec.cordoned
        if listed and adopt and any(w.healthy for w in listed):
            worker = next(w for w in listed if w.healthy)
            report.steps.append(f"{g.name}: adopted worker {worker.id} the records called off")
            self._write(rec.with_(phase="ready", since=now, worker_id=worker.id, health_failures=0), now,
                        "adopted", f"the gateway lists {g.worker_url} (id {worker.id}) but the records said off",
                        node_state="active", charged_from=self.live.last_start_intent(g.name) or now)
            return
        if listed:
            report.steps.append(f"{g.name}: removing {len(listed)} gateway entr(ies) the records call off")
            if self._deregister(rec):
                self._write(rec.with_(worker_id=None), now, "removed",
                            f"the gateway listed {g.worker_url} but the records said off; removed")
            return
        if not running:
            return
        assert status is not None
        started = self.live.last_start_intent(g.name) or now
        if adopt and status[0] is GroupStatus.RUNNING:
            # Running and not in the gateway: take it through the normal start-up (health, register).
            report.steps.append(f"{g.name}: running although the records said off; adopted as starting")
            self._write(rec.with_(phase="starting", since=now, start_began_at=now, worker_id=None, removed_at=None,
                                  health_failures=0), now, "adopted",
                        f"running although the records said off ({status[1]}); charged from its last start",
                        node_state="active", charged_from=started)
            return
        # unknown_worker: remove (or half a pair up): stop it; charged as active until it reads stopped.
        report.steps.append(f"{g.name}: running although the records say off; stopping it")
        self._act(g.name, "stop", f"stop leftover {g.name} (running, records say off: {status[1]})",
                  lambda ctx: self.actuator.stop(g, force=True, ctx=ctx),
                  mark=rec.with_(phase="stopping", since=now, worker_id=None), event="stopping",
                  node_state="active", charged_from=started)

    def _settle_starting(self, g: Group, rec: GroupRecord, report: TickReport, status) -> None:
        now = self.clock()
        if g.name in self._busy:
            # An older leader's start without a result (it crashed around the act): charged by what
            # the status reads until that act's timeout, not as active on the mark's word alone.
            state = (status or self._status(g))[0]
            charged = self.node_states.get(g.name, ("active", now))[0]
            if state is GroupStatus.STOPPED and charged == "active":
                self._write(rec, now, None, node_state=self.actuator.stopped_power_state)
            elif state in (GroupStatus.RUNNING, GroupStatus.PARTIAL) and charged != "active":
                self._write(rec, now, None, node_state="active")
            return  # no act on it (register, fail, stop) before the older act's timeout
        if self.actuator.kind == "command":
            status = status or self._status(g)
            if status[0] is GroupStatus.PARTIAL:
                self._fail(g, rec, report, f"one half of the pair is down ({status[1]})")
                return
        began = rec.start_began_at or rec.since
        healthy, detail = self.probe.healthy(g.worker_url)
        if healthy:
            healthy_at = self._healthy_at.setdefault(g.name, now)
            if self._listed is None:
                # Registration waits for the gateway, but not for ever: the register deadline runs
                # from the worker's first healthy answer.
                waited = now - healthy_at
                msg = (f"{g.name}: healthy, waiting {waited:.0f} s for the gateway to register it "
                       f"({report.gateway_problem})")
                report.steps.append(msg)
                if waited > self.policy.lifecycle.register_deadline_s:
                    self._fail(g, rec, report, f"the gateway could not be used for "
                               f"{self.policy.lifecycle.register_deadline_s:g} s ({report.gateway_problem})")
                return
            listed = self._listed_at(g.worker_url)
            if listed:  # registered already (a crash between the POST and its record): take its id
                worker_id = listed[0].id
            else:
                try:
                    worker_id = self._register(rec)
                except GatewayError as exc:
                    report.steps.append(f"{g.name}: register failed: {exc}")
                    return
            self._write(rec.with_(phase="registering", since=now, worker_id=worker_id), now, "registering",
                        f"POST /workers {g.worker_url} -> {worker_id}; the worker answered /health "
                        f"{healthy_at - began:.1f} s after its start")
            self._settle_registering(g, self.records[g.name], report, None)
            return
        if now - began > self.policy.lifecycle.health_deadline_s:
            self._fail(g, rec, report, f"no healthy /health within {self.policy.lifecycle.health_deadline_s:g} s ({detail})")

    def _settle_registering(self, g: Group, rec: GroupRecord, report: TickReport, status) -> None:
        now = self.clock()
        healthy_at = self._healthy_at.get(g.name, rec.since)
        if self._listed is None:
            if now - rec.since > self.policy.lifecycle.register_deadline_s:
                self._fail(g, rec, report, f"the gateway could not be used for "
                           f"{self.policy.lifecycle.register_deadline_s:g} s ({report.gateway_problem})")
            return
        listed = self._listed_at(g.worker_url)
        healthy = next((w for w in listed if w.healthy), None)
        if healthy is not None:
            began = rec.start_began_at or rec.since
            # The start-up sample is the worker's own: from the start to its first healthy /health,
            # not the wait on the gateway (which may have been unusable).
            startup = (healthy_at if g.name in self._healthy_at else now) - began
            self._healthy_at.pop(g.name, None)
            report.startup_samples.append(startup)
            self._write(rec.with_(phase="ready", since=now, worker_id=healthy.id, attempts=0, retry_at=None,
                                  cause=None, health_failures=0), now, "ready",
                        f"listed healthy by the gateway; start-up took {startup:.1f} s",
                        node_state="active" if self.node_states.get(g.name, ("active", 0))[0] != "active" else None)
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

    def _settle_ready(self, g: Group, rec: GroupRecord, report: TickReport, status) -> None:
        now = self.clock()
        if status is not None and status[0] is GroupStatus.STOPPED:
            self._fail(g, rec, report, f"the records say ready but it is not running ({status[1]})")
            return
        healthy, detail = self.probe.healthy(g.worker_url)
        if not healthy:
            failures = rec.health_failures + 1
            listed = self._listed_at(g.worker_url) if self._listed is not None else []
            gateway_unhealthy = bool(listed) and not any(w.healthy for w in listed)
            if failures >= self.policy.lifecycle.health_failures_before_failed or gateway_unhealthy:
                why = (f"/health failed {failures} probe(s) in a row ({detail})"
                       + ("; the gateway also lists it unhealthy" if gateway_unhealthy else ""))
                self._fail(g, rec, report, why)
                return
            self._write(rec.with_(health_failures=failures), now, None)
            report.steps.append(f"{g.name}: health failure {failures} ({detail})")
            return
        if rec.health_failures:
            self._write(rec.with_(health_failures=0), now, None)
            rec = self.records[g.name]
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

    def _out_of_gateway(self, g: Group, rec: GroupRecord, report: TickReport, now: float) -> GroupRecord | None:
        """Remove the group from the gateway (again while it is listed: a pending add appears after
        a DELETE). Returns the record once it is out (``removed_at`` set), None while it may still
        be registered (the gateway unreadable, a DELETE failed, or just removed: settle first)."""
        if self._listed is None:
            report.steps.append(f"{g.name}: waits: the gateway cannot be read ({report.gateway_problem})")
            return None
        if rec.removed_at is None or self._listed_at(g.worker_url):
            if self._deregister(rec):
                self._write(rec.with_(removed_at=now, worker_id=None), now, None)
            else:
                report.steps.append(f"{g.name}: waits: the gateway refused the DELETE")
            return None
        return rec

    def _settle_draining(self, g: Group, rec: GroupRecord, report: TickReport, status) -> None:
        now = self.clock()
        drain = self.policy.drain
        out = self._out_of_gateway(g, rec, report, now)
        if out is None:
            if self._listed is None and now - rec.since > drain.timeout_s:
                report.alerts.append(f"{g.name}: drain past its timeout and the gateway is unreachable; not stopping")
            return
        rec = out
        assert rec.removed_at is not None
        reading = self.probe.load(g.worker_url)
        in_flight = reading.in_flight
        if in_flight is None and (status or self._status(g))[0] is GroupStatus.STOPPED:
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
                self._drained(g, rec, report, cut=in_flight, timed_out=True,
                              detail=f"timeout after {drain.timeout_s:g} s; {left} requests cut")
            else:
                msg = f"{g.name}: drain timed out after {drain.timeout_s:g} s with {left} in flight; kept serving"
                report.alerts.append(msg)
                log.error("%s", msg)
                self._return_to_service(g, rec, report, f"drain timeout ({left} in flight); on_timeout keep_serving")

    def _drained(self, g: Group, rec: GroupRecord, report: TickReport, *, cut: float | None, detail: str,
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
        detail = f"stop {g.name}" + (" (forced)" if force else "")
        result = self._act(g.name, "stop", detail, lambda ctx: self.actuator.stop(g, force=force, ctx=ctx),
                           mark=rec.with_(phase="stopping", since=now, worker_id=None), event="stopping")
        if not result.ok:
            report.steps.append(f"{g.name}: stop failed: {result.detail}")

    def _settle_stopping(self, g: Group, rec: GroupRecord, report: TickReport, status) -> None:
        now = self.clock()
        state, detail = status or self._status(g)
        if state is GroupStatus.STOPPED:
            self._write(rec.with_(phase="off", since=now, removed_at=None, health_failures=0), now, "stopped", detail,
                        node_state=self.actuator.stopped_power_state)
            return
        waited = now - rec.since
        deadline = self.policy.lifecycle.stop_deadline_s
        if waited > deadline:
            if waited > 2 * deadline:
                self._write(rec.with_(phase="failed", since=now, cause=f"did not stop: {detail}", stop_issued_at=now,
                                      retry_at=now + self.policy.lifecycle.backoff_s(max(1, rec.attempts + 1))),
                            now, "failed", f"did not stop within {2 * deadline:g} s ({detail})")
            self._act(g.name, "stop", f"stop {g.name} again (forced): still {state.value} after {waited:.0f} s",
                      lambda ctx: self.actuator.stop(g, force=True, ctx=ctx))

    def _settle_failed(self, g: Group, rec: GroupRecord, report: TickReport, status) -> None:
        now = self.clock()
        if rec.stop_issued_at is None:
            self._take_down(g, rec, report, status, now)
            return
        if status is not None:
            charged = self.node_states.get(g.name, ("active", now))[0]
            if status[0] is GroupStatus.STOPPED and charged == "active":
                self._write(rec, now, None, node_state=self.actuator.stopped_power_state)
            elif status[0] in (GroupStatus.RUNNING, GroupStatus.PARTIAL) and charged != "active":
                self._write(rec, now, None, node_state="active")
        if self._listed_at(g.worker_url):
            self._deregister(rec)
        running = status is not None and status[0] in (GroupStatus.RUNNING, GroupStatus.PARTIAL)
        if running and now - rec.stop_issued_at > self.policy.lifecycle.stop_deadline_s:
            # Its stop failed, was cut or never ran (a crash between the mark and the act): stop it
            # again, cordoned or not, in backoff or not. A failed group is never left running.
            self._act(g.name, "stop", f"stop the failed {g.name} again (forced): still {status[0].value} "
                      f"{now - rec.stop_issued_at:.0f} s after its stop",
                      lambda ctx: self.actuator.stop(g, force=True, ctx=ctx), mark=rec.with_(stop_issued_at=now))
            return
        if rec.cordoned or rec.retry_at is None or now < rec.retry_at:
            return
        status = status or self._status(g)
        if status[0] in (GroupStatus.RUNNING, GroupStatus.PARTIAL):
            self._act(g.name, "stop", f"stop the failed {g.name} before a retry",
                      lambda ctx: self.actuator.stop(g, force=True, ctx=ctx))
            return
        if status[0] is GroupStatus.STOPPED:  # back off done: startable again (the core decides)
            self._write(rec.with_(phase="off", since=now, stop_issued_at=None), now, None,
                        node_state=self.actuator.stopped_power_state)

    def _take_down(self, g: Group, rec: GroupRecord, report: TickReport, status, now: float) -> None:
        """A failed group not yet stopped. One that served is drained first; never stopped while
        it may still be registered."""
        served = rec.removed_at is not None or rec.worker_id is not None or bool(self._listed_at(g.worker_url))
        cut: float | None = 0.0
        if served or self._listed is None:
            out = self._out_of_gateway(g, rec, report, now)
            if out is None:
                return
            rec = out
            assert rec.removed_at is not None
            reading = self.probe.load(g.worker_url)
            cut = reading.in_flight
            settled = reading.at >= rec.removed_at + self.policy.drain.settle_s
            stopped = (status or self._status(g))[0] is GroupStatus.STOPPED
            if not (stopped or (settled and cut == 0) or now - rec.since > self.policy.drain.timeout_s):
                report.steps.append(f"{g.name}: failed; out of the gateway, waiting for its "
                                    f"{'unknown' if cut is None else f'{cut:g}'} request(s) in flight")
                return
            if stopped:
                cut = 0.0
        left = "unknown" if cut is None else f"{cut:g}"
        self._act(g.name, "stop", f"stop the failed {g.name} ({left} request(s) cut)",
                  lambda ctx: self.actuator.stop(g, force=True, ctx=ctx),
                  mark=rec.with_(stop_issued_at=now, worker_id=None), event=None)
        if cut:
            report.drains_finished.append((g.name, now - rec.since, cut))

    def _fail(self, g: Group, rec: GroupRecord, report: TickReport, cause: str) -> None:
        """Record the failure (the core sees the group failed and replaces it); the group is then
        taken down safely by ``_settle_failed``; retry with backoff; after the last retry, cordon it."""
        now = self.clock()
        lc = self.policy.lifecycle
        attempts = rec.attempts + 1
        cordon = attempts > lc.start_retries
        retry_at = None if cordon else now + lc.backoff_s(max(1, attempts))
        detail = cause + (f"; cordoned after {attempts} failed attempts (uncordon to retry)" if cordon
                          else f"; retry {attempts}/{lc.start_retries} after {lc.backoff_s(max(1, attempts)):g} s")
        report.steps.append(f"{g.name}: failed: {detail}")
        log.warning("group %s failed: %s", g.name, detail)
        served = rec.phase in SERVED
        self._healthy_at.pop(g.name, None)
        failed = rec.with_(phase="failed", since=now, attempts=attempts, retry_at=retry_at,
                           cordoned=rec.cordoned or cordon, cause=cause, health_failures=0, stop_issued_at=None,
                           removed_at=rec.removed_at if served else None,
                           worker_id=rec.worker_id if served else None)
        self._write(failed, now, "failed", detail)
        if cordon:
            self._write(self.records[g.name], now, "cordoned", f"after {attempts} failed attempts: {cause}")
        self._take_down(g, self.records[g.name], report, None, now)

    # ---------------------------------------------------------------------------- apply
    def apply(self, decision: Decision, *, decision_id: int | None = None) -> list[str]:
        """Carry out a scale_up or scale_down. Returns one line per step taken."""
        done: list[str] = []
        try:
            if decision.action is Action.SCALE_UP:
                for name in decision.groups or ((decision.group,) if decision.group else ()):
                    done.append(self._start(name, decision_id))
            elif decision.action is Action.SCALE_DOWN and decision.group:
                done.append(self._begin_drain(decision.group, decision_id))
        except (GroupBusy, NotLeading) as exc:
            done.append(str(exc))
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
        mark = rec.with_(phase="starting", since=now, start_began_at=now, removed_at=None, worker_id=None,
                         health_failures=0)
        result = self._act(name, "start", f"start {name} ({', '.join(n.name for n in g.nodes)})",
                           lambda ctx: self.actuator.start(g, ctx=ctx), mark=mark, event="started",
                           node_state="active", decision_id=decision_id)
        if not result.ok:
            self._fail(g, self.records[name], TickReport(), result.detail)
            return f"{name}: start failed: {result.detail}"
        return f"{name}: starting"

    def _begin_drain(self, name: str, decision_id: int | None) -> str:
        _g, rec = self.group(name), self.records[name]  # group() refuses an unknown name
        if rec.phase != "ready":
            return f"{name}: not drained: it is {rec.phase}"
        self._may_act(name, "drain")
        now = self.clock()
        self._write(rec.with_(phase="draining", since=now, removed_at=None), now, "drain_started",
                    "removing from the gateway; waiting for its own running + queued to reach 0",
                    decision_id=decision_id)
        rec = self.records[name]
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
            # A failed group's backoff ends now: off once its status reads stopped.
            changes.update(attempts=0, retry_at=now if rec.phase == "failed" else None, cause=None)
        self._write(rec.with_(**changes), now, "cordoned" if cordoned else "uncordoned", why)
