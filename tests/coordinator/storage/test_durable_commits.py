"""Transactions wait for the disk at commit unless they ask not to; either way they commit.
make_durable makes what committed before it durable, one disk wait for concurrent calls."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

from coordinator.storage.database import Database, upgrade_schema
from coordinator.storage.tables import durability_marks


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


def _mark(db: Database) -> int:
    with db.read_transaction() as session:
        return session.execute(durability_marks.select()).one().mark


def test_make_durable_writes_its_mark_and_waits_for_the_disk(database_url: str) -> None:
    upgrade_schema(database_url)
    db = Database(database_url)
    seen: list[bool] = []
    transaction = db.transaction

    @contextlib.contextmanager
    def noting(durable: bool = True) -> Iterator[Session]:
        with transaction(durable) as session:
            yield session
            seen.append(_waits_for_disk(session.connection()))

    try:
        before = _mark(db)
        db.transaction = noting  # type: ignore[method-assign]
        db.make_durable()
        db.make_durable()
        assert seen == [True, True] and _mark(db) == before + 2
        with transaction() as session:
            session.execute(durability_marks.delete())
        with pytest.raises(RuntimeError, match="mlxnet db upgrade"):
            db.make_durable()  # with nothing to write, its commit would wait for nothing
    finally:
        db.dispose()


class _ArrivalLock:
    """A lock that counts who has come to it, before they wait for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.arrived = threading.Semaphore(0)

    def __enter__(self) -> None:
        self.arrived.release()
        self._lock.acquire()

    def __exit__(self, *_: object) -> None:
        self._lock.release()


def test_calls_that_come_in_during_a_durable_write_share_the_next_one(database_url: str) -> None:
    upgrade_schema(database_url)
    db = Database(database_url)
    lock = _ArrivalLock()
    db._durable_lock = lock  # type: ignore[assignment]
    writes: list[int] = []
    release = threading.Event()
    write = db._write_durable_mark

    def held_write() -> None:
        writes.append(len(writes))
        if len(writes) == 1:
            assert release.wait(30)
        write()

    db._write_durable_mark = held_write  # type: ignore[method-assign]
    try:
        before = _mark(db)
        calls = [threading.Thread(target=db.make_durable) for _ in range(6)]
        calls[0].start()
        assert lock.arrived.acquire(timeout=30)
        for call in calls[1:]:
            call.start()
        for _ in calls[1:]:  # all five came in while the first write was under way
            assert lock.arrived.acquire(timeout=30)
        release.set()
        for call in calls:
            call.join(30)
        assert writes == [0, 1] and _mark(db) == before + 2
        db.make_durable()  # a call after those writes gets a write of its own
        assert writes == [0, 1, 2]
    finally:
        db.dispose()
