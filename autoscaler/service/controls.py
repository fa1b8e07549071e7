"""Operator controls: pin, pause, cordon (and their undoing), recorded with who and why.

Each control is one row of ``operator_controls``; nothing is ever updated or deleted, so the
ledger says who did what, when and why. What is in force at an instant is computed from the rows::

    record_control(ledger, "pin", by="alice", reason="launch day", groups=3, until=t1, at=now)
    controls = effective_controls(ledger.engine, now)      # every tick, and for /status and why
    policy_for_core = policy_with_pin(policy, controls, now)   # decide(signals, fleet, policy_for_core, ...)
    fleet = with_cordons(fleet, controls)                  # GroupState.cordoned: never a start candidate
    if controls.paused: decide and record, act on nothing (advisory) until resumed

Rules (each pair: the latest of the two kinds at or before the instant wins):
- **pin**: the latest ``pin`` not undone by a later ``unpin`` and not expired (``until`` after the
  instant). An operator's pin overrides the policy's ``schedules.pin``; both expire by themselves.
- **pause**: ``paused`` from a ``pause`` until a later ``resume``.
- **cordon**: per group, from a ``cordon`` until a later ``uncordon`` of that group.
Ties in time are broken by the row id (the later write wins).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, NamedTuple

from sqlalchemy import insert, inspect, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from autoscaler.core.types import FleetState, iso
from autoscaler.errors import RuntimeFailure
from autoscaler.ledger.models import CONTROL_KINDS, OperatorControlRow
from autoscaler.ledger.schema import WRITE, one_line
from autoscaler.policy.model import Pin as PolicyPin
from autoscaler.policy.model import Policy

MAX_PIN_GROUPS = 64  # no policy is at hand when a pin is recorded: the core clamps to its floor and ceiling


class Note(NamedTuple):
    """Who did it, why, and when (epoch s)."""

    by: str
    reason: str
    at: float

    def to_dict(self) -> dict[str, Any]:
        return {"by": self.by, "reason": self.reason, "at": iso(self.at)}


@dataclass(frozen=True)
class Pin:
    """An operator's pin in force: hold exactly ``groups`` until ``until`` (epoch s)."""

    groups: int
    until: float
    by: str
    reason: str
    at: float

    def to_dict(self) -> dict[str, Any]:
        return {"groups": self.groups, "until": iso(self.until), "by": self.by, "reason": self.reason,
                "at": iso(self.at)}


@dataclass(frozen=True)
class Controls:
    """The operator controls in force at one instant."""

    pin: Pin | None = None
    paused: bool = False
    pause: Note | None = None  # who paused, while paused
    cordoned: Mapping[str, Note] = field(default_factory=dict)  # group -> who cordoned it

    def to_dict(self) -> dict[str, Any]:
        return {
            "pin": None if self.pin is None else self.pin.to_dict(),
            "paused": self.paused,
            "pause": None if self.pause is None else self.pause.to_dict(),
            "cordoned": {g: n.to_dict() for g, n in self.cordoned.items()},
        }

    def lines(self) -> list[str]:
        """One sentence per control in force (for people: times to the second)."""
        out = []
        if self.pin is not None:
            p = self.pin
            out.append(f"pinned at {p.groups} groups until {_iso_s(p.until)} by {p.by} at {_iso_s(p.at)}: {p.reason}")
        if self.pause is not None:
            out.append(f"paused (advisory: nothing acted on) by {self.pause.by} at {_iso_s(self.pause.at)}: "
                       f"{self.pause.reason}")
        for g, n in self.cordoned.items():
            out.append(f"{g} cordoned by {n.by} at {_iso_s(n.at)}: {n.reason}")
        return out


def _iso_s(t: float) -> str:
    return iso(float(int(t)))


@dataclass(frozen=True)
class ControlRecord:
    """One recorded control (a row of ``operator_controls``)."""

    id: int
    kind: str
    at: float
    by: str
    reason: str
    group: str | None = None
    groups: int | None = None
    until: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "at": iso(self.at), "by": self.by, "reason": self.reason,
                "group": self.group, "groups": self.groups, "until": iso(self.until)}


