"""Write a backtest into the ledger (source ``simulation``) so its report reads like a live one.

Times in the replay are seconds since the trace's start; the ledger gets UTC epoch seconds.
What is written: every decision of our core (holds included), the groups' lifecycle events linked
to the decision that caused them, each node's ``active`` intervals and, while its group is stopped,
the power state the policy's actuator leaves it in (``actuator.stopped_power_state``, default
``idle`` for ``command`` without ``power_off``, else ``off``: charged at idle or off watts, as
the live side would be), and the tokens served per hour.

All of it in one transaction (``Ledger.record_run``): a backtest interrupted by a signal or a
full disk leaves no run behind. SIGTERM is taken like Ctrl-C while it writes, so both roll back
and say so.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

import numpy as np

from autoscaler.core.types import Action
from autoscaler.errors import RuntimeFailure
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
    stopped = policy.actuator.power_state_when_stopped.value
    intervals: list[NodeInterval] = []
    for group, ups in result.group_intervals.items():
        on = [(epoch + s, epoch + e) for s, e in ups]
        intervals += NodeInterval.for_schedule(nodes[group], group, on, epoch + span0, epoch + span1,
                                               off_state=stopped)

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

    with Ledger(db_url) as ledger, _sigterm_as_interrupt():
        try:
            return ledger.record_run("simulation", loaded, start=epoch + span0, end=epoch + span1, label=label,
                                     decisions=decisions, events=events, intervals=intervals, tokens=tokens)
        except RuntimeFailure as exc:  # a full disk, a lost database: the transaction rolled back
            raise RuntimeFailure(f"{exc} (the backtest was not recorded: it is written in one transaction, "
                                 f"so nothing of it is in the ledger)") from exc
        except KeyboardInterrupt:
            print(f"simulate: interrupted while writing the backtest into {ledger.safe_url}: rolled back, "
                  f"nothing of it was recorded", file=sys.stderr)
            raise


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt (as Ctrl-C does) while the backtest is written, so the open
    transaction rolls back and says so, rather than the process vanishing mid-write (the database
    would roll it back too, silently). Only the main thread can set a handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
