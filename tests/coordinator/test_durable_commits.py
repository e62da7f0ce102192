"""Transactions wait for the disk at commit unless they ask not to; either way they commit."""

from __future__ import annotations

from sqlalchemy import Connection, text

from coordinator.database import Database, upgrade_schema


def _waits_for_disk(connection: Connection) -> bool:
    if connection.dialect.name == "sqlite":
        return connection.exec_driver_sql("PRAGMA synchronous").scalar_one() == 2  # FULL
    return connection.execute(text("SHOW synchronous_commit")).scalar_one() == "on"


def test_only_a_transaction_that_asks_skips_waiting_for_the_disk(database_url: str) -> None:
    upgrade_schema(database_url)
    db = Database(database_url)
    try:
        seen = []
        for durable in (True, False, False, True, False):  # the setting never leaks to the next
            with db.transaction(durable=durable) as session:
                seen.append(_waits_for_disk(session.connection()))
        assert seen == [True, False, False, True, False]
    finally:
        db.dispose()


def test_a_transaction_that_need_not_be_durable_still_commits_whole(database_url: str) -> None:
    upgrade_schema(database_url)
    db = Database(database_url)
    try:
        with db.transaction() as session:
            session.execute(text("CREATE TABLE scratch (n INTEGER)"))
        with db.transaction(durable=False) as session:
            session.execute(text("INSERT INTO scratch VALUES (1), (2)"))
        with db.read_transaction() as session:
            assert session.execute(text("SELECT sum(n) FROM scratch")).scalar_one() == 3
    finally:
        db.dispose()
