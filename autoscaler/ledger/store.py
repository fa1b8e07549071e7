"""The ledger store: what the live service and the simulator call to record runs, decisions,
group lifecycle events, per-node power-state intervals and tokens, and what reports read.

Live service (one call per thing that happens; ``at`` is always the caller's clock)::

    ledger = Ledger(settings.database_url)               # migrates on first use
    run = ledger.start_run("live", loaded_policy, at=now, label="prod")
    ledger.set_group_state(run, "g1", "active", at=now)  # what is on when the run starts
    ledger.set_group_state(run, "g3", "off", at=now)
    d = ledger.record_decision(run, now, decision)       # every tick, holds included
    ledger.record_event(run, now, "g3", "started", decision_id=d)      # nodes of g3 -> active
    ledger.record_event(run, t1, "g3", "ready")
    ledger.record_event(run, t2, "g3", "drain_started", decision_id=d2)
    ledger.record_event(run, t3, "g3", "drained")
    ledger.record_event(run, t4, "g3", "stopped", node_state="off")    # the actuator says idle|off
    ledger.record_tokens(run, t0, t1, prompt_tokens=..., generation_tokens=...)
    ledger.record_policy(run, reloaded_policy, at=t5)    # a policy edit that loaded
    ledger.record_rejected_policy(at=t6, text=..., errors=exc.errors, path=..., run_id=run)
    ledger.end_run(run, at=t7)                           # closes the open intervals at t7

A live run that was never ended (the controller crashed) is closed by the next live
``start_run``: its open intervals end where the new run starts, the nodes being assumed to have
kept their state meanwhile; the new run declares what it finds.

Simulator (one transaction for a whole backtest, the run and its end included: interrupted or
failing, it leaves nothing; ~80,000 decisions take a few seconds)::

    run = ledger.record_run(
        "simulation", loaded_policy, start=trace_start, end=trace_end, label="azure-conv",
        decisions=[(t, decision), ...],                   # (time, core Decision) in tick order
        events=[GroupEvent(t, "g3", "started", decision_index=i), ...],  # i: index in decisions
        intervals=[NodeInterval("spark-5", "g3", "active", start, end), ...],
        tokens=[TokenCount(start, end, prompt_tokens, generation_tokens), ...],
    )

(``start_run`` + ``record_bulk`` + ``end_run`` are three transactions: a run interrupted between
them has no intervals, and reports refuse it as incomplete.)

Intervals are what costs are computed from: hand over every node of the fleet for the whole run
(``active`` while its group starts, serves, drains or stops, or is up after a failure; ``idle``
or ``off`` while stopped), or an off node is simply not charged. A group's two nodes have
the same intervals; ``NodeInterval.for_group`` builds them.

Errors: a database that cannot be reached or fails -> ``RuntimeFailure`` (exit 1) with a one-line
message and the password hidden; wrong arguments (an unknown state or event) -> ``ValueError``,
a programming error of the caller.
"""

from __future__ import annotations

import hashlib
import io
import math
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, insert, or_, select, text, update
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from autoscaler.core.types import Decision
from autoscaler.errors import RuntimeFailure
from autoscaler.faults import fault_point
from autoscaler.ledger.models import (
    GROUP_EVENTS,
    NODE_STATES,
    SOURCES,
    DecisionRow,
    DecisionSummary,
    GroupEventRow,
    NodeIntervalRow,
    PolicyLoad,
    PolicyRejection,
    PolicyVersion,
    Run,
    TokenCountRow,
)
from autoscaler.ledger.schema import WRITE, check_schema, ensure_schema, make_engine, one_line
from autoscaler.policy.loader import LoadedPolicy, parse_policy
from autoscaler.policy.model import Policy
from autoscaler.settings import redact_url

# --------------------------------------------------------------------------- hand-over values


@dataclass(frozen=True, slots=True)
class NodeInterval:
    """A node in one power state from ``start`` to ``end`` (epoch s; ``end`` None: still open)."""

    node: str
    group: str
    state: str  # active | idle | off
    start: float
    end: float | None = None

    def __post_init__(self) -> None:
        if self.state not in NODE_STATES:
            raise ValueError(f"node state {self.state!r} is not one of {', '.join(NODE_STATES)}")
        if self.end is not None and self.end < self.start:
            raise ValueError(f"interval of {self.node} ends ({self.end}) before it starts ({self.start})")

    @staticmethod
    def for_group(nodes: Iterable[str], group: str, state: str, start: float, end: float | None) -> list[NodeInterval]:
        return [NodeInterval(n, group, state, start, end) for n in nodes]

    @staticmethod
    def for_schedule(
        nodes: Sequence[str], group: str, on: Iterable[tuple[float, float]], start: float, end: float,
        off_state: str = "off",
    ) -> list[NodeInterval]:
        """A group's nodes over [start, end]: ``active`` in each (sorted, disjoint) ``on`` span,
        ``off_state`` in the gaps between them."""
        out: list[NodeInterval] = []
        cursor = start
        for a, b in on:
            if a > cursor:
                out += NodeInterval.for_group(nodes, group, off_state, cursor, a)
            out += NodeInterval.for_group(nodes, group, "active", a, b)
            cursor = b
        if cursor < end:
            out += NodeInterval.for_group(nodes, group, off_state, cursor, end)
        return out


