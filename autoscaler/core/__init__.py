"""The pure decision core: no network, no database, no clock reads.

``decide(signals, fleet, policy, memory, now) -> (Decision, Memory)`` is the only place a scaling
decision is made; ``bounds`` (floor, ceiling, schedules, pin), ``forecast`` (lead time and demand
forecast) and ``victim`` (which group to drain or start) are its named clamps.
"""

from autoscaler.core.decide import decide, groups_needed
from autoscaler.core.forecast import record_startup
from autoscaler.core.types import (
    Action,
    Decision,
    FleetState,
    GroupSignals,
    GroupState,
    Memory,
    Phase,
    Problem,
    Reason,
    SignalSnapshot,
)

__all__ = [
    "Action", "Decision", "FleetState", "GroupSignals", "GroupState", "Memory", "Phase", "Problem",
    "Reason", "SignalSnapshot", "decide", "groups_needed", "record_startup",
]  # fmt: skip
