"""The live side: advisory runs, epochs, the executor's journal and group state, the core's
memory, the leadership lease and operator controls.

Why: a controller that acts on a real fleet must (1) write the intent of every side effect before
it acts and the result after, so that a restarted controller finds an act without a result and
finishes or undoes it (``actions``); (2) know each group's phase, gateway id, retries and cordon
across restarts (``fleet_groups``); (3) decide after a restart as it would have before
(``controller_state`` keeps the core's memory and the advisory shadow fleet); (4) let only one
instance act, fenced by an epoch that every write carries (``leases``; ``epoch`` on decisions and
group events); (5) obey operators' pins, pauses and cordons, recorded with who and why
(``operator_controls``). Advisory runs (decisions on a shadow fleet, nothing acted on) get their
own ledger source so reports never mix them with live runs.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: Union[str, Sequence[str], None] = "0001"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

TIME = sa.DateTime(timezone=True)
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

OLD_EVENTS = "event IN ('started', 'ready', 'drain_started', 'drain_cancelled', 'drained', 'stopped', 'failed')"
NEW_EVENTS = (
    "event IN ('started', 'registering', 'ready', 'drain_started', 'drain_cancelled', 'drained', 'stopping', "
    "'stopped', 'failed', 'cordoned', 'uncordoned', 'reregistered', 'adopted', 'removed')"
)


def _check_foreign_keys() -> None:
    # SQLite's batch mode rebuilds `runs`, `decisions` and `group_events` (copy, drop, rename), which
    # the other tables point at; schema.py runs migrations with foreign keys off on SQLite (they
    # cannot be switched inside a transaction) and this checks, before the commit, that every key
    # still resolves, as SQLite's own procedure for table rebuilds does.
    if op.get_bind().dialect.name == "sqlite":
        broken = op.get_bind().exec_driver_sql("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise RuntimeError(f"revision 0002 left broken foreign keys: {broken[:5]}")


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint(op.f("ck_runs_source"), type_="check")
        batch.create_check_constraint(op.f("ck_runs_source"), "source IN ('live', 'advisory', 'simulation')")
        batch.add_column(sa.Column("instance", sa.String(length=200), nullable=True))
    with op.batch_alter_table("group_events") as batch:
        batch.drop_constraint(op.f("ck_group_events_event"), type_="check")
        batch.create_check_constraint(op.f("ck_group_events_event"), NEW_EVENTS)
        batch.add_column(sa.Column("epoch", sa.Integer(), nullable=True))
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("epoch", sa.Integer(), nullable=True))
    op.create_table(
        "actions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("group_name", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("intent_at", TIME, nullable=False),
        sa.Column("result_at", TIME, nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("output_tail", sa.Text(), nullable=True),
        sa.CheckConstraint("outcome IS NULL OR outcome IN ('ok', 'failed', 'abandoned')", name=op.f("ck_actions_outcome")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_actions_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_actions")),
    )
    op.create_index("ix_actions_group_name_intent_at", "actions", ["group_name", "intent_at"])
    op.create_table(
        "fleet_groups",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("since", TIME, nullable=False),
        sa.Column("worker_url", sa.String(length=500), nullable=True),
        sa.Column("worker_id", sa.String(length=64), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("retry_at", TIME, nullable=True),
        sa.Column("cordoned", sa.Boolean(), nullable=False),
        sa.Column("cause", sa.Text(), nullable=True),
        sa.Column("health_failures", sa.Integer(), nullable=False),
        sa.Column("start_began_at", TIME, nullable=True),
        sa.Column("removed_at", TIME, nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.CheckConstraint(
            "phase IN ('off', 'starting', 'registering', 'ready', 'draining', 'stopping', 'failed')",
            name=op.f("ck_fleet_groups_phase"),
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_fleet_groups")),
    )
    op.create_table(
        "controller_state",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_controller_state")),
    )
    op.create_table(
        "leases",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("acquired_at", TIME, nullable=True),
        sa.Column("renewed_at", TIME, nullable=True),
        sa.Column("expires_at", TIME, nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leases")),
    )
    op.create_table(
        "operator_controls",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", TIME, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("group_name", sa.String(length=64), nullable=True),
        sa.Column("groups", sa.Integer(), nullable=True),
        sa.Column("until", TIME, nullable=True),
        sa.Column("by_user", sa.String(length=200), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.CheckConstraint(
            "kind IN ('pin', 'unpin', 'pause', 'resume', 'cordon', 'uncordon')", name=op.f("ck_operator_controls_kind")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_operator_controls")),
    )
    op.create_index(op.f("ix_operator_controls_at"), "operator_controls", ["at"])
    _check_foreign_keys()


def downgrade() -> None:
    op.drop_index(op.f("ix_operator_controls_at"), table_name="operator_controls")
    op.drop_table("operator_controls")
    op.drop_table("leases")
    op.drop_table("controller_state")
    op.drop_table("fleet_groups")
    op.drop_index("ix_actions_group_name_intent_at", table_name="actions")
    op.drop_table("actions")
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("epoch")
    with op.batch_alter_table("group_events") as batch:
        batch.drop_column("epoch")
        batch.drop_constraint(op.f("ck_group_events_event"), type_="check")
        batch.create_check_constraint(op.f("ck_group_events_event"), OLD_EVENTS)
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("instance")
        batch.drop_constraint(op.f("ck_runs_source"), type_="check")
        batch.create_check_constraint(op.f("ck_runs_source"), "source IN ('live', 'simulation')")
    _check_foreign_keys()