@dataclass(frozen=True, slots=True)
class GroupEvent:
    """A step in a group's life. In ``record_bulk`` the causing decision is named by its index in
    the decisions handed over in the same call (``decision_index``); live callers pass the id
    ``record_decision`` returned (``decision_id``)."""

    at: float
    group: str
    event: str  # one of models.GROUP_EVENTS
    decision_index: int | None = None
    decision_id: int | None = None
    detail: str = ""

    def __post_init__(self) -> None:
        if self.event not in GROUP_EVENTS:
            raise ValueError(f"group event {self.event!r} is not one of {', '.join(GROUP_EVENTS)}")


@dataclass(frozen=True, slots=True)
class TokenCount:
    """Tokens served between ``start`` and ``end`` (by one group, or the fleet when group is None)."""

    start: float
    end: float
    prompt_tokens: int
    generation_tokens: int
    group: str | None = None


# ------------------------------------------------------------------------------- read values


@dataclass(frozen=True)
class RunInfo:
    id: int
    source: str
    label: str | None
    started_at: float
    ended_at: float | None
    policy_sha256: str
    end_note: str | None = None

    @property
    def incomplete(self) -> bool:
        """A backtest that never ended: one interrupted between the three transactions an autoscaler
        older than ``record_run`` wrote it in. Its intervals may be missing, so its figures are not
        true (reports leave it out; ``--run`` refuses it)."""
        return self.source == "simulation" and self.ended_at is None

    def incomplete_text(self) -> str:
        label = f" {self.label!r}" if self.label else ""
        return (f"run {self.id} ({self.source}{label}) was never completed (a backtest interrupted while it was "
                f"written, by an older autoscaler): its figures would not be true")


@dataclass(frozen=True)
class PolicyInForce:
    """A policy in force in a run from ``start`` to ``end`` (None: to the end of the run)."""

    sha256: str
    start: float
    end: float | None
    cost: dict
    fleet: dict


@dataclass(frozen=True)
class DecisionInfo:
    id: int
    run_id: int
    at: float
    action: str
    target_groups: int
    group: str | None
    groups: list
    reason: str
    detail: str
    inputs: dict
    policy_sha256: str


@dataclass(frozen=True)
class EventInfo:
    id: int
    run_id: int
    at: float
    group: str
    event: str
    decision_id: int | None
    detail: str


@dataclass(frozen=True)
class SummaryInfo:
    run_id: int
    hour_start: float
    action: str
    reason: str
    count: int
    first_at: float
    last_at: float


@dataclass
class PeriodData:
    """Everything a report needs about the runs that overlap a period."""

    runs: list[RunInfo]
    policies: dict[int, list[PolicyInForce]]  # run id -> policies in force, in time order
    intervals: dict[int, list[NodeInterval]]  # run id -> intervals overlapping the period
    tokens: dict[int, list[TokenCount]]
    load: list[tuple[float, float]] = field(default_factory=list)  # (at, demand) from decisions' inputs


@dataclass(frozen=True)
class CompactResult:
    folded: int  # hold decisions removed
    summaries: int  # summary rows written or updated


# ------------------------------------------------------------------------------------ helpers


def fleet_shape(policy: Policy) -> dict[str, Any]:
    fleet = policy.fleet
    return {
        "group_size_nodes": fleet.group_size_nodes,
        "floor_groups": fleet.floor_groups,
        "ceiling_groups": fleet.ceiling_groups,
        "requests_per_group": fleet.requests_per_group,
        "groups": {g.name: [n.name for n in g.nodes] for g in fleet.groups},
    }


def _policy_parts(policy: LoadedPolicy | tuple[str, str]) -> tuple[str, str, Policy, str | None]:
    """(text, sha256, parsed policy, path) from a LoadedPolicy or a (text, sha256) pair."""
    if isinstance(policy, LoadedPolicy):
        return policy.text, policy.sha256, policy.policy, policy.path
    text, sha = policy
    actual = hashlib.sha256(text.encode()).hexdigest()
    if sha != actual:
        raise ValueError(f"policy sha256 {sha[:12]}... does not match its text ({actual[:12]}...)")
    return text, sha, parse_policy(text), None


def _decision_row(run_id: int, at: float, decision: Decision, sha: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "at": at,
        "action": str(decision.action),
        "target_groups": decision.target_groups,
        "group_name": decision.group,
        "groups": list(decision.groups),
        "reason": str(decision.reason),
        "detail": decision.detail,
        "inputs": dict(decision.inputs),
        "forecast_used": bool(decision.forecast_used),
        "policy_sha256": sha,
    }


