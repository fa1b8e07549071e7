"""``why``: what the fleet looked like at an instant, and the decisions that made it so.

For each group: its phase at that moment and since when (from the group's lifecycle events, else
from its node intervals), the decision that started or drained it (with its reason, detail and
the numbers it saw), and for a group that is on, what the decisions since then said (holds per
reason: why nobody drained it). Then the last decisions before the instant. A range
(``--from/--to``) lists the decisions that acted in it and the events they caused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autoscaler.core.types import iso
from autoscaler.errors import BadInput
from autoscaler.ledger.store import DecisionInfo, EventInfo, Ledger, RunInfo

# The phase a group is in after each event that changes it. ``registering`` is a step inside
# ``starting`` (as /status shows it: the phase and its ``since`` are the records' own, so `why` and
# `status` name the same instant); ``stopping`` is the stop command issued (live), ``drained`` the
# backtest's stop. Every event of models.GROUP_EVENTS is either here or in KEEPS_PHASE (a test checks).
PHASE_AFTER = {
    "started": "starting",
    "registering": "starting",
    "ready": "ready",
    "drain_started": "draining",
    "drain_cancelled": "ready",
    "drained": "stopping",
    "stopping": "stopping",
    "stopped": "off",
    "failed": "failed",
    "adopted": "starting",  # or ready: see phase_after
}
# Events that mark a group without changing its phase: a cordon (the core then drains it), an
# uncordon, a gateway that got a ready group back, a stray gateway entry removed from an off group.
KEEPS_PHASE = frozenset({"cordoned", "uncordoned", "reregistered", "removed"})


def phase_after(event: EventInfo) -> str | None:
    """The phase a group is in after ``event`` (None: the event does not change it). An adopted
    worker the gateway already listed healthy is ready; one found running outside it starts
    (service.executor._settle_off writes the two with these details)."""
    if event.event in KEEPS_PHASE:
        return None
    if event.event == "adopted" and event.detail.startswith("the gateway lists"):
        return "ready"
    return PHASE_AFTER[event.event]
ON_PHASES = ("starting", "ready", "draining", "stopping")
# The inputs worth quoting, in this order, with their words.
NUMBERS = (
    ("demand", "demand"), ("running", "running"), ("queued", "queued"), ("active", "active groups"),
    ("capacity_at_target", "capacity at target"), ("forecast_peak", "forecast peak"),
    ("ttft_p99_s", "TTFT p99 s"), ("floor", "floor"), ("ceiling", "ceiling"),
)
LAST_DECISIONS = 5


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.0f}" if x.is_integer() else f"{x:.2f}"
    return str(x)


def numbers(d: DecisionInfo) -> dict[str, Any]:
    return {key: d.inputs[key] for key, _ in NUMBERS if d.inputs.get(key) is not None}


def numbers_text(d: DecisionInfo) -> str:
    return ", ".join(f"{words} {_fmt(d.inputs[key])}" for key, words in NUMBERS if d.inputs.get(key) is not None)


def decision_dict(d: DecisionInfo) -> dict[str, Any]:
    return {
        "id": d.id, "at": iso(d.at), "action": d.action, "target_groups": d.target_groups, "group": d.group,
        "groups": d.groups, "reason": d.reason, "detail": d.detail, "numbers": numbers(d),
        "policy_sha256": d.policy_sha256,
    }


def decision_text(d: DecisionInfo) -> str:
    return f"decision #{d.id} at {iso(d.at)}: {d.action} ({d.reason}): {d.detail} [{numbers_text(d)}]"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 3600:
        return f"{seconds // 60} min"
    h, m = divmod(seconds // 60, 60)
    if h < 48:
        return f"{h} h {m:02d} min"
    return f"{h // 24} days {h % 24} h"


def run_dict(run: RunInfo) -> dict[str, Any]:
    return {"id": run.id, "source": run.source, "label": run.label, "started_at": iso(run.started_at),
            "ended_at": iso(run.ended_at), "policy_sha256": run.policy_sha256}


def choose_run(ledger: Ledger, at: float, source: str, run_id: int | None) -> RunInfo | None:
    """The run that was recording at ``at`` (one; several simulations need --run)."""
    runs = [r for r in ledger.runs(source=source, run_id=run_id)
            if r.started_at <= at and (r.ended_at is None or at <= r.ended_at)]
    if run_id is not None and not ledger.runs(run_id=run_id):
        raise BadInput(f"--run: there is no run {run_id}")
    if len(runs) > 1:
        if source == "live":
            return runs[-1]  # overlapping live runs: the newest is in charge
        names = ", ".join(f"{r.id} ({r.source} {r.label or 'unlabelled'})" for r in runs)
        raise BadInput(f"{len(runs)} runs cover {iso(at)}: {names}; pick one with --run")
    return runs[0] if runs else None


@dataclass
class GroupAnswer:
    group: str
    phase: str
    on: bool
    since: float | None
    nodes: list[dict[str, Any]]
    event: EventInfo | None  # the event that put it in this phase
    cause: DecisionInfo | None  # the decision behind it
    cause_event: EventInfo | None  # the event the cause is attached to (started / drain_started)
    holds_since: dict[str, int]
    acted_since: list[DecisionInfo]
    note: str
    counted_from: float | None = None  # decisions after this instant, up to the asked one, are counted
    decisions_since: int = 0  # every decision in that stretch: holds + the ones that acted

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group, "phase": self.phase, "on": self.on, "since": iso(self.since), "nodes": self.nodes,
            "event": None if self.event is None else {"event": self.event.event, "at": iso(self.event.at),
                                                      "detail": self.event.detail},
            "cause": None if self.cause is None else decision_dict(self.cause),
            "holds_since": self.holds_since,
            "counted_from": iso(self.counted_from),
            "decisions_since_count": self.decisions_since,
            "decisions_since": [decision_dict(d) for d in self.acted_since],
            "explanation": self.note,
        }


def explain_group(ledger: Ledger, run: RunInfo, group: str, nodes: list[str], at: float) -> GroupAnswer:
    events = [e for e in ledger.events(run.id, end=at, group=group)]
    intervals = {iv.node: iv for iv in ledger.intervals_at(run.id, at) if iv.group == group}
    node_info = [{"node": n, "state": intervals[n].state if n in intervals else "unknown",
                  "since": iso(intervals[n].start) if n in intervals else None} for n in nodes]
    history = [e for e in events if phase_after(e) is not None]
    carried_from: RunInfo | None = None
    if not history and run.source in ("live", "advisory"):
        # A restarted controller keeps its groups (their records outlive the run): the phase comes from
        # the event an earlier run of the same source recorded, as /status's ``since`` does.
        carried_from, history = _earlier_phase_events(ledger, run, group)
    last = history[-1] if history else None
    marks = [e for e in events if e.event in ("cordoned", "uncordoned")]
    cause_event = None
    since: float | None
    if last is not None:
        phase, since = phase_after(last) or "unknown", last.at
        # The decision behind the phase: a start for starting/ready, a drain for the rest.
        wanted = ("started",) if phase in ("starting", "ready") else ("drain_started", "started")
        if last.event == "drain_cancelled":
            wanted = ("drain_cancelled", "started")
        for e in reversed(history):
            if e.event in wanted and (e.decision_id is not None or e.event == wanted[0]):
                cause_event = e
                break
    else:
        states = {iv.state for iv in intervals.values()}
        since = min((iv.start for iv in intervals.values()), default=None)
        phase = "ready" if states == {"active"} else ("off" if states and "active" not in states else "unknown")
    cause = ledger.decision(cause_event.decision_id) if cause_event and cause_event.decision_id else None
    on = phase in ON_PHASES or (phase == "failed" and any(n["state"] == "active" for n in node_info))
    mismatch = ""
    if intervals:  # the nodes' power states are what is charged: they win over a missing event
        nodes_on = any(iv.state == "active" for iv in intervals.values())
        if on and not nodes_on:
            mismatch = (f" Its last recorded event was {last.event.replace('_', ' ')} at {iso(last.at)}"
                        if last is not None else "")
            phase, since = "off", max(iv.start for iv in intervals.values())
        elif not on and nodes_on and phase != "failed":
            phase, since = "ready", min(iv.start for iv in intervals.values() if iv.state == "active")
        on = nodes_on
    # What kept it on is counted from what turned it on: the decision that started it (excluded), or
    # the start of the run when it was on from the beginning; every decision up to ``at`` counts,
    # the holds and the ones that acted on other groups alike.
    if carried_from is not None:  # this run's decisions only: the count starts with it
        counted_from = run.started_at
    elif cause is not None:
        counted_from = cause.at
    elif cause_event is not None:
        counted_from = cause_event.at
    else:
        counted_from = run.started_at
    holds = ledger.hold_counts(run.id, counted_from, at)
    acted = [d for d in ledger.decisions(run.id, start=counted_from, end=at, acted_only=True)
             if cause is None or d.id != cause.id]
    decisions_since = sum(holds.values()) + len(acted)
    node_words = ", ".join(f"{n['node']} {n['state']}" + (f" since {n['since']}" if n["since"] else "")
                           for n in node_info)
    head = f"{group} was {'ON' if on else 'OFF'} ({phase}"
    head += f" since {iso(since)}, {_duration(at - since)})" if since is not None else ")"
    lines = [head + f"; nodes: {node_words}." + (mismatch + "; its nodes were switched off then." if mismatch else "")]
    if cause is not None and cause_event is not None:
        verb = {"started": "started", "drain_started": "drained", "drain_cancelled": "taken back into service"}[
            cause_event.event]
        lines.append(f"It was {verb} at {iso(cause_event.at)} by {decision_text(cause)}"
                     + (f" (in {carried_from.source} run {carried_from.id}, before the restart that began run "
                        f"{run.id} at {iso(run.started_at)})." if carried_from is not None else "."))
    elif cause_event is not None:
        lines.append(f"It was {cause_event.event.replace('_', ' ')} at {iso(cause_event.at)} without a recorded "
                     f"decision (an operator or the reconciler)"
                     + (f", in run {carried_from.id}." if carried_from is not None else "."))
    elif last is not None and carried_from is not None:
        lines.append(f"It has been {phase} since {iso(last.at)} ({last.event.replace('_', ' ')} in "
                     f"{carried_from.source} run {carried_from.id}, before the restart that began run {run.id}).")
    elif since is not None and last is None:
        lines.append(f"It was already {'on' if on else 'off'} when run {run.id} started at {iso(run.started_at)}; "
                     f"no decision in this run changed it before {iso(at)}.")
    if on and phase in ("starting", "ready"):
        held = sum(holds.values())
        if decisions_since:
            what = "it was started" if cause_event is not None and carried_from is None else f"run {run.id} started"
            counts = ", ".join(f"{r} {n}" for r, n in sorted(holds.items(), key=lambda kv: (-kv[1], kv[0])))
            text = (f"It stayed on: since {what} at {iso(counted_from)}, {decisions_since} "
                    f"decision{'s were' if decisions_since != 1 else ' was'} taken up to {iso(at)}: {held} held")
            text += f" ({counts})" if held else ""
            if acted:
                text += f", {len(acted)} acted on other groups"
            lines.append(text + ", and none drained it.")
        if acted:
            lines.append("Decisions that acted since then (on other groups): "
                         + "; ".join(f"#{d.id} {d.action} {d.group or ''} ({d.reason}) at {iso(d.at)}" for d in acted))
    if marks and marks[-1].event == "cordoned":  # kept out of service: say by whom and why
        lines.append(f"It was cordoned at {iso(marks[-1].at)}" + (f": {marks[-1].detail}." if marks[-1].detail else "."))
    return GroupAnswer(group, phase, on, since, node_info, last, cause, cause_event, holds, acted, " ".join(lines),
                       counted_from, decisions_since)


def _earlier_phase_events(ledger: Ledger, run: RunInfo, group: str) -> tuple[RunInfo | None, list[EventInfo]]:
    """The newest earlier run of ``run``'s source that recorded a phase of ``group``, and its
    phase-changing events for the group up to ``run``'s start (None, [] when none did)."""
    earlier = [r for r in ledger.runs(source=run.source, end=run.started_at) if r.id != run.id]
    for prior in reversed(earlier):
        found = [e for e in ledger.events(prior.id, end=run.started_at, group=group) if phase_after(e) is not None]
        if found:
            return prior, found
    return None, []


