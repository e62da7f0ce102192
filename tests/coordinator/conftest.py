"""Fixtures shared by the coordinator's tests over a real database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coordinator.storage.database import Database, upgrade_schema


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    """A migrated database (SQLite, and PostgreSQL when configured), disposed after the test."""
    upgrade_schema(database_url)
    db = Database(database_url)
    yield db
    db.dispose()
