"""Which group to drain, and which to start.

Victim (the group whose loss costs least), by a deterministic key:
1. least KV cache in use: no metric counts sessions, and cached tokens are what a drain throws
   away (their sessions re-prefill in full elsewhere);
2. then fewest running + queued requests (less to wait for, fewer streams at risk);
3. then the group latest in the policy's order (g3 before g2 before g1), so that a fleet
   shrinks in the reverse of the order it grows and g1 stays the long-lived base.
Groups ready for less than ``scaling.scale_down.min_group_uptime_s`` are not candidates.

Start order: a draining group first (returning it is the cheapest capacity there is), then off
groups in the policy's order. Failed and cordoned groups are never started automatically.
"""

from __future__ import annotations

from autoscaler.core.types import FleetState, GroupSignals, GroupState, Phase


def victim_key(order: int, signals: GroupSignals) -> tuple[float, float, int]:
    kv = signals.kv_usage if signals.kv_usage is not None else float("inf")
    load = (signals.running or 0.0) + (signals.queued or 0.0)
    return (kv, load, -order)


_NO_SIGNALS = GroupSignals()  # a group without signals (frozen: one instance serves every lookup)


def choose_victim(
    candidates: list[GroupState], order: dict[str, int], signals: dict[str, GroupSignals]
) -> GroupState | None:
    if not candidates:
        return None
    return min(candidates, key=lambda g: victim_key(order[g.name], signals.get(g.name, _NO_SIGNALS)))


def groups_to_start(fleet: FleetState, count: int) -> list[str]:
    """Up to ``count`` groups to bring into service: draining ones first, then off ones in order.
    A cordoned group is never one of them (not even back from draining)."""
    draining = [g.name for g in fleet.groups.values() if g.phase is Phase.DRAINING and not g.cordoned]
    off = [g.name for g in fleet.groups.values() if g.phase is Phase.OFF and not g.cordoned]
    return (draining + off)[:count]