def why_at(ledger: Ledger, at: float, *, source: str = "live", group: str | None = None,
           run_id: int | None = None) -> dict[str, Any]:
    """The answer for one instant, as a JSON-able dict with an ``explanation`` per group."""
    run = choose_run(ledger, at, source, run_id)
    if run is None:
        message = f"no {source if source != 'all' else ''} run was recording at {iso(at)}".replace("  ", " ")
        if source != "all" and run_id is None:  # say which other sources were recording, and how to see them
            others: dict[str, list[int]] = {}
            for r in ledger.runs(source="all"):
                if r.started_at <= at and (r.ended_at is None or at <= r.ended_at):
                    others.setdefault(r.source, []).append(r.id)
            if others:
                message += "; " + "; ".join(
                    f"{src} runs ({', '.join(map(str, ids))}) were: see them with --source {src}"
                    for src, ids in sorted(others.items()))
        return {"at": iso(at), "run": None, "groups": [], "last_decisions": [], "message": message}
    if run.incomplete:  # no intervals, maybe no decisions: "0 nodes active" would not be true
        raise BadInput(f"{run.incomplete_text()}; run the backtest again")
    fleet = ledger.fleet_of_run(run.id, at)
    groups = fleet["groups"]
    if group is not None and group not in groups:
        raise BadInput(f"--group: {group!r} is not in run {run.id}'s fleet ({', '.join(groups)})")
    answers = [explain_group(ledger, run, g, list(groups[g]), at) for g in groups if group in (None, g)]
    controls = _controls_at(ledger, at)
    for a in answers:  # an operator's cordon says who took the group out and why
        if a.group in controls.cordoned:
            n = controls.cordoned[a.group]
            a.note += f" It was cordoned by {n.by} at {iso(n.at)} ({n.reason}): never started until uncordoned."
    last = ledger.decisions(run.id, end=at, limit=LAST_DECISIONS, newest_first=True)
    on_nodes = sum(1 for iv in ledger.intervals_at(run.id, at) if iv.state == "active")
    return {
        "at": iso(at),
        "run": run_dict(run),
        "active_nodes": on_nodes,
        "groups": [a.to_dict() for a in answers],
        "last_decisions": [decision_dict(d) for d in reversed(last)],
        "controls": controls.to_dict(),
    }


