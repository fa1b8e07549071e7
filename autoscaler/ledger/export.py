"""Write a backtest into the ledger (source ``simulation``) so its report reads like a live one.

Times in the replay are seconds since the trace's start; the ledger gets UTC epoch seconds.
What is written: every decision of our core (holds included), the groups' lifecycle events linked
to the decision that caused them, each node's ``active`` and ``off`` intervals over the trace's
span (a simulated group that stops is powered off), and the tokens served per hour.
"""

from __future__ import annotations

import numpy as np

from autoscaler.core.types import Action
from autoscaler.ledger.store import GroupEvent, Ledger, NodeInterval, TokenCount
from autoscaler.policy.loader import LoadedPolicy
from autoscaler.sim.traces import Trace

_EVENT = {"start": "started", "ready": "ready", "drain": "drain_started", "return": "drain_cancelled",
          "stop": "stopped"}


def export_backtest(db_url: str, loaded: LoadedPolicy, trace: Trace, run, label: str) -> int:
    """-> the ledger run id. ``run`` is backtest's Run for our core (its controller kept every decision)."""
    policy = loaded.policy
    epoch = trace.start_epoch_s
    result = run.result
    span0, span1 = result.span_s
    decisions = [(epoch + t, d) for t, d in run.controller.decisions]

    acted: dict[tuple[float, str], int] = {}
    for i, (t, d) in enumerate(decisions):
        if d.action is not Action.HOLD:
            for g in d.groups:
                acted[(t, g)] = i
    events = []
    for t, group, kind in result.events:
        if kind == "cancel":  # a start stopped before it served: its "stop" follows and is recorded
            continue
        at = epoch + t
        index = acted.get((at, group)) if kind in ("start", "drain", "return") else None
        if kind == "stop":
            events.append(GroupEvent(at, group, "drained", None))
        events.append(GroupEvent(at, group, _EVENT[kind], index))

    nodes = {g.name: [n.name for n in g.nodes] for g in policy.fleet.groups}
    intervals: list[NodeInterval] = []
    for group, ups in result.group_intervals.items():
        on = [(epoch + s, epoch + e) for s, e in ups]
        intervals += NodeInterval.for_schedule(nodes[group], group, on, epoch + span0, epoch + span1)

    # Tokens served, per hour of arrival (for cost per million tokens).
    hours = np.floor((trace.t_s - span0) / 3600.0).astype(np.int64)
    n_hours = int(hours.max()) + 1 if len(hours) else 0
    prompt = np.bincount(hours, weights=trace.input_tokens, minlength=n_hours)
    generated = np.bincount(hours, weights=trace.output_tokens, minlength=n_hours)
    tokens = [
        TokenCount(epoch + span0 + 3600.0 * h, epoch + min(span0 + 3600.0 * (h + 1), span1),
                   int(prompt[h]), int(generated[h]))
        for h in range(n_hours) if prompt[h] or generated[h]
    ]

    ledger = Ledger(db_url)
    run_id = ledger.start_run("simulation", loaded, at=epoch + span0, label=label)
    ledger.record_bulk(run_id, decisions=decisions, events=events, intervals=intervals, tokens=tokens,
                       policy_sha=loaded.sha256)
    ledger.end_run(run_id, at=epoch + span1)
    return run_id
