"""migrations/versions/0006_world.py creates exactly coordinator.world.tables, and drops it again."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy import create_engine, inspect

from coordinator.world import tables

MIGRATION = Path(__file__).resolve().parents[3] / "migrations" / "versions" / "0006_world.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("migration_0006_world", MIGRATION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_revision_follows_the_ledger_epochs() -> None:
    migration = _load()
    assert (migration.revision, migration.down_revision) == ("0006_world", "0005_ledger_epochs")


def test_upgrade_matches_the_tables_and_downgrade_removes_them(database_url: str) -> None:
    migration = _load()
    engine = create_engine(database_url)
    try:
        with engine.begin() as connection:
            context = MigrationContext.configure(connection)
            with Operations.context(context):
                migration.upgrade()
            assert compare_metadata(context, tables.metadata) == []
        with engine.begin() as connection:
            with Operations.context(MigrationContext.configure(connection)):
                migration.downgrade()
        assert not set(inspect(engine).get_table_names()) & set(tables.metadata.tables)
    finally:
        engine.dispose()
