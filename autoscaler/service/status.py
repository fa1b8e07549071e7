"""The ``/status`` object (docs/interfaces.md, "HTTP on --listen"), built from the database.

    status = build_status(engine, time.time())                         # autoscaler status --db
    status = build_status(engine, now, instance=me, leader=lease.leading())   # the service's /status

Keys: ``instance``, ``leader``, ``epoch``, ``paused``, ``policy`` ({path, hash, loaded_at,
error}: the ``controller_state`` row ``policy`` the service writes), ``groups`` ({NAME: {phase,
since, cordoned}} from ``fleet_groups``; cordoned also while an operator's cordon is in force and
not yet applied), ``pin`` (the operator's pin in force: {groups, until, by, reason}; else the
policy's own pin as the service recorded it in ``policy.pin``; else null; with ``effective_groups``
and ``clamped``: the pin the core holds within the running policy's floor and ceiling, and why it
differs), ``last_decision`` (the
newest decision of a live or advisory run), ``warm_start`` (what the newest leader's warm start read
from Prometheus: {from, to, samples, gaps, step_s, source, url}; null when it started with the memory
it had, or cold).

``leader`` is true only while the lease is unexpired by the database's clock (PostgreSQL), or
while some process holds the ledger's flock (SQLite, read from /proc/locks without taking a lock);
and, when the caller names its own ``instance`` and ``leader``, only if it is that instance and it
says it leads. A handful of small indexed queries: fast enough to serve at every request.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, text
from sqlalchemy.engine import Connection, Engine

from autoscaler.core.types import iso
from autoscaler.ledger.models import ControllerStateRow, DecisionRow, FleetGroupRow, LeaseRow, PolicyVersion, Run
from autoscaler.service.controls import Controls, _controls
from autoscaler.service.leadership import LEASE_NAME, flock_held, lock_holder, sqlite_path

_POLICY_KEYS = ("path", "hash", "loaded_at", "error")


def build_status(engine: Engine | Connection, now: float, *, instance: str | None = None,
                 leader: bool | None = None) -> dict[str, Any]:
    """The /status object at ``now`` (see the module docstring). Raises SQLAlchemy errors as they come."""
    if isinstance(engine, Connection):
        return _build(engine, now, instance, leader)
    with engine.connect() as conn:
        with conn.begin():
            return _build(conn, now, instance, leader)


def _build(conn: Connection, now: float, instance: str | None, leader: bool | None) -> dict[str, Any]:
    lease = conn.execute(select(LeaseRow.holder, LeaseRow.epoch, LeaseRow.expires_at)
                         .where(LeaseRow.name == LEASE_NAME)).first()
    holder, epoch, expires = (lease.holder, int(lease.epoch), lease.expires_at) if lease else (None, 0, None)
    if conn.dialect.name == "postgresql":
        db_now = conn.execute(text("SELECT extract(epoch FROM clock_timestamp())")).scalar_one()
        alive = lease is not None and expires is not None and float(expires) >= float(db_now)
    else:
        alive = lease is not None and _sqlite_lock_alive(conn, holder)
    is_leader = alive and (instance is None or holder == instance) and (leader is None or leader)

    controls: Controls = _controls(conn, now)
    groups = {}
    for row in conn.execute(select(FleetGroupRow.name, FleetGroupRow.phase, FleetGroupRow.since,
                                   FleetGroupRow.cordoned).order_by(FleetGroupRow.name)):
        # ``registering`` is a step inside ``starting`` for the core and for /status.
        phase = "starting" if row.phase == "registering" else row.phase
        groups[row.name] = {"phase": phase, "since": iso(row.since),
                            "cordoned": bool(row.cordoned) or row.name in controls.cordoned}

    policy_row = conn.execute(select(ControllerStateRow.value).where(ControllerStateRow.key == "policy")).first()
    value = policy_row.value if policy_row is not None and isinstance(policy_row.value, dict) else {}
    policy = {key: value.get(key) for key in _POLICY_KEYS}

    pin: dict[str, Any] | None
    if controls.pin is not None:
        p = controls.pin
        pin = {"groups": p.groups, "until": iso(p.until), "by": p.by, "reason": p.reason}
    else:
        pin = _policy_pin(value.get("pin"), now)
    if pin is not None:
        pin.update(_pin_in_effect(conn, pin.get("groups"), value.get("hash")))

    return {
        "instance": instance if instance is not None else holder,
        "leader": bool(is_leader),
        "epoch": epoch,
        "paused": controls.paused,
        "policy": policy,
        "groups": groups,
        "pin": pin,
        "last_decision": _last_decision(conn),
        "warm_start": _warm_start(conn),
    }


def _warm_start(conn: Connection) -> dict[str, Any] | None:
    """What the newest leader's warm start read (``controller_state`` row ``warm_start``), or null."""
    row = conn.execute(select(ControllerStateRow.value).where(ControllerStateRow.key == "warm_start")).first()
    value = row.value.get("warm_start") if row is not None and isinstance(row.value, dict) else None
    return value if isinstance(value, dict) else None


def pin_in_effect(conn: Connection, groups: int) -> dict[str, Any]:
    """``effective_groups`` and ``clamped`` for a pin of ``groups`` under the policy the controller runs."""
    row = conn.execute(select(ControllerStateRow.value).where(ControllerStateRow.key == "policy")).first()
    value = row.value if row is not None and isinstance(row.value, dict) else {}
    return _pin_in_effect(conn, groups, value.get("hash"))


