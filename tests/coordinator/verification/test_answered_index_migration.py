"""0021_plant_answered_index builds the index peer_store declares for answered checks, and undoes it."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import MetaData, create_engine, inspect

from coordinator.storage.database import alembic_config, upgrade_schema
from coordinator.verification import peer_store

INDEX = "ix_peer_checks_answered"


def _peer_checks_only() -> MetaData:
    subset = MetaData()
    peer_store.peer_checks.to_metadata(subset)
    return subset


def _on_peer_checks(difference: object) -> bool:
    if isinstance(difference, list):  # a column's modifications: (kind, schema, table, column, ...)
        return any(_on_peer_checks(item) for item in difference)
    assert isinstance(difference, tuple)
    kind, subject = difference[0], difference[1]
    if kind.endswith("_table"):
        return subject.name == "peer_checks"
    if kind.endswith("_index"):
        return subject.table.name == "peer_checks"
    return "peer_checks" in difference[:3]


def test_upgrade_matches_peer_checks_as_declared_and_downgrade_drops_the_index(database_url: str) -> None:
    upgrade_schema(database_url)
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            differences = compare_metadata(MigrationContext.configure(connection), _peer_checks_only())
        # Only peer_checks is declared here: every other table and its indexes show as ones to remove.
        assert [d for d in differences if _on_peer_checks(d)] == []
        indexes = {index["name"]: index["column_names"] for index in inspect(engine).get_indexes("peer_checks")}
        assert indexes[INDEX] == ["status", "answered_at_ms", "check_id"]

        command.downgrade(alembic_config(database_url), "0020_jobcpu_queued_postings")
        assert INDEX not in {index["name"] for index in inspect(engine).get_indexes("peer_checks")}
        upgrade_schema(database_url)
        assert INDEX in {index["name"] for index in inspect(engine).get_indexes("peer_checks")}
    finally:
        engine.dispose()
