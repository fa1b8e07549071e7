"""Alembic migrations of the ledger database (see ``autoscaler.ledger.schema``)."""