def _controls_at(ledger: Ledger, at: float):
    """The operator controls in force at ``at`` (pin, pause, cordons, with who and why)."""
    from autoscaler.service.controls import effective_controls

    return effective_controls(ledger.engine, at)


def why_range(ledger: Ledger, start: float, end: float, *, source: str = "live", group: str | None = None,
              run_id: int | None = None) -> dict[str, Any]:
    """The decisions that acted in [start, end] and the events they caused."""
    runs = ledger.runs(source=source, start=start, end=end, run_id=run_id)
    out = []
    for run in runs:
        events = ledger.events(run.id, start=start, end=None)
        by_decision: dict[int, list[EventInfo]] = {}
        for e in events:
            if e.decision_id is not None:
                by_decision.setdefault(e.decision_id, []).append(e)
        for d in ledger.decisions(run.id, start=start, end=end, acted_only=True):
            if group is not None and group not in (d.groups or [d.group]):
                continue
            item = decision_dict(d)
            item["run_id"] = run.id
            item["events"] = [{"group": e.group, "event": e.event, "at": iso(e.at)} for e in by_decision.get(d.id, [])]
            out.append(item)
    return {"from": iso(start), "to": iso(end), "source": source, "runs": [run_dict(r) for r in runs],
            "decisions": out}


def render_at(answer: dict[str, Any]) -> str:
    if answer["run"] is None:
        return answer["message"] + "\n"
    run = answer["run"]
    lines = [f"At {answer['at']} ({run['source']} run {run['id']}"
             + (f" \"{run['label']}\"" if run["label"] else "")
             + f", policy {run['policy_sha256'][:12]}): {answer['active_nodes']} nodes active.", ""]
    controls = answer.get("controls") or {}
    if controls.get("pin"):
        p = controls["pin"]
        lines += [f"An operator pin was in force: {p['groups']} groups until {p['until']}, set by {p['by']} at "
                  f"{p['at']} ({p['reason']}); it overrides the policy's schedules.", ""]
    if controls.get("pause"):
        p = controls["pause"]
        lines += [f"The controller was paused (advisory, nothing acted on) by {p['by']} at {p['at']} ({p['reason']}).", ""]
    for g in answer["groups"]:
        lines.append(g["explanation"])
        lines.append("")
    if answer["last_decisions"]:
        lines.append(f"The last {len(answer['last_decisions'])} decisions before then:")
        for d in answer["last_decisions"]:
            lines.append(f"  #{d['id']} {d['at']} {d['action']} ({d['reason']}): {d['detail']}")
    return "\n".join(lines) + "\n"


def render_range(answer: dict[str, Any]) -> str:
    lines = [f"Decisions that acted from {answer['from']} to {answer['to']} ({answer['source']}, "
             f"{len(answer['runs'])} run(s)):"]
    if not answer["decisions"]:
        lines.append("  none: every decision in this range held.")
    for d in answer["decisions"]:
        nums = ", ".join(f"{k} {_fmt(v)}" for k, v in d["numbers"].items())
        lines.append(f"  #{d['id']} {d['at']} {d['action']} -> {d['target_groups']} groups ({d['reason']}): "
                     f"{d['detail']} [{nums}]")
        for e in d["events"]:
            lines.append(f"      {e['at']} {e['group']} {e['event'].replace('_', ' ')}")
    return "\n".join(lines) + "\n"