def bulk_insert(conn: Connection, model: Any, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert many rows, every value converted once, by its column's SQLAlchemy type (times by
    ``EpochTime`` alone, JSON by the engine's serializer: ``bind_processor``, the conversion
    ``conn.execute`` applies), then handed to the driver's own bulk API:

    - SQLite: the driver's ``executemany`` of one INSERT;
    - PostgreSQL with psycopg2: ``COPY ... FROM STDIN`` (about twice as fast as INSERTs);
    - anything else: SQLAlchemy 2's bulk path, one INSERT with many parameter sets.

    SQLAlchemy's own path costs 1 s more on SQLite and 4.5 s more on PostgreSQL for a 14-day
    backtest's 80,640 decisions, in per-row parameter handling (bench/README.md)."""
    if not rows:
        return
    table = model.__table__
    driver = conn.dialect.driver
    if driver not in ("pysqlite", "psycopg2"):
        conn.execute(insert(table), list(rows))
        return
    columns = list(rows[0])
    convert = [table.c[name].type.bind_processor(conn.dialect) for name in columns]
    converted = [tuple(v if f is None or v is None else f(v) for f, v in zip(convert, (row[c] for c in columns)))
                 for row in rows]
    names = ", ".join(columns)
    if driver == "pysqlite":
        conn.exec_driver_sql(f"INSERT INTO {table.name} ({names}) VALUES ({', '.join('?' for _ in columns)})",
                             converted)
        return
    buffer = io.StringIO("".join("\t".join(map(_copy_text, values)) + "\n" for values in converted))
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None  # a connection in use has its driver connection
    cursor = dbapi.cursor()
    try:
        cursor.copy_expert(f"COPY {table.name} ({names}) FROM STDIN", buffer)
    finally:
        cursor.close()


def _copy_text(value: Any) -> str:
    """A converted value in COPY's text format: NULL as \\N, booleans t/f, times ISO 8601 with
    their zone, text with backslash, tab and line breaks escaped."""
    if value is None:
        return "\\N"
    if value is True or value is False:
        return "t" if value else "f"
    if isinstance(value, datetime):
        return value.isoformat()
    text = str(value)
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        text = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return text


# -------------------------------------------------------------------------------------- Ledger


