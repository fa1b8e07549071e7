"""Alembic's environment for the ledger.

At run time ``autoscaler.ledger.schema`` hands over an open connection (in a transaction that
holds the migration lock) through ``config.attributes["connection"]``. From the command line
(``alembic`` with the repository's alembic.ini) the database URL comes from ``-x db=URL``, else
``AUTOSCALER_DATABASE_URL``, else ``sqlite:///autoscaler.db``, as for every other command.
"""

from __future__ import annotations

import os

from alembic import context

from autoscaler.ledger.models import Base
from autoscaler.settings import DEFAULT_DB_URL

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    return context.get_x_argument(as_dictionary=True).get("db") or os.environ.get(
        "AUTOSCALER_DATABASE_URL", DEFAULT_DB_URL
    )


def _configure(**kwargs) -> None:
    context.configure(
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite cannot ALTER most things; batch mode copies the table
        compare_type=True,
        **kwargs,
    )


def run_offline() -> None:
    _configure(url=_url(), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    from autoscaler.ledger.schema import WRITE, make_engine

    engine = make_engine(_url())
    try:
        with engine.connect() as conn:
            conn.execution_options(**WRITE)
            with conn.begin():
                _configure(connection=conn)
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
