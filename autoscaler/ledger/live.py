"""The live side of the ledger: each group's recorded state, the executor's journal of side
effects (intent before the act, result after), and small JSON documents the controller keeps
across restarts (the core's memory, the advisory shadow fleet, the policy in force).

Every write carries the leader's ``epoch``. A group's transition is one transaction: the
``fleet_groups`` row, the lifecycle event and the node intervals change together, so a crash
never leaves the record half way (either the transition happened or it did not).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from sqlalchemy import insert, select, update

from autoscaler.errors import RuntimeFailure
from autoscaler.ledger.models import ActionRow, ControllerStateRow, FleetGroupRow, GroupEventRow
from autoscaler.ledger.store import GroupEvent, Ledger

FLEET_KEY = "fleet"  # controller_state: {"id": the fleet's id} (LiveLedger.fleet_id)


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """What the records say about one group (a row of ``fleet_groups``)."""

    name: str
    phase: str = "off"  # off, starting, registering, ready, draining, stopping, failed
    since: float = 0.0
    worker_url: str | None = None
    worker_id: str | None = None  # the gateway's id while registered (or being registered)
    attempts: int = 0  # failed starts in a row
    retry_at: float | None = None  # no new start before this (backoff)
    cordoned: bool = False
    cause: str | None = None
    health_failures: int = 0
    start_began_at: float | None = None
    removed_at: float | None = None  # when the drain removed the worker from the gateway
    stop_issued_at: float | None = None  # a failed group: when its stop was issued (None: still to stop)

    def with_(self, **changes: Any) -> GroupRecord:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class ActionInfo:
    id: int
    group: str
    kind: str
    intent_at: float
    result_at: float | None
    outcome: str | None
    detail: str
    epoch: int


_RECORD_FIELDS = tuple(GroupRecord.__dataclass_fields__)

# The legal phase changes, checked on every write (a phase may always stay as it is). Every act is
# preceded by its mark: ``starting`` before the start command, ``draining`` before the gateway
# removal, ``stopping`` before the stop command, so a crash leaves a phase that says what may be
# running, and the next reconcile reads the real state until it settles.
TRANSITIONS: dict[str, frozenset[str]] = {
    "off": frozenset({"starting", "ready", "stopping"}),  # ready: adopted; stopping: a leftover found running
    "starting": frozenset({"registering", "failed"}),
    "registering": frozenset({"ready", "failed"}),
    "ready": frozenset({"draining", "failed"}),
    "draining": frozenset({"registering", "stopping", "off", "failed"}),  # registering: back to service
    "stopping": frozenset({"off", "failed"}),
    "failed": frozenset({"off"}),  # once stopped and its backoff is over (or an uncordon)
}


class IllegalTransition(ValueError):
    """A write that would move a group along no edge of ``TRANSITIONS``: a programming error."""


def check_transition(group: str, old: str | None, new: str) -> None:
    if old is None or old == new:
        return
    if new not in TRANSITIONS.get(old, frozenset()):
        allowed = ", ".join(sorted(TRANSITIONS.get(old, ()))) or "nothing"
        raise IllegalTransition(f"group {group}: {old} -> {new} is not a legal phase change (from {old}: {allowed})")


class LiveLedger:
    """The live-side records over a ``Ledger``'s database."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    # ------------------------------------------------------------------ group records
    def groups(self) -> dict[str, GroupRecord]:
        with self.ledger._read() as conn:
            rows = conn.execute(select(FleetGroupRow.__table__)).all()
            return {r.name: GroupRecord(**{f: getattr(r, f) for f in _RECORD_FIELDS}) for r in rows}

    def transition(
        self,
        record: GroupRecord,
        *,
        epoch: int,
        at: float,
        run_id: int | None = None,
        event: str | None = None,
        detail: str = "",
        node_state: str | None = None,
        decision_id: int | None = None,
        intent: tuple[str, str] | None = None,
        node_at: float | None = None,
    ) -> int | None:
        """Write ``record`` as the group's state and, in the same transaction, the lifecycle event,
        the nodes' power state and (``intent`` = (kind, detail)) the journal's intent of the act
        this phase is the mark of. Returns the intent's journal id (None without one). Raises
        RuntimeFailure when the database refuses, IllegalTransition for a phase change that
        ``TRANSITIONS`` does not allow. ``node_at``: when the node state begins (default ``at``; a
        group found running is charged from its last start's intent)."""
        if event is not None:
            GroupEvent(at, record.name, event)  # validates the name
        values = {**asdict(record), "epoch": epoch, "updated_at": time.time()}
        action_id = None
        with self.ledger._write() as conn:
            exists = conn.execute(select(FleetGroupRow.phase).where(FleetGroupRow.name == record.name)).first()
            check_transition(record.name, exists[0] if exists else None, record.phase)
            if exists:
                conn.execute(update(FleetGroupRow).where(FleetGroupRow.name == record.name).values(**values))
            else:
                conn.execute(insert(FleetGroupRow), values)
            if run_id is not None and event is not None:
                conn.execute(
                    insert(GroupEventRow),
                    {"run_id": run_id, "at": at, "group_name": record.name, "event": event,
                     "decision_id": decision_id, "detail": detail, "epoch": epoch},
                )
            if run_id is not None and node_state is not None:
                for node in self.ledger._group_nodes(conn, run_id, record.name):
                    self.ledger._set_state(conn, run_id, node, record.name, node_state,
                                           at if node_at is None else node_at)
            if intent is not None:
                action_id = self._insert_intent(conn, epoch=epoch, group=record.name, kind=intent[0], at=at,
                                                detail=intent[1], run_id=run_id)
        return action_id

    def set_nodes(self, run_id: int, group: str, state: str, at: float) -> None:
        self.ledger.set_group_state(run_id, group, state, at)

    # ------------------------------------------------------------------ the journal
    def intent(self, *, epoch: int, group: str, kind: str, at: float, detail: str, run_id: int | None) -> int:
        """Before a side effect: what is about to be done. Returns the journal id for ``result``."""
        with self.ledger._write() as conn:
            return self._insert_intent(conn, epoch=epoch, group=group, kind=kind, at=at, detail=detail, run_id=run_id)

    @staticmethod
    def _insert_intent(conn, *, epoch: int, group: str, kind: str, at: float, detail: str, run_id: int | None) -> int:
        return conn.execute(
            insert(ActionRow).returning(ActionRow.id),
            {"run_id": run_id, "epoch": epoch, "group_name": group, "kind": kind, "intent_at": at,
             "result_at": None, "outcome": None, "detail": detail, "exit_code": None, "output_tail": None},
        ).scalar_one()

    def result(
        self,
        action_id: int,
        *,
        epoch: int,
        at: float,
        outcome: str,
        detail: str | None = None,
        exit_code: int | None = None,
        output_tail: str | None = None,
    ) -> None:
        # The row keeps the epoch of the leader that intended the act; the writer of the result is
        # ``result_epoch`` (a later leader settling an older one's open intent).
        values: dict[str, Any] = {"result_at": at, "outcome": outcome, "result_epoch": epoch,
                                  "exit_code": exit_code, "output_tail": output_tail}
        if detail is not None:
            values["detail"] = detail
        with self.ledger._write() as conn:
            conn.execute(update(ActionRow).where(ActionRow.id == action_id).values(**values))

    def open_actions(self) -> list[ActionInfo]:
        """Intents without a result (a crash between the intent and the result)."""
        with self.ledger._read() as conn:
            rows = conn.execute(
                select(ActionRow.__table__).where(ActionRow.outcome.is_(None)).order_by(ActionRow.id)
            ).all()
            return [ActionInfo(r.id, r.group_name, r.kind, r.intent_at, r.result_at, r.outcome, r.detail, r.epoch)
                    for r in rows]

    def actions(self, group: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        with self.ledger._read() as conn:
            q = select(ActionRow.__table__).order_by(ActionRow.id.desc()).limit(limit)
            if group is not None:
                q = q.where(ActionRow.group_name == group)
            rows = conn.execute(q).all()
            return [{c: getattr(r, c) for c in ("id", "group_name", "kind", "intent_at", "result_at", "outcome",
                                                 "detail", "exit_code", "output_tail", "epoch", "result_epoch")}
                    for r in rows][::-1]

    def last_start_intent(self, group: str) -> float | None:
        """When the newest start of ``group`` was intended (None: never): a group found running that
        the records call off is charged from then."""
        from sqlalchemy import func

        with self.ledger._read() as conn:
            return conn.execute(select(func.max(ActionRow.intent_at)).where(
                ActionRow.group_name == group, ActionRow.kind == "start")).scalar()

    def last_action(self, group: str, kinds: tuple[str, ...]) -> ActionInfo | None:
        """The newest act of one of ``kinds`` on ``group`` (None: never): whether a starting group's
        start (or power-on) ran, is in flight, or never ran (a crash between its mark and its act)."""
        with self.ledger._read() as conn:
            r = conn.execute(select(ActionRow.__table__).where(
                ActionRow.group_name == group, ActionRow.kind.in_(kinds)).order_by(ActionRow.id.desc()).limit(1)).first()
        if r is None:
            return None
        return ActionInfo(r.id, r.group_name, r.kind, r.intent_at, r.result_at, r.outcome, r.detail, r.epoch)

    # ------------------------------------------------------------------ controller state
    def fleet_id(self, *, epoch: int) -> str:
        """This ledger's fleet id: made by the first caller (insert only, so two that race agree)
        and never changed, so every controller of the fleet, and every restart, has the same.
        Raises RuntimeFailure when the ledger cannot be read or written."""
        stored = self.load_state(FLEET_KEY)
        if stored is None:
            try:
                with self.ledger._write() as conn:
                    conn.execute(insert(ControllerStateRow), {"key": FLEET_KEY, "value": {"id": uuid.uuid4().hex[:16]},
                                                              "epoch": epoch, "updated_at": time.time()})
            except RuntimeFailure:  # another process made it first (the key is the primary key)
                pass
            stored = self.load_state(FLEET_KEY)
        fleet = None if stored is None else stored.get("id")
        if not isinstance(fleet, str) or not fleet:
            raise RuntimeFailure(f"ledger {self.ledger.safe_url}: no readable fleet id (controller_state {FLEET_KEY!r})")
        return fleet

    def load_state(self, key: str) -> Mapping[str, Any] | None:
        with self.ledger._read() as conn:
            row = conn.execute(select(ControllerStateRow.value).where(ControllerStateRow.key == key)).first()
            return None if row is None else row[0]

    def save_state(self, key: str, value: Mapping[str, Any], *, epoch: int) -> None:
        values = {"value": dict(value), "epoch": epoch, "updated_at": time.time()}
        with self.ledger._write() as conn:
            # One statement on every tick but the first (an UPDATE; INSERT only when the key is new).
            done = conn.execute(update(ControllerStateRow).where(ControllerStateRow.key == key).values(**values))
            if done.rowcount == 0:
                conn.execute(insert(ControllerStateRow), {"key": key, **values})
