"""Read transactions: a reader never waits for a writer that holds the database; on SQLite
a write transaction holds the one write lock from its first statement."""

from __future__ import annotations

import sqlite3
import threading

import pytest
from sqlalchemy import func, select

from coordinator.storage.database import Database, upgrade_schema, writes_serialized
from coordinator.storage.tables import nodes


def test_a_reader_goes_through_while_a_writer_holds_its_transaction(database_url: str) -> None:
    upgrade_schema(database_url)
    db = Database(database_url)
    holding, release = threading.Event(), threading.Event()

    def write() -> None:
        with db.transaction() as session:
            session.execute(nodes.delete())  # takes the write lock (SQLite) and keeps it
            holding.set()
            release.wait(60)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert holding.wait(30)
        counted: list[int] = []
        reader = threading.Thread(target=lambda: counted.append(_count(db)))
        reader.start()
        reader.join(20)  # a reader queued behind the lock would still wait here
        assert not reader.is_alive() and counted == [0]
    finally:
        release.set()
        writer.join(60)
        db.dispose()


def _count(db: Database) -> int:
    with db.read_transaction() as session:
        return session.execute(select(func.count()).select_from(nodes)).scalar_one()



def test_where_writes_are_serialized_no_other_writer_starts_under_a_write_transaction(
        database_url: str) -> None:
    """What lets a submit on SQLite trust its own read of the fleet up to its commit."""
    upgrade_schema(database_url)
    db = Database(database_url)
    try:
        with db.transaction() as session:
            session.execute(select(func.count()).select_from(nodes)).scalar_one()  # a read only
            if not writes_serialized(session):
                assert not database_url.startswith("sqlite")
                return  # PostgreSQL: a submit re-reads the Macs it places on under row locks
            other = sqlite3.connect(database_url.removeprefix("sqlite:///"), timeout=0,
                                    isolation_level=None)
            try:
                with pytest.raises(sqlite3.OperationalError, match="locked"):
                    other.execute("BEGIN IMMEDIATE")
            finally:
                other.close()
    finally:
        db.dispose()