def _pin_in_effect(conn: Connection, groups: Any, policy_hash: Any) -> dict[str, Any]:
    """``effective_groups`` (what the core holds for the pin: clamped to the running policy's floor and
    ceiling) and ``clamped`` (why it differs from ``groups``, else null). A pin of 5 with a ceiling of 3
    holds 3, and /status must not say 5."""
    out: dict[str, Any] = {"effective_groups": groups, "clamped": None}
    if not isinstance(groups, int) or not policy_hash:
        return out
    fleet = conn.execute(select(PolicyVersion.fleet).where(PolicyVersion.sha256 == policy_hash)).scalar()
    if not isinstance(fleet, dict):
        return out
    floor, ceiling = fleet.get("floor_groups"), fleet.get("ceiling_groups")
    if isinstance(ceiling, int) and groups > ceiling:
        out.update(effective_groups=ceiling, clamped=f"above fleet.ceiling_groups ({ceiling}): holds {ceiling}")
    elif isinstance(floor, int) and groups < floor:
        out.update(effective_groups=floor, clamped=f"below fleet.floor_groups ({floor}): holds {floor}")
    return out


def _policy_pin(value: Any, now: float) -> dict[str, Any] | None:
    """The policy's own pin, when the service recorded it in the policy row ({groups, until, note})."""
    if not isinstance(value, dict) or value.get("until") is None:
        return None
    from autoscaler.core.types import parse_time

    try:
        until = parse_time(str(value["until"]))
    except ValueError:
        return None
    if until <= now:
        return None
    return {"groups": value.get("groups"), "until": iso(until), "by": "policy", "reason": value.get("note") or ""}


def _sqlite_lock_alive(conn: Connection, holder: str | None) -> bool:
    path = sqlite_path(conn.engine.url.render_as_string(hide_password=False))
    if path is None:
        return holder is not None
    held = flock_held(path + ".lock")
    if held is None:  # no /proc/locks: trust the holder's pid if it runs on this host
        import os
        import socket

        info = lock_holder(path + ".lock")
        if info.get("host") != socket.gethostname() or not info.get("pid", "").isdigit():
            return False
        try:
            os.kill(int(info["pid"]), 0)
        except OSError:
            return False
        return True
    return held


def _last_decision(conn: Connection) -> dict[str, Any] | None:
    # The newest live or advisory run first (a backtest recorded in the same ledger is not "last").
    runs = conn.execute(select(Run.id).where(Run.source.in_(("live", "advisory")))
                        .order_by(Run.started_at.desc(), Run.id.desc()).limit(3)).scalars().all()
    for run_id in runs:
        row = conn.execute(
            select(DecisionRow.at, DecisionRow.action, DecisionRow.target_groups, DecisionRow.group_name,
                   DecisionRow.reason, DecisionRow.detail)
            .where(DecisionRow.run_id == run_id).order_by(DecisionRow.at.desc(), DecisionRow.id.desc()).limit(1)
        ).first()
        if row is not None:
            return {"at": iso(row.at), "action": row.action, "target_groups": row.target_groups,
                    "group": row.group_name, "reason": row.reason, "detail": row.detail}
    return None


def _short(t: Any) -> str:
    """An ISO time to whole seconds, for people: 2026-12-01T07:13:50.839598Z -> 2026-12-01T07:13:50Z."""
    text_ = str(t)
    return text_.split(".")[0] + "Z" if text_.endswith("Z") and "." in text_ else text_


def render_status(status: dict[str, Any]) -> str:
    """The human form of the status object: a few lines and a table of groups."""
    lines = []
    who = status.get("instance") or "none"
    lead = f"leader, epoch {status.get('epoch')}" if status.get("leader") else \
        f"not leading (epoch {status.get('epoch')}: no live lease)" if status.get("instance") else "no leader yet"
    lines.append(f"instance  {who} ({lead})")
    lines.append(f"paused    {'yes: deciding and recording, acting on nothing' if status.get('paused') else 'no'}")
    pin = status.get("pin")
    if pin:
        clamped = f" (clamped: {pin['clamped']})" if pin.get("clamped") else ""
        lines.append(f"pin       {pin['groups']} groups{clamped} until {_short(pin['until'])} by {pin['by']}: "
                     f"{pin['reason']}")
    else:
        lines.append("pin       none")
    policy = status.get("policy") or {}
    if policy.get("path") or policy.get("hash"):
        loaded = _short(policy.get("loaded_at"))
        text_ = f"{policy.get('path')} (sha256 {str(policy.get('hash'))[:12]}, loaded {loaded})"
        if policy.get("error"):
            text_ += f"; last edit rejected: {policy['error']}"
        lines.append(f"policy    {text_}")
    else:
        lines.append("policy    not recorded yet (no controller has run on this ledger)")
    warm = status.get("warm_start")
    if warm:
        lines.append(f"warm start  {warm['samples']:,} demand samples from {warm.get('source')}, {_short(warm['from'])} "
                     f"to {_short(warm['to'])} ({warm.get('gaps', 0):,} steps without data)")
    groups = status.get("groups") or {}
    if groups:
        width = max(5, *(len(g) for g in groups))
        lines.append("")
        lines.append(f"{'GROUP':<{width}}  {'PHASE':<11}  {'SINCE':<20}  CORDONED")
        for name, g in groups.items():
            cordoned = "yes" if g["cordoned"] else "no"
            lines.append(f"{name:<{width}}  {g['phase']:<11}  {_short(g['since']):<20}  {cordoned}")
    else:
        lines.append("groups    none recorded yet")
    d = status.get("last_decision")
    lines.append("")
    if d:
        lines.append(f"last decision  {_short(d['at'])} {d['action']} -> {d['target_groups']} groups "
                     f"({d['reason']}): {d['detail']}")
    else:
        lines.append("last decision  none")
    return "\n".join(lines) + "\n"
