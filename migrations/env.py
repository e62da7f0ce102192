"""Alembic environment: the coordinator's, verification's, MLX World's and the ledger's tables, one history."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from coordinator.storage.tables import metadata as coordinator_metadata
from coordinator.verification import peer_store  # noqa: F401 (its table joins verification's metadata)
from coordinator.verification.store import metadata as verification_metadata
from coordinator.world.tables import metadata as world_metadata
from ledger.storage.tables import metadata as ledger_metadata

target_metadata = [coordinator_metadata, ledger_metadata, verification_metadata, world_metadata]


def run_migrations_offline() -> None:
    context.configure(url=context.config.get_main_option("sqlalchemy.url"),
                      target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(context.config.get_main_option("sqlalchemy.url"))
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
