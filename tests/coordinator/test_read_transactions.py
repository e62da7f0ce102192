"""Read transactions: a reader never waits for a writer that holds the database."""

from __future__ import annotations

import threading

from sqlalchemy import func, select

from coordinator.database import Database, upgrade_schema
from coordinator.tables import nodes


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
