"""A warm start: recorded demand folded into the memory as the ticks would have folded it.

A controller that starts on a fleet with history need not be cold: the trend window, the seasonal
5-minute slots (and the seasonal forecast's measured skill, scored as each slot closes) and the
risk's per-minute means and recent rises are all functions of the demand samples alone. Folding
recorded (time, demand) samples, in time order, through the same functions ``decide`` applies to
each tick's demand (``forecast.demand_changes`` and ``risk.minute_changes``, with the same lead
time) gives the memory a controller that had been running would hold, at the resolution of the
recording. What the samples do not say stays as it was: start-up times, disruptions, the error
budget's burn (it needs the request rate and queue wait of each tick), surplus and SLO timers.
"""

from __future__ import annotations

from collections.abc import Iterable

from autoscaler.core.forecast import demand_changes, lead_time_s
from autoscaler.core.risk import minute_changes, tick_rise_changes
from autoscaler.core.types import Memory
from autoscaler.policy.model import Policy


def has_demand_history(memory: Memory) -> bool:
    """Whether the memory holds any demand at all (a first start of a site holds none)."""
    return bool(memory.demand_samples or memory.demand_by_slot or memory.slot_now is not None
                or memory.minute_now is not None or memory.minute_max)


def fold_demand_history(memory: Memory, policy: Policy, samples: Iterable[tuple[float, float]]) -> Memory:
    """``memory`` with each (epoch s, demand) sample folded in, in the order given (time order).

    The risk horizon is the tick's: the lead time (measured start-ups once there are enough, else
    ``fleet.startup_expected_s``) plus one tick interval. E.g. 600 s + 15 s = 615 s: a minute's rise
    is measured over the 11 minutes after it, as at every live tick."""
    risk_horizon = lead_time_s(policy, memory)[0] + policy.scaling.tick_interval_s
    for t, demand in samples:
        changes = demand_changes(memory, policy, t, demand, risk_horizon)
        changes.update(minute_changes(memory, t, demand, risk_horizon, policy.forecast.minute_s))
        if policy.scaling.scale_down.tick_rises:
            changes.update(tick_rise_changes(memory, t, demand, risk_horizon, policy.forecast.minute_s))
        memory = memory.with_(**changes)
    return memory
