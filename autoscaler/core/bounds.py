"""Effective floor and ceiling at an instant: the fleet's, schedule windows, freezes and a pin.

Precedence (the policy's rules, in order):
- a pin that has not expired holds exactly ``pin.groups``, clamped to the fleet's floor and ceiling,
  and overrides every schedule window;
- otherwise the effective floor is the highest of the fleet floor and the active windows' floors,
  and the effective ceiling is the lowest of the fleet ceiling and the active windows' caps;
- when a cap falls below the floor, the floor wins (availability first) and ``floor_over_cap`` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from autoscaler.policy.model import WEEKDAYS, Policy, Weekly


@dataclass(frozen=True, slots=True)
class Bounds:
    floor: int
    ceiling: int
    floor_source: str  # "fleet", "window <name>" or "pin"
    ceiling_source: str
    pinned: bool = False
    floor_over_cap: bool = False  # a cap below the floor was overruled


def window_active(window: Weekly, local: datetime) -> bool:
    """Is ``local`` (a time in the schedule's zone) inside the weekly window?

    A window runs from ``start`` on each listed day to ``end``; when end <= start it ends the next
    day, e.g. fri 22:00-06:00 covers Friday 22:00 to Saturday 06:00.
    """
    start, end = window.start_time(), window.end_time()
    t = local.time()
    today = WEEKDAYS[local.weekday()]
    if start < end:
        return today in window.days and start <= t < end
    # Wraps past midnight: either the evening part of a listed day or the morning after one.
    yesterday = WEEKDAYS[(local - timedelta(days=1)).weekday()]
    return (today in window.days and t >= start) or (yesterday in window.days and t < end)


def local_time(policy: Policy, now: float) -> datetime:
    # The zone was resolved when the policy loaded (Schedules.zone): no zone lookup per decision.
    return datetime.fromtimestamp(now, tz=policy.schedules.zone)


# The fleet's own bounds, which hold at every instant of a policy without windows or a pin: one
# frozen Bounds per (floor, ceiling) instead of a new one at every tick.
_FLEET_BOUNDS: dict[tuple[int, int], Bounds] = {}


# (the policy the fleet's bounds were last given for, those bounds): a policy is frozen, and the
# core asks at every tick (it holds the policy, so the identity cannot be reused by another)
_LAST_FLEET_BOUNDS: list = [None, None]


def effective_bounds(policy: Policy, now: float) -> Bounds:
    if _LAST_FLEET_BOUNDS[0] is policy:
        return _LAST_FLEET_BOUNDS[1]
    fleet = policy.fleet
    pin = policy.schedules.pin
    if pin is None and not policy.schedules.windows:
        key = (fleet.floor_groups, fleet.ceiling_groups)
        bounds = _FLEET_BOUNDS.get(key)
        if bounds is None:
            bounds = _FLEET_BOUNDS[key] = Bounds(key[0], key[1], "fleet", "fleet")
        _LAST_FLEET_BOUNDS[:] = [policy, bounds]
        return bounds
    if pin is not None and now < pin.until.timestamp():
        n = min(max(pin.groups, fleet.floor_groups), fleet.ceiling_groups)
        return Bounds(n, n, "pin", "pin", pinned=True)

    floor, floor_src = fleet.floor_groups, "fleet"
    ceiling, ceiling_src = fleet.ceiling_groups, "fleet"
    if policy.schedules.windows:
        local = local_time(policy, now)
        for w in policy.schedules.windows:
            if not window_active(w, local):
                continue
            if w.floor_groups is not None and w.floor_groups > floor:
                floor, floor_src = min(w.floor_groups, fleet.ceiling_groups), f"window {w.name}"
            if w.ceiling_groups is not None and w.ceiling_groups < ceiling:
                ceiling, ceiling_src = w.ceiling_groups, f"window {w.name}"
    if ceiling < floor:
        # The floor wins; the ceiling's source still names the cap it overruled.
        return Bounds(floor, floor, floor_src, f"{floor_src}, over the cap of {ceiling} ({ceiling_src})",
                      floor_over_cap=True)
    return Bounds(floor, ceiling, floor_src, ceiling_src)


def active_freeze(policy: Policy, now: float) -> str | None:
    """The name of the freeze window in force at ``now``, or None."""
    if not policy.schedules.freezes:
        return None
    local = local_time(policy, now)
    for w in policy.schedules.freezes:
        if window_active(w, local):
            return w.name
    return None
