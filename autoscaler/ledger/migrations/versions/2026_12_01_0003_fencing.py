"""Fencing on PostgreSQL: the database refuses a write that carries a stale leader epoch.

Why: leadership is a lease in the ``leases`` table (``autoscaler/service/leadership.py``). A
leader that froze (SIGSTOP, a long GC pause, a VM migration) or lost its connection may wake up
after its lease expired and a standby took over with epoch + 1, and still be in the middle of a
tick. Its own clock check cannot be trusted at that moment, so the database checks instead.
Every live write carries the writer's epoch: the ``epoch`` column of ``decisions``,
``group_events``, ``actions``, ``fleet_groups`` and ``controller_state``, or the transaction's
``autoscaler.epoch`` setting (``leadership.fenced(conn, epoch)``), which also covers tables
without the column (``node_intervals``, ``token_counts``, ``runs``). The write is refused
(SQLSTATE ``AF001``, a message that starts with ``fenced:``) unless the epoch is the one in the
``controller`` lease row and that lease has not expired by the database's own clock
(``clock_timestamp()``, so a transaction that began in time but writes after the expiry is
refused too). The trigger takes a ``FOR SHARE`` lock on the lease row, so a takeover (an UPDATE
of that row) waits for the writes in flight to commit: no write of the old epoch can commit after
the new epoch did. So that a writer frozen inside such a transaction cannot hold a takeover off
for ever, the trigger also sets the transaction's ``idle_in_transaction_session_timeout`` to one
lease length: PostgreSQL then ends the frozen session and rolls its writes back.

Writes without an epoch (backtests, operator controls, reports) are not checked: they have no
leader to be stale against. SQLite gets no triggers: there the single actor is an exclusive
``flock`` held for the life of the process, so no stale leader can exist.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Sequence, Union

from alembic import op

revision: str = "0003"
down_revision: Union[str, Sequence[str], None] = "0002"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

EPOCH_TABLES = ("decisions", "group_events", "actions", "fleet_groups", "controller_state")
SETTING_TABLES = ("node_intervals", "token_counts", "runs")

# The check, shared by the row trigger (tables with an epoch column) and the statement trigger.
CHECK_FUNCTION = """
CREATE OR REPLACE FUNCTION autoscaler_fence_check(claimed integer, target text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    lease_epoch integer;
    lease_expires timestamptz;
    lease_length interval;
BEGIN
    IF claimed IS NULL THEN
        RETURN;
    END IF;
    SELECT epoch, expires_at, expires_at - renewed_at INTO lease_epoch, lease_expires, lease_length
        FROM leases WHERE name = 'controller' FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'fenced: % write with epoch % refused: no leader holds the lease', target, claimed
            USING ERRCODE = 'AF001';
    END IF;
    IF claimed <> lease_epoch THEN
        RAISE EXCEPTION 'fenced: % write with epoch % refused: the leader''s epoch is now %',
            target, claimed, lease_epoch USING ERRCODE = 'AF001';
    END IF;
    IF lease_expires IS NULL OR lease_expires < clock_timestamp() THEN
        RAISE EXCEPTION 'fenced: % write with epoch % refused: the lease expired at %',
            target, claimed, lease_expires USING ERRCODE = 'AF001';
    END IF;
    -- The share lock is held to the end of this transaction. A writer that freezes inside it
    -- (SIGSTOP) would keep every takeover waiting: its session is ended once it has been idle in
    -- the transaction for one lease length, which rolls the transaction back and frees the lock.
    PERFORM set_config('idle_in_transaction_session_timeout',
                       greatest(1000, (extract(epoch FROM lease_length) * 1000)::bigint)::text, true);
END $$;
"""

ROW_FUNCTION = """
CREATE OR REPLACE FUNCTION autoscaler_fence_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The transaction's declared epoch wins (an update of a row an earlier leader wrote); else the row's.
    PERFORM autoscaler_fence_check(
        coalesce(nullif(current_setting('autoscaler.epoch', true), '')::integer, NEW.epoch), TG_TABLE_NAME);
    RETURN NEW;
END $$;
"""

STATEMENT_FUNCTION = """
CREATE OR REPLACE FUNCTION autoscaler_fence_statement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM autoscaler_fence_check(nullif(current_setting('autoscaler.epoch', true), '')::integer, TG_TABLE_NAME);
    RETURN NULL;
END $$;
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(CHECK_FUNCTION)
    op.execute(ROW_FUNCTION)
    op.execute(STATEMENT_FUNCTION)
    for table in EPOCH_TABLES:
        # WHEN: rows without an epoch (a backtest's 80,000 decisions) skip the function call.
        op.execute(f"CREATE TRIGGER fence_{table} BEFORE INSERT OR UPDATE ON {table} FOR EACH ROW "
                   f"WHEN (NEW.epoch IS NOT NULL OR coalesce(current_setting('autoscaler.epoch', true), '') <> '') "
                   f"EXECUTE FUNCTION autoscaler_fence_row()")
        op.execute(f"CREATE TRIGGER fence_{table}_delete BEFORE DELETE ON {table} "
                   f"FOR EACH STATEMENT EXECUTE FUNCTION autoscaler_fence_statement()")
    for table in SETTING_TABLES:
        op.execute(f"CREATE TRIGGER fence_{table} BEFORE INSERT OR UPDATE OR DELETE ON {table} "
                   f"FOR EACH STATEMENT EXECUTE FUNCTION autoscaler_fence_statement()")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in EPOCH_TABLES:
        op.execute(f"DROP TRIGGER IF EXISTS fence_{table}_delete ON {table}")
        op.execute(f"DROP TRIGGER IF EXISTS fence_{table} ON {table}")
    for table in SETTING_TABLES:
        op.execute(f"DROP TRIGGER IF EXISTS fence_{table} ON {table}")
    op.execute("DROP FUNCTION IF EXISTS autoscaler_fence_statement()")
    op.execute("DROP FUNCTION IF EXISTS autoscaler_fence_row()")
    op.execute("DROP FUNCTION IF EXISTS autoscaler_fence_check(integer, text)")