def _engine_of(target: Any) -> Engine | Connection:
    engine = getattr(target, "engine", target)  # a Ledger has .engine
    if not isinstance(engine, (Engine, Connection)):
        raise TypeError(f"need an Engine, a Connection or a Ledger, not {type(target).__name__}")
    return engine


def _check(kind: str, by: str, reason: str, group: str | None, groups: int | None, until: float | None,
           at: float) -> None:
    """Programming errors of the caller (the CLI validates user input before this)."""
    if kind not in CONTROL_KINDS:
        raise ValueError(f"control {kind!r} is not one of {', '.join(CONTROL_KINDS)}")
    if not by.strip() or not reason.strip():
        raise ValueError("a control needs who (by) and why (reason)")
    if kind == "pin":
        if groups is None or until is None:
            raise ValueError("a pin needs groups and until")
        if not 0 <= groups <= MAX_PIN_GROUPS:
            raise ValueError(f"pin groups {groups} is not within 0..{MAX_PIN_GROUPS}")
        if until <= at:
            raise ValueError(f"a pin until {iso(until)} is not after {iso(at)}")
    elif groups is not None or until is not None:
        raise ValueError(f"{kind} takes no groups or until")
    if kind in ("cordon", "uncordon"):
        if not group or not group.strip():
            raise ValueError(f"{kind} needs a group")
    elif group is not None:
        raise ValueError(f"{kind} takes no group")


def record_control(
    target: Any,
    kind: str,
    *,
    by: str,
    reason: str,
    group: str | None = None,
    groups: int | None = None,
    until: float | None = None,
    at: float,
) -> ControlRecord:
    """Record one control (``target``: a Ledger, an Engine or a Connection in a transaction)."""
    _check(kind, by, reason, group, groups, until, at)
    row = {"at": at, "kind": kind, "group_name": group, "groups": groups, "until": until,
           "by_user": by, "reason": reason}
    stmt = insert(OperatorControlRow).values(**row).returning(OperatorControlRow.id)
    db = _engine_of(target)
    try:
        if isinstance(db, Connection):
            new_id = db.execute(stmt).scalar_one()
        else:
            with db.connect() as conn:
                conn.execution_options(**WRITE)
                with conn.begin():
                    new_id = conn.execute(stmt).scalar_one()
    except (DBAPIError, SQLAlchemyError) as exc:
        raise RuntimeFailure(f"ledger database: recording {kind}: {one_line(exc)}") from exc
    return ControlRecord(int(new_id), kind, at, by, reason, group, groups, until)


_COLUMNS = (OperatorControlRow.id, OperatorControlRow.kind, OperatorControlRow.at, OperatorControlRow.group_name,
            OperatorControlRow.groups, OperatorControlRow.until, OperatorControlRow.by_user, OperatorControlRow.reason)


def _latest(conn: Connection, kinds: tuple[str, ...], now: float):
    stmt = (select(*_COLUMNS).where(OperatorControlRow.kind.in_(kinds), OperatorControlRow.at <= now)
            .order_by(OperatorControlRow.at.desc(), OperatorControlRow.id.desc()).limit(1))
    return conn.execute(stmt).first()


def _controls(conn: Connection, now: float) -> Controls:
    pin = None
    row = _latest(conn, ("pin", "unpin"), now)
    if row is not None and row.kind == "pin" and row.until is not None and row.until > now:
        pin = Pin(int(row.groups), float(row.until), row.by_user, row.reason, float(row.at))
    row = _latest(conn, ("pause", "resume"), now)
    pause = Note(row.by_user, row.reason, float(row.at)) if row is not None and row.kind == "pause" else None
    # Cordons: the latest cordon/uncordon per group. Operators cordon a handful of times a month;
    # reading them all stays small.
    stmt = (select(*_COLUMNS).where(OperatorControlRow.kind.in_(("cordon", "uncordon")), OperatorControlRow.at <= now)
            .order_by(OperatorControlRow.at, OperatorControlRow.id))
    latest: dict[str, Any] = {}
    for r in conn.execute(stmt):
        latest[r.group_name] = r
    cordoned = {g: Note(r.by_user, r.reason, float(r.at)) for g, r in latest.items() if r.kind == "cordon"}
    return Controls(pin=pin, paused=pause is not None, pause=pause, cordoned=cordoned)


