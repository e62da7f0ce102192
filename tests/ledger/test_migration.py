"""0002_ledger.py, 0005_ledger_epochs.py, 0008_ledger_transfer_keys.py and 0010_ledger_head_signatures.py create exactly ledger.storage.tables.metadata, and drop it again."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy import Engine, inspect
from sqlalchemy.orm import Session

from ledger import book
from ledger.storage import tables
from ledger.chain import GENESIS_HASH
from ledger.model import AccountKind, ResultCode

VERSIONS = Path(__file__).resolve().parents[2] / "migrations" / "versions"
MIGRATION_PATH = VERSIONS / "0002_ledger.py"
EPOCHS_MIGRATION_PATH = VERSIONS / "0005_ledger_epochs.py"
KEYS_MIGRATION_PATH = VERSIONS / "0008_ledger_transfer_keys.py"
SIGNATURES_MIGRATION_PATH = VERSIONS / "0010_ledger_head_signatures.py"
QUEUE_MIGRATION_PATH = VERSIONS / "0020_jobcpu_queued_postings.py"


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
    keys = load_migration(KEYS_MIGRATION_PATH)
    assert (keys.revision, keys.down_revision) == ("0008_ledger_transfer_keys", "0007_verification")
    signatures = load_migration(SIGNATURES_MIGRATION_PATH)
    assert (signatures.revision, signatures.down_revision) == ("0010_ledger_head_signatures", "0009_durability_mark")


def test_upgrade_matches_the_metadata_and_downgrade_removes_it(empty_engine: Engine) -> None:
    migration, epochs, keys = load_migration(), load_migration(EPOCHS_MIGRATION_PATH), load_migration(KEYS_MIGRATION_PATH)
    signatures = load_migration(SIGNATURES_MIGRATION_PATH)
    queue = load_migration(QUEUE_MIGRATION_PATH)
    with empty_engine.begin() as connection:
        context = MigrationContext.configure(connection)
        with Operations.context(context):
            migration.upgrade()
            epochs.upgrade()
            keys.upgrade()
            signatures.upgrade()
            queue.upgrade()
        assert compare_metadata(context, tables.metadata) == []
    with Session(empty_engine) as session:
        assert book.chain_head(session).last_hash == GENESIS_HASH
        assert book.ensure_account(session, "consumer:alice", AccountKind.CONSUMER) is ResultCode.CREATED
        session.rollback()
    with empty_engine.begin() as connection:
        with Operations.context(MigrationContext.configure(connection)):
            queue.downgrade()
            signatures.downgrade()
            keys.downgrade()
            assert {key["constrained_columns"][0] for key in inspect(connection).get_foreign_keys("ledger_transfers")} == {
                "debit_account", "credit_account", "pending_id"}
            epochs.downgrade()
            migration.downgrade()
    assert not set(inspect(empty_engine).get_table_names()) & set(tables.metadata.tables)
