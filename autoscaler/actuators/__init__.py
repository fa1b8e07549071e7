"""Actuators: how a group's nodes are started and stopped at a site.

- ``command``: argv templates per node (ssh + systemd, docker, IPMI/BMC, wake-on-LAN);
- ``local``: ``autoscaler emulate worker`` processes on this machine (tests and the demo);
- ``advisory`` has no actuator: the service keeps a shadow fleet and acts on nothing.

Each declares the power state it leaves a stopped node in (``idle`` or ``off``), which the ledger
charges. An actuator executes and reports; it never decides.
"""

from __future__ import annotations

from autoscaler.actuators.base import ActResult, Actuator, GroupStatus
from autoscaler.policy.model import ActuatorKind, Policy


def actuator_for(policy: Policy, *, fleet_id: str = "") -> Actuator | None:
    """The policy's actuator, or None for advisory. ``fleet_id`` (the ledger's,
    ``LiveLedger.fleet_id``): the ``local`` actuator's workers carry it, so another fleet's are told apart."""
    kind = policy.actuator.kind
    if kind is ActuatorKind.LOCAL:
        from autoscaler.actuators.local import LocalActuator

        return LocalActuator(policy, owner=fleet_id)
    if kind is ActuatorKind.COMMAND:
        from autoscaler.actuators.command import CommandActuator

        return CommandActuator(policy)
    return None


__all__ = ["ActResult", "Actuator", "GroupStatus", "actuator_for"]
