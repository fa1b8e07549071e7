"""The advisory actuator's shadow fleet: every decision is taken as carried out, nothing is acted on.

It starts with every group ready. A start is ready ``fleet.startup_expected_s`` later; a drain
completes at once (drain_started, drained and stopped in one step). The demand the core sees is the
real fleet's total from the signals, spread over the shadow's ready groups, so the core decides on
the load the real fleet carries as if it had the shadow's shape. An unreachable gateway never makes
the shadow fleet unsynced: it never talks to the gateway.

The shadow's state is kept in ``controller_state`` (key ``shadow``), so a restart continues it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from autoscaler.core.types import Action, Decision, FleetState, GroupSignals, GroupState, Phase, SignalSnapshot
from autoscaler.ledger.live import LiveLedger
from autoscaler.policy.model import Policy
from autoscaler.service.executor import TickReport

STATE_KEY = "shadow"


class ShadowFleet:
    # The real fleet's phases are unknown here: a real group whose series are all absent (its
    # worker is off) is taken as off, not as a signal problem (service.controller._snapshot).
    silent_is_off = True

    def __init__(self, policy: Policy, live: LiveLedger, *, run_id: int, epoch: int,
                 clock: Callable[[], float] = time.time) -> None:
        self.policy, self.live, self.run_id, self.epoch, self.clock = policy, live, run_id, epoch, clock
        self.recheck = None
        stored = live.load_state(STATE_KEY) or {}
        now = clock()
        self.phases: dict[str, tuple[str, float]] = {}
        for g in policy.fleet.groups:
            entry = stored.get(g.name)
            if isinstance(entry, dict) and entry.get("phase") in ("off", "starting", "ready"):
                self.phases[g.name] = (entry["phase"], float(entry["since"]))
            else:
                self.phases[g.name] = ("ready", now)
        for name, (phase, _since) in self.phases.items():
            live.set_nodes(run_id, name, "active" if phase != "off" else "off", now)
        self._save()

    def set_policy(self, policy: Policy) -> None:
        self.policy = policy
        now = self.clock()
        for g in policy.fleet.groups:
            self.phases.setdefault(g.name, ("ready", now))

    def _save(self) -> None:
        self.live.save_state(STATE_KEY, {n: {"phase": p, "since": s} for n, (p, s) in self.phases.items()},
                             epoch=self.epoch)

    def _event(self, name: str, event: str, at: float, detail: str, node_state: str | None = None,
               decision_id: int | None = None) -> None:
        self.live.ledger.record_event(self.run_id, at, name, event, detail=detail, node_state=node_state,
                                      epoch=self.epoch, decision_id=decision_id)

    def reconcile(self) -> TickReport:
        report = TickReport()
        now = self.clock()
        changed = False
        for name, (phase, since) in list(self.phases.items()):
            if phase == "starting" and now - since >= self.policy.fleet.startup_expected_s:
                self.phases[name] = ("ready", since + self.policy.fleet.startup_expected_s)
                self._event(name, "ready", now, f"shadow: ready {self.policy.fleet.startup_expected_s:g} s after its start")
                report.startup_samples.append(self.policy.fleet.startup_expected_s)
                changed = True
        if changed:
            self._save()
        return report

    def fleet_state(self) -> FleetState:
        phase_of = {"off": Phase.OFF, "starting": Phase.STARTING, "ready": Phase.READY}
        return FleetState({g.name: GroupState(g.name, phase_of[self.phases[g.name][0]], self.phases[g.name][1])
                           for g in self.policy.fleet.groups}, synced=True)

    def shape_signals(self, snapshot: SignalSnapshot) -> SignalSnapshot:
        """The real fleet's totals spread evenly over the shadow's ready groups."""
        ready = [n for n, (p, _) in self.phases.items() if p == "ready"]
        f = snapshot.fleet
        if not ready:
            return SignalSnapshot(snapshot.at, {}, f, snapshot.problems, snapshot.ttft_over_target)
        k = len(ready)

        def share(v: float | None) -> float | None:
            return None if v is None else v / k

        per = GroupSignals(running=share(f.running), queued=share(f.queued), kv_usage=f.kv_usage,
                           request_rate=share(f.request_rate), ttft_p99_s=f.ttft_p99_s,
                           queue_wait_p99_s=f.queue_wait_p99_s)
        # Problems of real groups count for the whole fleet's demand (it is their total).
        problems = tuple(type(p)(p.signal, None, p.kind, f"{p.group}: {p.detail}" if p.group else p.detail)
                         for p in snapshot.problems)
        return SignalSnapshot(snapshot.at, {n: per for n in ready}, f, problems, snapshot.ttft_over_target)

    def apply(self, decision: Decision, *, decision_id: int | None = None) -> list[str]:
        now = self.clock()
        done = []
        if decision.action is Action.SCALE_UP:
            for name in decision.groups or ((decision.group,) if decision.group else ()):
                if self.phases.get(name, ("?", 0))[0] == "off":
                    self.phases[name] = ("starting", now)
                    self._event(name, "started", now, "shadow: start taken as carried out", decision_id=decision_id)
                    done.append(f"{name}: starting (shadow)")
        elif decision.action is Action.SCALE_DOWN and decision.group:
            name = decision.group
            if self.phases.get(name, ("?", 0))[0] == "ready":
                self._event(name, "drain_started", now, "shadow: drain taken as carried out", decision_id=decision_id)
                self._event(name, "drained", now, "shadow: a drain completes at once")
                self._event(name, "stopped", now, "shadow", node_state=self.policy.actuator.power_state_when_stopped.value)
                self.phases[name] = ("off", now)
                done.append(f"{name}: off (shadow)")
        if done:
            self._save()
        return done

    def cordon(self, name: str, cordoned: bool, why: str) -> None:
        return None
