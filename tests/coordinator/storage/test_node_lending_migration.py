"""migrations/versions/0003_node_lending.py builds what coordinator.storage.tables declares, and undoes it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy import MetaData, create_engine, inspect

from coordinator.storage import tables

VERSIONS = Path(__file__).resolve().parents[3] / "migrations" / "versions"
NEW_TABLES = {"node_heartbeats", "node_benchmarks", "pods"}
NEW_NODE_COLUMNS = {"lending_mode", "owner_active", "accepting_jobs", "lending_reason",
                    "memory_cap_bytes", "warm_models_json", "measured_bandwidth_gb_s",
                    "benchmark_flag", "left_at_ms"}
# Columns later migrations add to this migration's tables (each has its own migration).
LATER_COLUMNS = {("node_benchmarks", "batch_decode_json")}  # 0014_batching_shared_memory


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"migration_{name}", VERSIONS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _this_migrations_metadata() -> MetaData:
    """The tables this migration creates, and nodes with only the columns it adds."""
    subset = MetaData()
    for name in NEW_TABLES | {"nodes"}:
        tables.metadata.tables[name].to_metadata(subset)
    return subset


def _is_ours(difference: tuple) -> bool:  # type: ignore[type-arg]
    kind = difference[0]
    if kind in ("add_table", "remove_table"):
        return difference[1].name in NEW_TABLES
    if kind in ("add_column", "remove_column"):
        if (difference[2], difference[3].name) in LATER_COLUMNS:
            return False
        return difference[2] in NEW_TABLES or difference[3].name in NEW_NODE_COLUMNS
    if kind in ("add_index", "remove_index"):
        return difference[1].table.name in NEW_TABLES
    return True


def test_revision_follows_the_ledger() -> None:
    migration = _load("0003_node_lending")
    assert (migration.revision, migration.down_revision) == ("0003_node_lending", "0002_ledger")


def test_upgrade_matches_the_tables_and_downgrade_removes_them(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    first, lending = _load("0001_coordinator"), _load("0003_node_lending")
    with engine.begin() as connection:
        context = MigrationContext.configure(connection)
        with Operations.context(context):
            first.upgrade()
            lending.upgrade()
        differences = [d for d in compare_metadata(context, _this_migrations_metadata())
                       if not isinstance(d, tuple) or _is_ours(d)]
    assert differences == []
    with engine.begin() as connection:
        with Operations.context(MigrationContext.configure(connection)):
            lending.downgrade()
    inspector = inspect(engine)
    assert not NEW_TABLES & set(inspector.get_table_names())
    assert "lending_mode" not in {c["name"] for c in inspector.get_columns("nodes")}
    engine.dispose()
