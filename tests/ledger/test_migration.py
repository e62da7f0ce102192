"""0002_ledger.py and 0005_ledger_epochs.py create exactly ledger.tables.metadata, and drop it again."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy import Engine, inspect
from sqlalchemy.orm import Session

from ledger import book, tables
from ledger.chain import GENESIS_HASH
from ledger.model import AccountKind, ResultCode

VERSIONS = Path(__file__).resolve().parents[2] / "migrations" / "versions"
MIGRATION_PATH = VERSIONS / "0002_ledger.py"
EPOCHS_MIGRATION_PATH = VERSIONS / "0005_ledger_epochs.py"


def load_migration(path: Path = MIGRATION_PATH) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"migration_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_revision_identifiers() -> None:
    migration = load_migration()
    assert (migration.revision, migration.down_revision) == ("0002_ledger", "0001_coordinator")
    assert migration.GENESIS_HASH == GENESIS_HASH
    epochs = load_migration(EPOCHS_MIGRATION_PATH)
    assert (epochs.revision, epochs.down_revision) == ("0005_ledger_epochs", "0004_api_keys")


def test_upgrade_matches_the_metadata_and_downgrade_removes_it(empty_engine: Engine) -> None:
    migration, epochs = load_migration(), load_migration(EPOCHS_MIGRATION_PATH)
    with empty_engine.begin() as connection:
        context = MigrationContext.configure(connection)
        with Operations.context(context):
            migration.upgrade()
            epochs.upgrade()
        assert compare_metadata(context, tables.metadata) == []
    with Session(empty_engine) as session:
        assert book.chain_head(session).last_hash == GENESIS_HASH
        assert book.ensure_account(session, "consumer:alice", AccountKind.CONSUMER) is ResultCode.CREATED
        session.rollback()
    with empty_engine.begin() as connection:
        with Operations.context(MigrationContext.configure(connection)):
            epochs.downgrade()
            migration.downgrade()
    assert not set(inspect(empty_engine).get_table_names()) & set(tables.metadata.tables)
