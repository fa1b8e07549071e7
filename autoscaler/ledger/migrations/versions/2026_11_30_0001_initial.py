"""The initial ledger: runs, policy versions, decisions, group events, node intervals, tokens.

Why: finance and ops need one record of what the controller (or a backtest) did and what it cost:
every run with its policy (the cost model is kept with the policy so a report reads the same
later), every tick's decision with its inputs, each group's lifecycle with the decision that
caused it, and per-node power-state intervals, which are what the cost model charges.
Old hold decisions are folded into hourly ``decision_summaries`` to bound growth.

Times are ``timestamp with time zone`` (UTC digits on SQLite). Constraint names follow the
naming convention in ``autoscaler.ledger.models``.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: Union[str, Sequence[str], None] = None
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

TIME = sa.DateTime(timezone=True)
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "policy_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("path", sa.String(length=1000), nullable=True),
        sa.Column("cost", sa.JSON(), nullable=False),
        sa.Column("fleet", sa.JSON(), nullable=False),
        sa.Column("first_seen_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_policy_versions")),
        sa.UniqueConstraint("sha256", name=op.f("uq_policy_versions_sha256")),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("label", sa.String(length=200), nullable=True),
        sa.Column("started_at", TIME, nullable=False),
        sa.Column("ended_at", TIME, nullable=True),
        sa.Column("policy_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("end_note", sa.String(length=200), nullable=True),
        sa.CheckConstraint("source IN ('live', 'simulation')", name=op.f("ck_runs_source")),
        sa.ForeignKeyConstraint(
            ["policy_sha256"], ["policy_versions.sha256"], name=op.f("fk_runs_policy_sha256_policy_versions")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    op.create_index(op.f("ix_runs_source"), "runs", ["source"])
    op.create_table(
        "policy_loads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("policy_sha256", sa.String(length=64), nullable=False),
        sa.Column("at", TIME, nullable=False),
        sa.ForeignKeyConstraint(
            ["policy_sha256"], ["policy_versions.sha256"], name=op.f("fk_policy_loads_policy_sha256_policy_versions")
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_policy_loads_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_policy_loads")),
    )
    op.create_index("ix_policy_loads_run_id_at", "policy_loads", ["run_id", "at"])
    op.create_table(
        "policy_rejections",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("at", TIME, nullable=False),
        sa.Column("path", sa.String(length=1000), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("errors", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_policy_rejections_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_policy_rejections")),
    )
    op.create_index(op.f("ix_policy_rejections_at"), "policy_rejections", ["at"])
    op.create_table(
        "decisions",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("at", TIME, nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("target_groups", sa.Integer(), nullable=False),
        sa.Column("group_name", sa.String(length=64), nullable=True),
        sa.Column("groups", sa.JSON(), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("forecast_used", sa.Boolean(), nullable=False),
        sa.Column("policy_sha256", sa.String(length=64), nullable=False),
        sa.CheckConstraint("action IN ('hold', 'scale_up', 'scale_down')", name=op.f("ck_decisions_action")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_decisions_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decisions")),
    )
    op.create_index(op.f("ix_decisions_at"), "decisions", ["at"])
    op.create_index("ix_decisions_run_id_at", "decisions", ["run_id", "at"])
    op.create_table(
        "decision_summaries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("hour_start", TIME, nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("first_at", TIME, nullable=False),
        sa.Column("last_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_decision_summaries_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decision_summaries")),
        sa.UniqueConstraint(
            "run_id", "hour_start", "action", "reason",
            name=op.f("uq_decision_summaries_run_id_hour_start_action_reason"),
        ),
    )
    op.create_table(
        "group_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("at", TIME, nullable=False),
        sa.Column("group_name", sa.String(length=64), nullable=False),
        sa.Column("event", sa.String(length=16), nullable=False),
        sa.Column("decision_id", BIG_ID, nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.CheckConstraint(
            "event IN ('started', 'ready', 'drain_started', 'drain_cancelled', 'drained', 'stopped', 'failed')",
            name=op.f("ck_group_events_event"),
        ),
        sa.ForeignKeyConstraint(["decision_id"], ["decisions.id"], name=op.f("fk_group_events_decision_id_decisions")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_group_events_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_group_events")),
    )
    op.create_index("ix_group_events_run_id_at", "group_events", ["run_id", "at"])
    op.create_table(
        "node_intervals",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=64), nullable=False),
        sa.Column("group_name", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=8), nullable=False),
        sa.Column("start_at", TIME, nullable=False),
        sa.Column("end_at", TIME, nullable=True),
        sa.CheckConstraint("state IN ('active', 'idle', 'off')", name=op.f("ck_node_intervals_state")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_node_intervals_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_intervals")),
    )
    op.create_index("ix_node_intervals_run_id_start_at", "node_intervals", ["run_id", "start_at"])
    op.create_table(
        "token_counts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("group_name", sa.String(length=64), nullable=True),
        sa.Column("start_at", TIME, nullable=False),
        sa.Column("end_at", TIME, nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("generation_tokens", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_token_counts_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_token_counts")),
    )
    op.create_index("ix_token_counts_run_id_start_at", "token_counts", ["run_id", "start_at"])


def downgrade() -> None:
    op.drop_index("ix_token_counts_run_id_start_at", table_name="token_counts")
    op.drop_table("token_counts")
    op.drop_index("ix_node_intervals_run_id_start_at", table_name="node_intervals")
    op.drop_table("node_intervals")
    op.drop_index("ix_group_events_run_id_at", table_name="group_events")
    op.drop_table("group_events")
    op.drop_table("decision_summaries")
    op.drop_index("ix_decisions_run_id_at", table_name="decisions")
    op.drop_index(op.f("ix_decisions_at"), table_name="decisions")
    op.drop_table("decisions")
    op.drop_index(op.f("ix_policy_rejections_at"), table_name="policy_rejections")
    op.drop_table("policy_rejections")
    op.drop_index("ix_policy_loads_run_id_at", table_name="policy_loads")
    op.drop_table("policy_loads")
    op.drop_index(op.f("ix_runs_source"), table_name="runs")
    op.drop_table("runs")
    op.drop_table("policy_versions")
