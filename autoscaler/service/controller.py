"""One controller tick, wired: reconcile -> signals -> decide -> record -> act.

``Controller`` owns the run: the ledger run, the core's memory (kept in the database, so a
restarted controller decides as the old one would have), the executor (or the advisory shadow
fleet), the signal source and the operator controls. ``tick()`` is level-triggered: it reads the
records, the gateway and the actuator, settles differences, asks the core, records the decision
and makes one recorded step. The service (``service.runner``) calls it on a schedule; tests call it
directly.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from autoscaler.adapters.snapshot_file import snapshot_from_dict
from autoscaler.core import decide
from autoscaler.core.forecast import record_startup
from autoscaler.core.types import (
    Action,
    Decision,
    FleetState,
    GroupSignals,
    Memory,
    Phase,
    SignalSnapshot,
    iso,
    merge_memory_dicts,
)
from autoscaler.core.warm import has_demand_history
from autoscaler.errors import AutoscalerError, RuntimeFailure
from autoscaler.ledger.live import LiveLedger
from autoscaler.ledger.store import Ledger
from autoscaler.policy.loader import LoadedPolicy
from autoscaler.policy.model import Policy
from autoscaler.service.controls import Controls, policy_with_pin, with_cordons
from autoscaler.service.executor import Executor, RecordsUnavailable, TickReport
from autoscaler.service.warmstart import WarmStart

log = logging.getLogger("autoscaler.controller")
decision_log = logging.getLogger("autoscaler.decision")

MEMORY_KEY = "memory"  # the core memory's part that changes at every tick (Memory.to_dicts)
HISTORY_KEY = "memory_history"  # its history: saved only when a slot ends or an hour of rises closes
POLICY_KEY = "policy"
WARM_START_KEY = "warm_start"  # {"run_id", "warm_start": what this run's warm start read, or null}


class SignalSource(Protocol):
    def read(self, now: float, *, expected_groups: list[str]) -> SignalSnapshot: ...


ControlsProvider = Callable[[float], Controls]


def stored_memory(live: LiveLedger) -> Any:
    """The core memory as the controller saved it (``Memory.to_dict``'s form), or None."""
    return merge_memory_dicts(live.load_state(MEMORY_KEY), live.load_state(HISTORY_KEY))


def memory_from_json(data: Any, policy: Policy, at: float) -> Memory:
    """The memory a previous run saved (the snapshot format's ``memory``); a fresh one if unreadable."""
    if not isinstance(data, dict):
        return Memory()
    doc = {"at": iso(at), "fleet": {"groups": {g: {"phase": "off"} for g in policy.fleet.group_names()}},
           "memory": data}
    try:
        return snapshot_from_dict(doc, policy, "<stored memory>")[2]
    except AutoscalerError as exc:
        log.warning("the stored core memory could not be read (%s); starting with a fresh memory", exc)
        return Memory()


def latest_uncordon(ledger: Ledger, group: str) -> float | None:
    from sqlalchemy import func, select

    from autoscaler.ledger.models import OperatorControlRow

    with ledger._read() as conn:
        return conn.execute(select(func.max(OperatorControlRow.at)).where(
            OperatorControlRow.kind == "uncordon", OperatorControlRow.group_name == group)).scalar()


class Controller:
    def __init__(
        self,
        loaded: LoadedPolicy,
        ledger: Ledger,
        signals: SignalSource,
        *,
        executor_factory: Callable[[Policy, LiveLedger, int, int], Any],
        source: str,
        epoch: int = 1,
        instance: str = "local",
        controls: ControlsProvider | None = None,
        clock: Callable[[], float] = time.time,
        warm_start: WarmStart | None = None,
    ) -> None:
        self.loaded = loaded
        self.policy = loaded.policy
        self.ledger = ledger
        self.live = LiveLedger(ledger)
        self.signals = signals
        self.source = source
        self.epoch = epoch
        self.instance = instance
        self.controls_provider = controls
        self.clock = clock
        now = clock()
        self.run_id = ledger.start_run(source, loaded, at=now, label=f"{source} {instance}", instance=instance)
        self._history_saved: tuple[Any, Any] | None = None  # (demand_by_slot, rise_tail) last saved
        self.memory = memory_from_json(stored_memory(self.live), self.policy, now)
        self.warm_start: dict[str, Any] | None = None  # what the warm start read (/status), None: none
        if warm_start is not None:
            self._warm_start(warm_start, now)
        self.executor = executor_factory(self.policy, self.live, self.run_id, epoch)
        self.executor.recheck = self._recheck
        self._init_node_states(now)
        self.controls = Controls()
        self.last_decision: Decision | None = None
        self.last_decision_at: float | None = None
        self.last_snapshot: SignalSnapshot | None = None
        self.last_report: TickReport | None = None
        self.policy_loaded_at: str | None = None
        self.save_policy_state(error=None, loaded=True)

    # ------------------------------------------------------------------ run bookkeeping
    def _warm_start(self, warm_start: WarmStart, now: float) -> None:
        """A first start (no demand in the stored memory) folds the recorded history in and saves the
        memory at once; a memory with demand is never overwritten, nor read again. Either way this
        run's warm start (or null) is recorded for ``status`` from the database."""
        if has_demand_history(self.memory):
            log.info("warm start: not needed, the stored memory holds demand history")
        else:
            memory, info = warm_start.apply(self.memory, self.policy, now)
            if info is not None:
                try:
                    self._save_memory(memory)
                except RuntimeFailure as exc:
                    log.error("warm start: the memory could not be saved (%s); the first tick saves it", exc)
                self.memory, self.warm_start = memory, info
        try:
            self.live.save_state(WARM_START_KEY, {"run_id": self.run_id, "warm_start": self.warm_start},
                                 epoch=self.epoch)
        except RuntimeFailure as exc:
            log.error("could not record the warm start: %s", exc)

    def _init_node_states(self, now: float) -> None:
        """A new run opens an interval for every node in its current power state (nothing to
        recover: the records' phases say what may be running, and the first reconcile reads the
        real state of every group)."""
        if not isinstance(self.executor, Executor):
            return
        recorded = self.live.groups()
        for name, rec in self.executor.records.items():
            if name not in recorded:  # a group seen for the first time: record it (off)
                self.live.transition(rec, epoch=self.epoch, at=now)
        self.executor.init_node_states(now)

    def save_policy_state(self, *, error: str | None, loaded: bool = False) -> None:
        """Record the policy in force (``loaded``: it was just loaded) and the last rejected edit, for
        ``status`` from the database."""
        if loaded:
            self.policy_loaded_at = iso(self.clock())
        value = {"path": self.loaded.path, "hash": self.loaded.sha256, "loaded_at": self.policy_loaded_at,
                 "error": error, "instance": self.instance}
        try:
            self.live.save_state(POLICY_KEY, value, epoch=self.epoch)
        except RuntimeFailure as exc:
            log.error("could not record the policy state: %s", exc)

    def reload(self, loaded: LoadedPolicy, actuator: Any = None) -> None:
        """A valid edited policy, applied between ticks: takes effect from the next decision; its
        version is recorded; ``actuator`` (when its section changed) replaces the executor's.
        Raises RuntimeFailure, with nothing applied, when the version cannot be recorded (the
        service keeps the edit pending and tries again)."""
        now = self.clock()
        self.ledger.record_policy(self.run_id, loaded, at=now)  # first: a failure here changes nothing
        self.loaded, self.policy = loaded, loaded.policy
        if isinstance(self.executor, Executor):
            self.executor.set_policy(loaded.policy, actuator)
        else:
            self.executor.set_policy(loaded.policy)
        if hasattr(self.signals, "set_policy"):
            self.signals.set_policy(loaded.policy)
        self.save_policy_state(error=None, loaded=True)

    def end(self, note: str) -> None:
        try:
            self.ledger.end_run(self.run_id, self.clock(), note)
        except RuntimeFailure as exc:
            log.error("could not end the run: %s", exc)

    # ------------------------------------------------------------------ the tick
    def _core_policy(self) -> Policy:
        """The policy the core decides with: an operator's pin in force overrides schedules.pin."""
        return policy_with_pin(self.policy, self.controls, self.clock())

    def _fleet(self) -> FleetState:
        """The fleet as the core sees it, with the operators' cordons marked."""
        return with_cordons(self.executor.fleet_state(), self.controls)

    def _snapshot(self, now: float, fleet: FleetState) -> SignalSnapshot:
        expected = [n for n, g in fleet.groups.items() if g.phase is Phase.READY]
        snapshot = self.signals.read(now, expected_groups=expected)
        if hasattr(self.executor, "shape_signals"):
            snapshot = self.executor.shape_signals(snapshot)
        return snapshot

    def _recheck(self, group: str, now: float) -> bool:
        """Just before a drained group stops: does the core want it back?"""
        fleet = self._fleet()
        snapshot = self.last_snapshot
        if snapshot is None:
            return False
        decision, _ = decide(snapshot, fleet, self._core_policy(), self.memory, now)
        wants = decision.action is Action.SCALE_UP and group in (decision.groups or (decision.group,))
        if wants:
            log.info("re-check before stopping %s: the core wants it back (%s: %s)", group, decision.reason,
                     decision.detail)
        return wants

    def tick(self) -> Decision | None:
        """One tick. Returns the decision (None when the records were unavailable)."""
        t0 = time.monotonic()
        now = self.clock()
        if self.controls_provider is not None:
            try:
                self.controls = self.controls_provider(now)
            except RuntimeFailure as exc:
                log.error("operator controls unreadable (%s); keeping the last ones", exc)
        self._apply_cordons()
        try:
            self.last_snapshot = self._snapshot(now, self._fleet())
        except AutoscalerError as exc:
            log.error("signals: %s", exc)
        report = self.executor.reconcile()
        self.last_report = report
        if not report.gateway_ok:  # every tick, until it answers: never a silent "starting" for ever
            log.warning("gateway unusable: %s", report.gateway_problem)
        for sample in report.startup_samples:
            self.memory = record_startup(self.memory, sample)
        fleet = self._fleet()
        now = self.clock()
        snapshot = self.last_snapshot or SignalSnapshot(now, {}, GroupSignals())
        decision, memory = decide(snapshot, fleet, self._core_policy(), self.memory, now)
        if not report.records_ok:
            log.error("records unavailable: no new action this tick (%s)", "; ".join(report.steps[-1:]))
            self.last_decision, self.last_decision_at = decision, now
            return None
        try:
            decision_id = self.ledger.record_decision(self.run_id, now, decision, self.loaded.sha256, epoch=self.epoch)
            self._save_memory(memory)
        except RuntimeFailure as exc:
            log.error("records unavailable: decision not recorded, no action taken (%s)", exc)
            self.last_decision, self.last_decision_at = decision, now
            return None
        self.memory = memory
        self.last_decision, self.last_decision_at = decision, now
        steps: list[str] = []
        if decision.action is not Action.HOLD:
            if self.controls.paused:
                steps.append("paused by an operator: not acted on")
            else:
                try:
                    steps = self.executor.apply(decision, decision_id=decision_id)
                except RecordsUnavailable as exc:
                    log.error("%s", exc)
                    steps = [str(exc)]
        self._log_decision(decision, fleet, snapshot, steps, time.monotonic() - t0)
        return decision

    def _save_memory(self, memory: Memory) -> None:
        """The memory's recent part at every tick; its history (about 160 KB of JSON after a week)
        only when it changed: a slot ended, or an hour of rises closed or left the week. The
        history first, so a crash between the two leaves a history at least as new as the rest.
        Raises RuntimeFailure (nothing is marked saved then: the next tick tries again)."""
        if not self._history_unchanged(memory):
            self.live.save_state(HISTORY_KEY, memory.history_dict(), epoch=self.epoch)
            self._history_saved = (memory.demand_by_slot, memory.rise_tail)
        self.live.save_state(MEMORY_KEY, memory.recent_dict(), epoch=self.epoch)

    def _history_unchanged(self, memory: Memory) -> bool:
        """The same finished slots (the core copies them when a slot ends, so the same object) and
        the same closed hours of the tail (each kept as the same object until it leaves)."""
        if self._history_saved is None:
            return False
        slots, tail = self._history_saved
        if memory.demand_by_slot is not slots or len(memory.rise_tail) != len(tail):
            return False
        return all(a is b for a, b in zip(memory.rise_tail[:-1], tail[:-1]))

    def _apply_cordons(self) -> None:
        """Record operators' cordons on the groups; an ``uncordon`` recorded after a group was
        cordoned (by an operator, or after its last failed start) returns it."""
        if not isinstance(self.executor, Executor):
            return
        for name, rec in list(self.executor.records.items()):
            wanted = self.controls.cordoned.get(name)
            if wanted is not None and not rec.cordoned:
                self.executor.cordon(name, True, f"operator cordon by {wanted.by}: {wanted.reason}")
            elif wanted is None and rec.cordoned:
                if (rec.cause or "").startswith("operator cordon"):
                    self.executor.cordon(name, False, "operator uncordon")  # the operator's cordon ended
                    continue
                released = latest_uncordon(self.ledger, name)  # cordoned after failed starts (since = then)
                if released is not None and released >= rec.since - 1e-6:
                    self.executor.cordon(name, False, "operator uncordon")

    def _log_decision(self, decision: Decision, fleet: FleetState, snapshot: SignalSnapshot, steps: list[str],
                      seconds: float) -> None:
        active = sum(1 for g in fleet.groups.values() if g.phase in (Phase.READY, Phase.STARTING))
        cost = self.policy.cost
        node_kw = cost.node_power_active_w * cost.pue / 1000.0
        per_group_hour = self.policy.fleet.group_size_nodes * (node_kw * cost.energy_price_per_kwh + cost.node_hour_fee)
        delta = decision.target_groups - active
        line = {
            "action": str(decision.action), "from": active, "to": decision.target_groups, "reason": str(decision.reason),
            "group": decision.group, "running": snapshot.fleet.running, "queued": snapshot.fleet.queued,
            "kv_usage": snapshot.fleet.kv_usage, "ttft_p99_s": snapshot.fleet.ttft_p99_s,
            "cost_change_per_hour": round(delta * per_group_hour, 4), "currency": cost.currency,
            "steps": steps, "epoch": self.epoch,
        }
        decision_log.info("decision %s", json.dumps(line, separators=(",", ":")))
        if decision_log.isEnabledFor(logging.DEBUG):  # the inputs' JSON is not built on every tick for nothing
            decision_log.debug("decision arithmetic: %s | inputs %s | tick %.3f s", decision.detail,
                               json.dumps(dict(decision.inputs), default=str)[:2000], seconds)
