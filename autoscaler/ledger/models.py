"""The ledger's tables (SQLAlchemy 2). The schema itself is created and changed only by the
Alembic migrations in ``autoscaler/ledger/migrations/versions``; a test checks that these models
and the migrations agree.

Times are stored as timezone-aware timestamps in UTC (PostgreSQL ``timestamptz``; on SQLite the
UTC digits, microsecond precision) and read back as epoch seconds (floats), the unit the rest of
the code uses.

Constraint and index names come from the naming convention on the metadata, so every migration
can name what it drops on both SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

SOURCES = ("live", "advisory", "simulation")
ACTIONS = ("hold", "scale_up", "scale_down")
NODE_STATES = ("active", "idle", "off")
# A group's lifecycle events. drain_cancelled: the core wanted the draining group back (a scale-up
# reclaimed it, or the re-check before the stop said it is no longer surplus).
# The live side adds: registering (added to the gateway, waiting for it to list the worker healthy),
# stopping (the stop command issued), cordoned/uncordoned (kept out of service / returned), reregistered
# (a restarted gateway got a ready group back), adopted/removed (a worker the records said was off).
GROUP_EVENTS = (
    "started", "registering", "ready", "drain_started", "drain_cancelled", "drained", "stopping", "stopped",
    "failed", "cordoned", "uncordoned", "reregistered", "adopted", "removed",
)  # fmt: skip
LIVE_PHASES = ("off", "starting", "registering", "ready", "draining", "stopping", "failed")
CONTROL_KINDS = ("pin", "unpin", "pause", "resume", "cordon", "uncordon")
ACTION_OUTCOMES = ("ok", "failed", "abandoned", "interrupted")

# SQLite has 64-bit rowids only for "INTEGER PRIMARY KEY"; BIGINT there would not autoincrement.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class EpochTime(TypeDecorator):
    """A UTC timestamp in the database, epoch seconds (float) in Python."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, datetime):
            moment = (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
        else:  # epoch seconds: already UTC (the common case: 80,000 times for a backtest)
            moment = datetime.fromtimestamp(float(value), tz=timezone.utc)
        # SQLite keeps the digits only: store UTC digits, read them back as UTC.
        return moment.replace(tzinfo=None) if dialect.name == "sqlite" else moment

    def process_result_value(self, value: Any, dialect) -> float | None:
        if value is None:
            return None
        if isinstance(value, str):  # raw SQLite text, e.g. from a func.min() without a type
            value = datetime.fromisoformat(value)
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.timestamp()


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class PolicyVersion(Base):
    """A policy text the controller or a backtest ran with, once per distinct text.

    ``cost`` and ``fleet`` are the cost model and the fleet's shape parsed from that text when it
    was recorded, so a report reads the same later even if the policy schema changes.
    """

    __tablename__ = "policy_versions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    text: Mapped[str] = mapped_column(Text)
    path: Mapped[str | None] = mapped_column(String(1000))
    cost: Mapped[dict] = mapped_column(JSON)
    fleet: Mapped[dict] = mapped_column(JSON)  # {"group_size_nodes", "floor_groups", "ceiling_groups", "groups": {g: [nodes]}}
    first_seen_at: Mapped[float] = mapped_column(EpochTime)


class Run(Base):
    """One live service run or one backtest."""

    __tablename__ = "runs"
    __table_args__ = (CheckConstraint(_in("source", SOURCES), name="source"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    source: Mapped[str] = mapped_column(String(16), index=True)
    label: Mapped[str | None] = mapped_column(String(200))
    started_at: Mapped[float] = mapped_column(EpochTime)
    ended_at: Mapped[float | None] = mapped_column(EpochTime)
    policy_sha256: Mapped[str] = mapped_column(String(64), ForeignKey("policy_versions.sha256"))
    created_at: Mapped[float] = mapped_column(EpochTime)  # wall clock when the run was recorded
    end_note: Mapped[str | None] = mapped_column(String(200))
    instance: Mapped[str | None] = mapped_column(String(200))  # the controller instance of a live/advisory run


class PolicyLoad(Base):
    """A policy in force in a run from ``at`` on (the first at the run's start, then reloads)."""

    __tablename__ = "policy_loads"
    __table_args__ = (Index("ix_policy_loads_run_id_at", "run_id", "at"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    policy_sha256: Mapped[str] = mapped_column(String(64), ForeignKey("policy_versions.sha256"))
    at: Mapped[float] = mapped_column(EpochTime)


class PolicyRejection(Base):
    """An edited policy that failed validation and was not loaded, with its error lines."""

    __tablename__ = "policy_rejections"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"))
    at: Mapped[float] = mapped_column(EpochTime, index=True)
    path: Mapped[str | None] = mapped_column(String(1000))
    sha256: Mapped[str] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    errors: Mapped[list] = mapped_column(JSON)


class DecisionRow(Base):
    """One tick's decision, holds included (old holds are folded into ``decision_summaries``)."""

    __tablename__ = "decisions"
    __table_args__ = (
        CheckConstraint(_in("action", ACTIONS), name="action"),
        Index("ix_decisions_run_id_at", "run_id", "at"),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    at: Mapped[float] = mapped_column(EpochTime, index=True)
    action: Mapped[str] = mapped_column(String(16))
    target_groups: Mapped[int] = mapped_column(Integer)
    group_name: Mapped[str | None] = mapped_column(String(64))
    groups: Mapped[list] = mapped_column(JSON)  # every group started or drained
    reason: Mapped[str] = mapped_column(String(32))
    detail: Mapped[str] = mapped_column(Text)
    inputs: Mapped[dict] = mapped_column(JSON)
    forecast_used: Mapped[bool] = mapped_column(Boolean)
    policy_sha256: Mapped[str] = mapped_column(String(64))
    epoch: Mapped[int | None] = mapped_column(Integer)  # the leader's epoch (live runs)


class DecisionSummary(Base):
    """Hold decisions of one hour folded by ``Ledger.compact``: how many per reason."""

    __tablename__ = "decision_summaries"
    __table_args__ = (UniqueConstraint("run_id", "hour_start", "action", "reason"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    hour_start: Mapped[float] = mapped_column(EpochTime)
    action: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(String(32))
    count: Mapped[int] = mapped_column(Integer)
    first_at: Mapped[float] = mapped_column(EpochTime)
    last_at: Mapped[float] = mapped_column(EpochTime)


class GroupEventRow(Base):
    """A step in a group's life, with the decision that caused it where there is one."""

    __tablename__ = "group_events"
    __table_args__ = (
        CheckConstraint(_in("event", GROUP_EVENTS), name="event"),
        Index("ix_group_events_run_id_at", "run_id", "at"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    at: Mapped[float] = mapped_column(EpochTime)
    group_name: Mapped[str] = mapped_column(String(64))
    event: Mapped[str] = mapped_column(String(16))
    decision_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("decisions.id"))
    detail: Mapped[str] = mapped_column(Text, default="")
    epoch: Mapped[int | None] = mapped_column(Integer)  # the leader's epoch (live runs)


class NodeIntervalRow(Base):
    """A node in one power state from ``start_at`` to ``end_at`` (NULL while still open)."""

    __tablename__ = "node_intervals"
    __table_args__ = (
        CheckConstraint(_in("state", NODE_STATES), name="state"),
        Index("ix_node_intervals_run_id_start_at", "run_id", "start_at"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    node: Mapped[str] = mapped_column(String(64))
    group_name: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(8))
    start_at: Mapped[float] = mapped_column(EpochTime)
    end_at: Mapped[float | None] = mapped_column(EpochTime)


class TokenCountRow(Base):
    """Tokens served in an interval (prompt and generation), for cost per million tokens."""

    __tablename__ = "token_counts"
    __table_args__ = (Index("ix_token_counts_run_id_start_at", "run_id", "start_at"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    group_name: Mapped[str | None] = mapped_column(String(64))
    start_at: Mapped[float] = mapped_column(EpochTime)
    end_at: Mapped[float] = mapped_column(EpochTime)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)
    generation_tokens: Mapped[int] = mapped_column(BigInteger)


# ---------------------------------------------------------------------------- the live side


class ActionRow(Base):
    """The executor's journal: one side effect (start a node, register, deregister, stop, ...).

    The intent is written before the act (``outcome`` NULL) and the result after it; a controller
    that finds an intent without a result after a restart finishes or undoes that step.
    """

    __tablename__ = "actions"
    __table_args__ = (
        CheckConstraint("outcome IS NULL OR " + _in("outcome", ACTION_OUTCOMES), name="outcome"),
        Index("ix_actions_group_name_intent_at", "group_name", "intent_at"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"))
    epoch: Mapped[int] = mapped_column(Integer)
    group_name: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(32))
    intent_at: Mapped[float] = mapped_column(EpochTime)
    result_at: Mapped[float | None] = mapped_column(EpochTime)
    outcome: Mapped[str | None] = mapped_column(String(16))
    detail: Mapped[str] = mapped_column(Text)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    output_tail: Mapped[str | None] = mapped_column(Text)
    result_epoch: Mapped[int | None] = mapped_column(Integer)  # who wrote the result (a later leader may settle it)


class FleetGroupRow(Base):
    """A group's live state as the executor last recorded it (one row per group name)."""

    __tablename__ = "fleet_groups"
    __table_args__ = (CheckConstraint(_in("phase", LIVE_PHASES), name="phase"),)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    phase: Mapped[str] = mapped_column(String(16))
    since: Mapped[float] = mapped_column(EpochTime)
    worker_url: Mapped[str | None] = mapped_column(String(500))
    worker_id: Mapped[str | None] = mapped_column(String(64))  # the gateway's id while registered
    attempts: Mapped[int] = mapped_column(Integer)  # failed starts in a row
    retry_at: Mapped[float | None] = mapped_column(EpochTime)  # no new start before this (backoff)
    cordoned: Mapped[bool] = mapped_column(Boolean)
    cause: Mapped[str | None] = mapped_column(Text)  # why it failed or is cordoned
    health_failures: Mapped[int] = mapped_column(Integer)  # failed health ticks in a row while ready
    start_began_at: Mapped[float | None] = mapped_column(EpochTime)
    removed_at: Mapped[float | None] = mapped_column(EpochTime)  # when a drain removed it from the gateway
    stop_issued_at: Mapped[float | None] = mapped_column(EpochTime)  # a failed group: when its stop was issued
    epoch: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[float] = mapped_column(EpochTime)


class ControllerStateRow(Base):
    """Small JSON documents the controller keeps across restarts: the core's memory, the shadow fleet."""

    __tablename__ = "controller_state"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[dict] = mapped_column(JSON)
    epoch: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[float] = mapped_column(EpochTime)


class LeaseRow(Base):
    """Leadership: the instance that may act, until ``expires_at``; ``epoch`` +1 at every takeover."""

    __tablename__ = "leases"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(200))
    epoch: Mapped[int] = mapped_column(Integer)
    acquired_at: Mapped[float | None] = mapped_column(EpochTime)
    renewed_at: Mapped[float | None] = mapped_column(EpochTime)
    expires_at: Mapped[float | None] = mapped_column(EpochTime)


class OperatorControlRow(Base):
    """An operator's command (pin, unpin, pause, resume, cordon, uncordon) with who and why."""

    __tablename__ = "operator_controls"
    __table_args__ = (CheckConstraint(_in("kind", CONTROL_KINDS), name="kind"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[float] = mapped_column(EpochTime, index=True)
    kind: Mapped[str] = mapped_column(String(16))
    group_name: Mapped[str | None] = mapped_column(String(64))
    groups: Mapped[int | None] = mapped_column(Integer)
    until: Mapped[float | None] = mapped_column(EpochTime)
    by_user: Mapped[str] = mapped_column(String(200))
    reason: Mapped[str] = mapped_column(Text)