class Ledger:
    """The ledger in one database. ``url`` is a SQLAlchemy URL (``sqlite:///autoscaler.db``,
    ``postgresql://user:pw@host/db``). The schema is created or upgraded on first use.

    ``create=False`` refuses to create a SQLite file that does not exist (a mistyped path should
    not look like an empty ledger). ``read_only=True`` (report, why, status: commands that only
    read) implies it, and never creates, migrates or writes the database: it must be a ledger at
    this code's schema revision, else the error says what the file is (``schema.check_schema``).
    ``flag`` names where the URL came from in error messages (``--db``, ``AUTOSCALER_DATABASE_URL``).
    """

    def __init__(self, url: str, *, create: bool = True, read_only: bool = False, flag: str = "--db") -> None:
        self.url = url
        self.safe_url = redact_url(url)
        self.read_only = read_only
        parsed = make_url(url) if "://" in url else None
        if (not create or read_only) and parsed is not None and parsed.get_backend_name() == "sqlite":
            db = parsed.database
            if db and db != ":memory:" and not db.startswith("file:") and not Path(db).exists():
                raise RuntimeFailure(f"no ledger database at {db} ({self.safe_url}): nothing has been recorded there")
        self.engine = make_engine(url, read_only=read_only, flag=flag)
        if read_only:
            check_schema(self.engine, url)
        else:
            ensure_schema(self.engine, url)
        self._policy_of_run: dict[int, str] = {}
        self._nodes_of_run: dict[int, dict[str, list[str]]] = {}
        # The leader's epoch, once the live service leads: every write is then fenced by it.
        self.fence_epoch: int | None = None

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transactions
    @contextmanager
    def _write(self) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn:
                conn.execution_options(**WRITE)
                with conn.begin():
                    if self.fence_epoch is not None and conn.dialect.name == "postgresql":
                        # Fencing (migration 0003): every write of this transaction is refused by the
                        # database unless this epoch is the live lease's (service.leadership.fenced).
                        conn.execute(text("SELECT set_config('autoscaler.epoch', :e, true)"),
                                     {"e": str(int(self.fence_epoch))})
                    yield conn
        except (DBAPIError, SQLAlchemyError) as exc:
            raise RuntimeFailure(f"ledger database {self.safe_url}: {one_line(exc)}") from exc

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn:
                with conn.begin():
                    yield conn
        except (DBAPIError, SQLAlchemyError) as exc:
            raise RuntimeFailure(f"ledger database {self.safe_url}: {one_line(exc)}") from exc

    # ------------------------------------------------------------------ runs and policies
    def start_run(
        self,
        source: str,
        policy: LoadedPolicy | tuple[str, str],
        *,
        at: float,
        label: str | None = None,
        instance: str | None = None,
    ) -> int:
        """Record a new run and the policy it starts with; returns the run id.

        A live (or advisory) run also ends every earlier run of its source that was never ended
        (a crash, or a leader that lost its lease), closing their open intervals at ``at``.
        """
        text, sha, parsed, path = _policy_parts(policy)
        with self._write() as conn:
            run_id = self._open_run(conn, source, (text, sha, parsed, path), at, label, instance)
            if source in ("live", "advisory"):
                stale = conn.execute(
                    select(Run.id).where(Run.source == source, Run.ended_at.is_(None), Run.id != run_id,
                                         Run.started_at <= at)
                ).scalars().all()
                for old in stale:
                    self._close_run(conn, old, at, f"superseded by run {run_id} (it was never ended)")
        self._policy_of_run[run_id] = sha
        self._nodes_of_run[run_id] = fleet_shape(parsed)["groups"]
        return run_id

    def _open_run(self, conn: Connection, source: str, parts: tuple[str, str, Policy, str | None], at: float,
                  label: str | None, instance: str | None) -> int:
        if source not in SOURCES:
            raise ValueError(f"source {source!r} is not one of {', '.join(SOURCES)}")
        text, sha, parsed, path = parts
        self._ensure_policy_version(conn, text, sha, parsed, path, at)
        run_id = conn.execute(
            insert(Run).returning(Run.id),
            {"source": source, "label": label, "started_at": at, "ended_at": None,
             "policy_sha256": sha, "created_at": time.time(), "instance": instance},
        ).scalar_one()
        conn.execute(insert(PolicyLoad), {"run_id": run_id, "policy_sha256": sha, "at": at})
        return run_id

    def record_run(
        self,
        source: str,
        policy: LoadedPolicy | tuple[str, str],
        *,
        start: float,
        end: float,
        label: str | None = None,
        decisions: Sequence[tuple[float, Decision]] = (),
        events: Sequence[GroupEvent] = (),
        intervals: Sequence[NodeInterval] = (),
        tokens: Sequence[TokenCount] = (),
    ) -> int:
        """A whole finished run (a backtest) in one transaction: the run and its policy, every
        decision, event, interval and token count (as ``record_bulk``), and its end. Interrupted (a
        signal) or failing (a full disk), it leaves nothing behind: never a run without its node
        intervals, which a report would charge nothing and call a 100% saving. Returns the run id."""
        if source not in SOURCES:
            raise ValueError(f"source {source!r} is not one of {', '.join(SOURCES)}")
        self._check_bulk(decisions, events)
        text, sha, parsed, path = _policy_parts(policy)
        with self._write() as conn:
            run_id = self._open_run(conn, source, (text, sha, parsed, path), start, label, None)
            fault_point("backtest_write:run_inserted")
            self._insert_bulk(conn, run_id, sha, decisions, events, intervals, tokens)
            self._close_run(conn, run_id, end, None)
        self._policy_of_run[run_id] = sha
        self._nodes_of_run[run_id] = fleet_shape(parsed)["groups"]
        return run_id

    def record_policy(self, run_id: int, policy: LoadedPolicy | tuple[str, str], *, at: float) -> str:
        """A policy (re)loaded during a run: its cost model applies from ``at`` on. Returns its sha256."""
        text, sha, parsed, path = _policy_parts(policy)
        with self._write() as conn:
            self._ensure_policy_version(conn, text, sha, parsed, path, at)
            conn.execute(insert(PolicyLoad), {"run_id": run_id, "policy_sha256": sha, "at": at})
        self._policy_of_run[run_id] = sha
        self._nodes_of_run[run_id] = fleet_shape(parsed)["groups"]
        return sha

    def record_rejected_policy(
        self, *, at: float, text: str, errors: Sequence[str], path: str | None = None, run_id: int | None = None
    ) -> int:
        """A policy edit that failed validation and was not loaded, with its error lines."""
        sha = hashlib.sha256(text.encode()).hexdigest()
        with self._write() as conn:
            return conn.execute(
                insert(PolicyRejection).returning(PolicyRejection.id),
                {"run_id": run_id, "at": at, "path": path, "sha256": sha, "text": text, "errors": list(errors)},
            ).scalar_one()

    def _ensure_policy_version(
        self, conn: Connection, text: str, sha: str, parsed: Policy, path: str | None, at: float
    ) -> None:
        exists = conn.execute(select(PolicyVersion.id).where(PolicyVersion.sha256 == sha)).first()
        if exists is None:
            conn.execute(
                insert(PolicyVersion),
                {"sha256": sha, "text": text, "path": path, "cost": parsed.cost.model_dump(mode="json"),
                 "fleet": fleet_shape(parsed), "first_seen_at": at},
            )

    def end_run(self, run_id: int, at: float, note: str | None = None) -> None:
        """The run is over: its open intervals end at ``at``."""
        with self._write() as conn:
            self._close_run(conn, run_id, at, note)

    def _close_run(self, conn: Connection, run_id: int, at: float, note: str | None) -> None:
        conn.execute(
            update(NodeIntervalRow)
            .where(NodeIntervalRow.run_id == run_id, NodeIntervalRow.end_at.is_(None))
            .values(end_at=at)
        )
        conn.execute(update(Run).where(Run.id == run_id).values(ended_at=at, end_note=note))

    def _run_policy(self, conn: Connection, run_id: int) -> str:
        sha = self._policy_of_run.get(run_id)
        if sha is None:
            sha = conn.execute(
                select(PolicyLoad.policy_sha256).where(PolicyLoad.run_id == run_id)
                .order_by(PolicyLoad.at.desc(), PolicyLoad.id.desc()).limit(1)
            ).scalar_one_or_none()
            if sha is None:
                raise ValueError(f"run {run_id} does not exist")
            self._policy_of_run[run_id] = sha
        return sha

    def _group_nodes(self, conn: Connection, run_id: int, group: str) -> list[str]:
        groups = self._nodes_of_run.get(run_id)
        if groups is None:
            sha = self._run_policy(conn, run_id)
            groups = conn.execute(select(PolicyVersion.fleet).where(PolicyVersion.sha256 == sha)).scalar_one()["groups"]
            self._nodes_of_run[run_id] = groups
        if group not in groups:
            raise ValueError(f"group {group!r} is not in run {run_id}'s fleet ({', '.join(groups)})")
        return list(groups[group])

    # ------------------------------------------------------------------ one at a time (live)
    def record_decision(
        self, run_id: int, at: float, decision: Decision, policy_sha: str | None = None, *, epoch: int | None = None
    ) -> int:
        """One tick's decision (holds too); returns its id for ``record_event(decision_id=...)``.
        ``epoch``: the leader's epoch (live and advisory runs)."""
        with self._write() as conn:
            sha = policy_sha or self._run_policy(conn, run_id)
            row = _decision_row(run_id, at, decision, sha)
            if epoch is not None:
                row["epoch"] = epoch
            return conn.execute(insert(DecisionRow).returning(DecisionRow.id), row).scalar_one()

    def record_event(
        self,
        run_id: int,
        at: float,
        group: str,
        event: str,
        *,
        decision_id: int | None = None,
        detail: str = "",
        node_state: str | None = None,
        epoch: int | None = None,
    ) -> int:
        """A group lifecycle event. Node intervals follow: ``started`` makes the group's nodes
        ``active``; ``stopped`` needs ``node_state`` (``idle`` or ``off``: what the actuator left
        them in); ``failed`` changes them only when ``node_state`` is given (a node still up
        stays active and is charged). Returns the event id."""
        GroupEvent(at, group, event)  # validates the event name
        if event == "started" and node_state is None:
            node_state = "active"
        if event == "stopped" and node_state not in ("idle", "off"):
            raise ValueError(f"stopped {group}: node_state must be 'idle' or 'off' (declared by the actuator)")
        if node_state is not None and node_state not in NODE_STATES:
            raise ValueError(f"node state {node_state!r} is not one of {', '.join(NODE_STATES)}")
        with self._write() as conn:
            event_id = conn.execute(
                insert(GroupEventRow).returning(GroupEventRow.id),
                {"run_id": run_id, "at": at, "group_name": group, "event": event,
                 "decision_id": decision_id, "detail": detail, "epoch": epoch},
            ).scalar_one()
            if node_state is not None:
                for node in self._group_nodes(conn, run_id, group):
                    self._set_state(conn, run_id, node, group, node_state, at)
        return event_id

    def set_node_state(self, run_id: int, node: str, group: str, state: str, at: float) -> None:
        """The node is in ``state`` from ``at`` on: its open interval (if any) ends at ``at``."""
        if state not in NODE_STATES:
            raise ValueError(f"node state {state!r} is not one of {', '.join(NODE_STATES)}")
        with self._write() as conn:
            self._set_state(conn, run_id, node, group, state, at)

    def set_group_state(self, run_id: int, group: str, state: str, at: float) -> None:
        """Every node of the group is in ``state`` from ``at`` on."""
        if state not in NODE_STATES:
            raise ValueError(f"node state {state!r} is not one of {', '.join(NODE_STATES)}")
        with self._write() as conn:
            for node in self._group_nodes(conn, run_id, group):
                self._set_state(conn, run_id, node, group, state, at)

    def _set_state(self, conn: Connection, run_id: int, node: str, group: str, state: str, at: float) -> None:
        open_rows = conn.execute(
            select(NodeIntervalRow.id, NodeIntervalRow.state, NodeIntervalRow.start_at).where(
                NodeIntervalRow.run_id == run_id, NodeIntervalRow.node == node, NodeIntervalRow.end_at.is_(None)
            )
        ).all()
        if len(open_rows) == 1 and open_rows[0].state == state:
            return  # already in that state: the interval goes on
        for row in open_rows:
            if at < row.start_at:
                raise ValueError(f"{node}: new state at {at} is before its open interval's start {row.start_at}")
            conn.execute(update(NodeIntervalRow).where(NodeIntervalRow.id == row.id).values(end_at=at))
        conn.execute(
            insert(NodeIntervalRow),
            {"run_id": run_id, "node": node, "group_name": group, "state": state, "start_at": at, "end_at": None},
        )

    def record_tokens(
        self, run_id: int, start: float, end: float, prompt_tokens: int, generation_tokens: int, group: str | None = None
    ) -> None:
        with self._write() as conn:
            conn.execute(insert(TokenCountRow), self._token_row(run_id, TokenCount(start, end, prompt_tokens,
                                                                                   generation_tokens, group)))

    @staticmethod
    def _token_row(run_id: int, t: TokenCount) -> dict[str, Any]:
        if t.end < t.start:
            raise ValueError(f"token count ends ({t.end}) before it starts ({t.start})")
        return {"run_id": run_id, "group_name": t.group, "start_at": t.start, "end_at": t.end,
                "prompt_tokens": int(t.prompt_tokens), "generation_tokens": int(t.generation_tokens)}

    # ------------------------------------------------------------------ bulk (simulator)
    def record_bulk(
        self,
        run_id: int,
        *,
        decisions: Sequence[tuple[float, Decision]] = (),
        events: Sequence[GroupEvent] = (),
        intervals: Sequence[NodeInterval] = (),
        tokens: Sequence[TokenCount] = (),
        policy_sha: str | None = None,
    ) -> list[int]:
        """Write a whole schedule in one transaction; returns the decisions' ids in order. (A
        backtest writes its run, this and its end in one transaction: ``record_run``.)"""
        self._check_bulk(decisions, events)
        with self._write() as conn:
            return self._insert_bulk(conn, run_id, policy_sha or self._run_policy(conn, run_id), decisions, events,
                                     intervals, tokens)

    @staticmethod
    def _check_bulk(decisions: Sequence[tuple[float, Decision]], events: Sequence[GroupEvent]) -> None:
        for e in events:
            if e.decision_index is not None and not 0 <= e.decision_index < len(decisions):
                raise ValueError(f"event {e.event} of {e.group} names decision_index {e.decision_index}, "
                                 f"but {len(decisions)} decisions were given")

    def _insert_bulk(
        self, conn: Connection, run_id: int, sha: str, decisions: Sequence[tuple[float, Decision]],
        events: Sequence[GroupEvent], intervals: Sequence[NodeInterval], tokens: Sequence[TokenCount],
    ) -> list[int]:
        ids = self._allocate_decision_ids(conn, len(decisions))
        if decisions:
            rows = []
            for new_id, (at, d) in zip(ids, decisions):
                row = _decision_row(run_id, at, d, sha)
                row["id"] = new_id
                rows.append(row)
            bulk_insert(conn, DecisionRow, rows)
        if events:
            conn.execute(insert(GroupEventRow), [
                {"run_id": run_id, "at": e.at, "group_name": e.group, "event": e.event, "detail": e.detail,
                 "decision_id": ids[e.decision_index] if e.decision_index is not None else e.decision_id}
                for e in events
            ])
        if intervals:
            conn.execute(insert(NodeIntervalRow), [
                {"run_id": run_id, "node": i.node, "group_name": i.group, "state": i.state,
                 "start_at": i.start, "end_at": i.end}
                for i in intervals
            ])
        if tokens:
            conn.execute(insert(TokenCountRow), [self._token_row(run_id, t) for t in tokens])
        return ids

    @staticmethod
    def _allocate_decision_ids(conn: Connection, n: int) -> list[int]:
        """Ids for ``n`` new decisions, so a bulk insert needs no RETURNING (row-at-a-time on
        SQLite). SQLite: after the current maximum, safe under BEGIN IMMEDIATE (one writer at a
        time); PostgreSQL: drawn from the table's sequence, safe with concurrent writers."""
        if n == 0:
            return []
        if conn.dialect.name == "postgresql":
            return list(conn.exec_driver_sql(
                "SELECT nextval(pg_get_serial_sequence('decisions', 'id')) FROM generate_series(1, %(n)s)", {"n": n}
            ).scalars())
        top = conn.execute(select(func.coalesce(func.max(DecisionRow.id), 0))).scalar_one()
        return list(range(top + 1, top + n + 1))

    # ------------------------------------------------------------------ compaction
    def compact(self, older_than_s: float, *, now: float | None = None, source: str | None = None) -> CompactResult:
        """Fold hold decisions older than ``older_than_s`` into hourly summaries (count per reason
        per hour). Decisions that acted, and any decision an event names, are kept."""
        now = time.time() if now is None else now
        cutoff = now - older_than_s
        referenced = select(GroupEventRow.decision_id).where(GroupEventRow.decision_id.is_not(None))
        cond = [DecisionRow.action == "hold", DecisionRow.at < cutoff, DecisionRow.id.not_in(referenced)]
        if source is not None:
            cond.append(DecisionRow.run_id.in_(select(Run.id).where(Run.source == source)))
        with self._write() as conn:
            if conn.dialect.name == "postgresql":
                # One snapshot for the count and the delete: a hold committed in between is neither.
                conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            groups: dict[tuple[int, float, str, str], list[float]] = {}
            for run_id, at, action, reason in conn.execute(
                select(DecisionRow.run_id, DecisionRow.at, DecisionRow.action, DecisionRow.reason).where(*cond)
            ):
                hour = math.floor(at / 3600) * 3600.0
                slot = groups.setdefault((run_id, hour, action, reason), [0, at, at])
                slot[0] += 1
                slot[1] = min(slot[1], at)
                slot[2] = max(slot[2], at)
            if not groups:
                return CompactResult(0, 0)
            existing: dict = {}
            for row in conn.execute(
                select(DecisionSummary.id, DecisionSummary.run_id, DecisionSummary.hour_start, DecisionSummary.action,
                       DecisionSummary.reason, DecisionSummary.count, DecisionSummary.first_at, DecisionSummary.last_at)
                .where(DecisionSummary.run_id.in_({k[0] for k in groups}))
            ):
                existing[(row.run_id, row.hour_start, row.action, row.reason)] = row
            new_rows = []
            for key, (count, first, last) in groups.items():
                old = existing.get(key)
                if old is None:
                    new_rows.append({"run_id": key[0], "hour_start": key[1], "action": key[2], "reason": key[3],
                                     "count": count, "first_at": first, "last_at": last})
                else:
                    conn.execute(update(DecisionSummary).where(DecisionSummary.id == old.id).values(
                        count=old.count + count, first_at=min(old.first_at, first), last_at=max(old.last_at, last)))
            if new_rows:
                conn.execute(insert(DecisionSummary), new_rows)
            folded = conn.execute(delete(DecisionRow).where(*cond)).rowcount
            total = sum(v[0] for v in groups.values())
            if folded != total:  # cannot happen under the lock / snapshot; refuse to lose counts
                raise RuntimeFailure(f"ledger compaction counted {total} holds but would delete {folded}; rolled back")
        return CompactResult(folded, len(groups))

    # ------------------------------------------------------------------ readers
    def runs(
        self, *, source: str = "all", start: float | None = None, end: float | None = None, run_id: int | None = None,
        now: float | None = None,
    ) -> list[RunInfo]:
        """Runs of ``source`` (live, simulation, all) that overlap [start, end), oldest first."""
        q = select(Run.__table__)
        if run_id is not None:
            q = q.where(Run.id == run_id)
        if source != "all":
            q = q.where(Run.source == source)
        if end is not None:
            q = q.where(Run.started_at < end)
        if start is not None:
            q = q.where(or_(Run.ended_at.is_(None), Run.ended_at > start))
        with self._read() as conn:
            rows = conn.execute(q.order_by(Run.started_at, Run.id)).all()
        return [RunInfo(r.id, r.source, r.label, r.started_at, r.ended_at, r.policy_sha256, r.end_note) for r in rows]

    def policies_in_force(self, conn: Connection, run: RunInfo) -> list[PolicyInForce]:
        rows = conn.execute(
            select(PolicyLoad.at, PolicyLoad.policy_sha256, PolicyVersion.cost, PolicyVersion.fleet)
            .join(PolicyVersion, PolicyVersion.sha256 == PolicyLoad.policy_sha256)
            .where(PolicyLoad.run_id == run.id).order_by(PolicyLoad.at, PolicyLoad.id)
        ).all()
        out: list[PolicyInForce] = []
        for i, row in enumerate(rows):
            start = run.started_at if i == 0 else row.at
            end = rows[i + 1].at if i + 1 < len(rows) else run.ended_at
            out.append(PolicyInForce(row.policy_sha256, start, end, row.cost, row.fleet))
        return out

    def period_data(self, runs: Sequence[RunInfo], start: float, end: float, *, with_load: bool = False) -> PeriodData:
        """Policies, intervals and tokens of ``runs`` overlapping [start, end)."""
        data = PeriodData(list(runs), {}, {}, {})
        ids = [r.id for r in runs]
        if not ids:
            return data
        with self._read() as conn:
            for run in runs:
                data.policies[run.id] = self.policies_in_force(conn, run)
                data.intervals[run.id] = []
                data.tokens[run.id] = []
            for r in conn.execute(
                select(NodeIntervalRow.run_id, NodeIntervalRow.node, NodeIntervalRow.group_name, NodeIntervalRow.state,
                       NodeIntervalRow.start_at, NodeIntervalRow.end_at)
                .where(NodeIntervalRow.run_id.in_(ids), NodeIntervalRow.start_at < end,
                       or_(NodeIntervalRow.end_at.is_(None), NodeIntervalRow.end_at > start))
                .order_by(NodeIntervalRow.start_at, NodeIntervalRow.id)
            ):
                data.intervals[r.run_id].append(NodeInterval(r.node, r.group_name, r.state, r.start_at, r.end_at))
            for r in conn.execute(
                select(TokenCountRow.__table__).where(TokenCountRow.run_id.in_(ids), TokenCountRow.start_at <= end,
                                            TokenCountRow.end_at >= start)
            ):
                data.tokens[r.run_id].append(TokenCount(r.start_at, r.end_at, r.prompt_tokens, r.generation_tokens,
                                                        r.group_name))
            if with_load:
                demand = DecisionRow.inputs["demand"].as_float()
                data.load = [
                    (at, value) for at, value in conn.execute(
                        select(DecisionRow.at, demand)
                        .where(DecisionRow.run_id.in_(ids), DecisionRow.at >= start, DecisionRow.at < end)
                        .order_by(DecisionRow.at)
                    ) if value is not None
                ]
        return data

    # ------------------------------------------------------------------ readers for `why`
    def decisions(
        self, run_id: int, *, start: float | None = None, end: float | None = None, acted_only: bool = False,
        limit: int | None = None, newest_first: bool = False,
    ) -> list[DecisionInfo]:
        """Decisions of a run with start <= at <= end."""
        q = select(DecisionRow.__table__).where(DecisionRow.run_id == run_id)
        if start is not None:
            q = q.where(DecisionRow.at >= start)
        if end is not None:
            q = q.where(DecisionRow.at <= end)
        if acted_only:
            q = q.where(DecisionRow.action != "hold")
        q = q.order_by(DecisionRow.at.desc(), DecisionRow.id.desc()) if newest_first else q.order_by(
            DecisionRow.at, DecisionRow.id)
        if limit is not None:
            q = q.limit(limit)
        with self._read() as conn:
            return [self._decision_info(r) for r in conn.execute(q)]

    def decision(self, decision_id: int) -> DecisionInfo | None:
        with self._read() as conn:
            row = conn.execute(select(DecisionRow.__table__).where(DecisionRow.id == decision_id)).one_or_none()
        return None if row is None else self._decision_info(row)

    @staticmethod
    def _decision_info(r: Any) -> DecisionInfo:
        return DecisionInfo(r.id, r.run_id, r.at, r.action, r.target_groups, r.group_name, list(r.groups or []),
                            r.reason, r.detail, dict(r.inputs or {}), r.policy_sha256)

    def hold_counts(self, run_id: int, start: float, end: float) -> dict[str, int]:
        """Hold decisions per reason with start <= at <= end, compacted ones included (by hour)."""
        counts: dict[str, int] = defaultdict(int)
        with self._read() as conn:
            for reason, n in conn.execute(
                select(DecisionRow.reason, func.count()).where(
                    DecisionRow.run_id == run_id, DecisionRow.action == "hold", DecisionRow.at >= start,
                    DecisionRow.at <= end).group_by(DecisionRow.reason)
            ):
                counts[reason] += n
            for reason, n in conn.execute(
                select(DecisionSummary.reason, func.sum(DecisionSummary.count)).where(
                    DecisionSummary.run_id == run_id, DecisionSummary.first_at >= start,
                    DecisionSummary.last_at <= end).group_by(DecisionSummary.reason)
            ):
                counts[reason] += int(n)
        return dict(counts)

    def summaries(self, run_id: int | None = None) -> list[SummaryInfo]:
        q = select(DecisionSummary.__table__).order_by(DecisionSummary.hour_start, DecisionSummary.reason)
        if run_id is not None:
            q = q.where(DecisionSummary.run_id == run_id)
        with self._read() as conn:
            return [SummaryInfo(r.run_id, r.hour_start, r.action, r.reason, r._mapping["count"], r.first_at, r.last_at)
                    for r in conn.execute(q)]

    def events(self, run_id: int, *, start: float | None = None, end: float | None = None,
               group: str | None = None) -> list[EventInfo]:
        q = select(GroupEventRow.__table__).where(GroupEventRow.run_id == run_id)
        if start is not None:
            q = q.where(GroupEventRow.at >= start)
        if end is not None:
            q = q.where(GroupEventRow.at <= end)
        if group is not None:
            q = q.where(GroupEventRow.group_name == group)
        with self._read() as conn:
            return [EventInfo(r.id, r.run_id, r.at, r.group_name, r.event, r.decision_id, r.detail)
                    for r in conn.execute(q.order_by(GroupEventRow.at, GroupEventRow.id))]

    def intervals_at(self, run_id: int, at: float) -> list[NodeInterval]:
        """The node intervals of a run that contain the instant ``at`` (start <= at < end)."""
        with self._read() as conn:
            rows = conn.execute(
                select(NodeIntervalRow.__table__).where(
                    NodeIntervalRow.run_id == run_id, NodeIntervalRow.start_at <= at,
                    or_(NodeIntervalRow.end_at.is_(None), NodeIntervalRow.end_at > at))
                .order_by(NodeIntervalRow.group_name, NodeIntervalRow.node)
            ).all()
        return [NodeInterval(r.node, r.group_name, r.state, r.start_at, r.end_at) for r in rows]

    def fleet_of_run(self, run_id: int, at: float | None = None) -> dict:
        """The fleet shape of the policy in force in the run at ``at`` (default: its latest)."""
        with self._read() as conn:
            q = (select(PolicyVersion.fleet).join(PolicyLoad, PolicyLoad.policy_sha256 == PolicyVersion.sha256)
                 .where(PolicyLoad.run_id == run_id))
            if at is not None:
                q = q.where(PolicyLoad.at <= at)
            fleet = conn.execute(q.order_by(PolicyLoad.at.desc(), PolicyLoad.id.desc()).limit(1)).scalar_one_or_none()
            if fleet is None:  # `at` is before the first load: the run's first policy
                fleet = conn.execute(
                    select(PolicyVersion.fleet).join(Run, Run.policy_sha256 == PolicyVersion.sha256)
                    .where(Run.id == run_id)).scalar_one()
        return fleet

    def counts(self) -> Mapping[str, int]:
        """Row counts per table (for tests and the docs)."""
        out = {}
        with self._read() as conn:
            for model in (Run, PolicyVersion, PolicyLoad, PolicyRejection, DecisionRow, DecisionSummary,
                          GroupEventRow, NodeIntervalRow, TokenCountRow):
                out[model.__tablename__] = conn.execute(select(func.count()).select_from(model)).scalar_one()
        return out


__all__ = [
    "CompactResult", "DecisionInfo", "EventInfo", "GroupEvent", "Ledger", "NodeInterval", "PeriodData",
    "PolicyInForce", "RunInfo", "SummaryInfo", "TokenCount",
]