def effective_controls(source: Any, now: float) -> Controls:
    """The controls in force at ``now`` (``source``: a Ledger, an Engine or a Connection). Three
    small indexed queries. A database without the table (a ledger older than revision 0002, read
    without migrating) has no controls."""
    db = _engine_of(source)
    try:
        if isinstance(db, Connection):
            return _controls(db, now)
        with db.connect() as conn:
            with conn.begin():
                return _controls(conn, now)
    except (DBAPIError, SQLAlchemyError) as exc:
        if not _has_table(db):
            return Controls()
        raise RuntimeFailure(f"ledger database: reading operator controls: {one_line(exc)}") from exc


def _has_table(db: Engine | Connection) -> bool:
    try:
        if isinstance(db, Connection):
            return inspect(db).has_table("operator_controls")
        with db.connect() as conn:
            return inspect(conn).has_table("operator_controls")
    except (DBAPIError, SQLAlchemyError):
        return True  # cannot tell: report the original error


# ------------------------------------------------------------------------------ for the core


def effective_pin(policy: Policy, controls: Controls, now: float) -> PolicyPin | None:
    """The pin the core should receive at ``now``: the operator's if one is in force (it overrides
    the policy's ``schedules.pin``), else the policy's if it has not expired, else None.

    An operator pin of 0 groups is given as 1: the core clamps any pin to the fleet's floor, which
    is at least 1, so both mean "as few as the floor allows"."""
    op = controls.pin
    if op is not None and now < op.until:
        return PolicyPin(groups=max(1, op.groups), until=datetime.fromtimestamp(op.until, tz=timezone.utc),
                         note=f"operator pin by {op.by}: {op.reason}")
    own = policy.schedules.pin
    if own is not None and now < own.until.timestamp():
        return own
    return None


# The last policy copy handed out, so that ticks under the same pin get the same object (the
# core memoises some values by the policy's identity).
_last_copy: tuple[Policy, PolicyPin | None, Policy] | None = None


def policy_with_pin(policy: Policy, controls: Controls, now: float) -> Policy:
    """The policy the core should decide with: ``policy`` itself when no operator pin is in force
    (the policy's own pin then applies as written), else a copy whose ``schedules.pin`` is the
    operator's. The core reads its pin from ``policy.schedules.pin`` (``core/bounds.py``): a pin
    holds exactly that many groups, clamped to the fleet's floor and ceiling, over every window."""
    global _last_copy
    if controls.pin is None or now >= controls.pin.until:
        return policy
    pin = effective_pin(policy, controls, now)
    memo = _last_copy
    if memo is not None and memo[0] is policy and memo[1] == pin:
        return memo[2]
    copy = policy.model_copy(update={"schedules": policy.schedules.model_copy(update={"pin": pin})})
    _last_copy = (policy, pin, copy)
    return copy


def with_cordons(fleet: FleetState, controls: Controls, extra: frozenset[str] | set[str] = frozenset()) -> FleetState:
    """``fleet`` with ``GroupState.cordoned`` set for the operator's cordons (and ``extra``: e.g.
    groups the executor cordoned after their last failed start). The same object when none is."""
    names = set(controls.cordoned) | set(extra)
    if not any(n in names and not g.cordoned for n, g in fleet.groups.items()):
        return fleet
    groups = {n: (replace(g, cordoned=True) if n in names and not g.cordoned else g) for n, g in fleet.groups.items()}
    return FleetState(groups=groups, synced=fleet.synced)
