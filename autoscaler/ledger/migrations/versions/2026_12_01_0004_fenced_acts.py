"""Acts that can be cut, and the journal's own epochs.

Why: a leader now acts only while it holds the lease; an act in flight when leadership is lost
(or when a shutdown's budget runs out) has its process group killed and is recorded with the
outcome ``interrupted``, which the old check refused. A new leader that settles an older
leader's open intent no longer overwrites that row's ``epoch`` (the journal must say who
intended the act): it writes its own in ``result_epoch``. A failed group is taken down like a
drain (out of the gateway, in-flight work finished, then stopped), so ``fleet_groups`` records
when its stop was issued (``stop_issued_at``) to tell "still to stop" from "stopping".

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: Union[str, Sequence[str], None] = "0003"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

TIME = sa.DateTime(timezone=True)
OLD_OUTCOMES = "outcome IS NULL OR outcome IN ('ok', 'failed', 'abandoned')"
NEW_OUTCOMES = "outcome IS NULL OR outcome IN ('ok', 'failed', 'abandoned', 'interrupted')"


def upgrade() -> None:
    with op.batch_alter_table("actions") as batch:
        batch.drop_constraint(op.f("ck_actions_outcome"), type_="check")
        batch.create_check_constraint(op.f("ck_actions_outcome"), NEW_OUTCOMES)
        batch.add_column(sa.Column("result_epoch", sa.Integer(), nullable=True))
    with op.batch_alter_table("fleet_groups") as batch:
        batch.add_column(sa.Column("stop_issued_at", TIME, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("fleet_groups") as batch:
        batch.drop_column("stop_issued_at")
    op.execute("UPDATE actions SET outcome = 'abandoned' WHERE outcome = 'interrupted'")
    with op.batch_alter_table("actions") as batch:
        batch.drop_column("result_epoch")
        batch.drop_constraint(op.f("ck_actions_outcome"), type_="check")
        batch.create_check_constraint(op.f("ck_actions_outcome"), OLD_OUTCOMES)
