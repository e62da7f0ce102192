"""Hot statements straight to the SQLite driver: the same rows and writes as through SQLAlchemy."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Boolean, bindparam, event, insert, select, update

from coordinator.storage.database import Database
from coordinator.storage.driver_sql import DriverStatement
from coordinator.storage.tables import job_tokens, jobs

_LAST = DriverStatement(select(job_tokens.c.first_index, job_tokens.c.text).where(
    job_tokens.c.job_id == bindparam("job_id")).order_by(job_tokens.c.first_index.desc()).limit(2))
_INSERT = DriverStatement(insert(job_tokens))


def test_rows_and_writes_match_the_sessions_and_skip_its_work_on_sqlite(database: Database) -> None:
    statements: list[str] = []

    def seen(_connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    with database.transaction() as session:  # the foreign key's job row, through the session
        session.execute(insert(jobs).values(
            job_id="j1", consumer_id="c", model_id="m", prompt="p", max_tokens=4, temperature=0.0, top_p=0.0,
            seed=0, min_decode_tokens_per_s=0.0, context_tokens=8, status="queued", created_at_ms=1,
            request_id=""))
    event.listen(database.engine, "before_cursor_execute", seen)
    try:
        with database.transaction() as session:
            for index in range(3):
                _INSERT.execute(session, {"job_id": "j1", "first_index": index, "token_ids_json": "[1]",
                                          "text": f"t{index}", "logprobs_json": None})
            driver_rows = [tuple(row) for row in _LAST.rows(session, {"job_id": "j1"})]
            assert driver_rows == [(2, "t2"), (1, "t1")]  # the statement's own LIMIT 2 holds
            assert _LAST.rows(session, {"job_id": "nobody"}) == []
        via_driver = len(statements)
        with database.transaction() as session:  # the same statement through SQLAlchemy
            assert [tuple(row) for row in session.execute(_LAST.statement, {"job_id": "j1"})] == driver_rows
    finally:
        event.remove(database.engine, "before_cursor_execute", seen)
    if database.engine.dialect.name == "sqlite":
        assert via_driver == 0 and len(statements) == 1  # the SQLAlchemy read is seen; the driver's are not
    else:
        assert via_driver == 5  # elsewhere every statement goes through the session


def test_a_statement_whose_binds_convert_values_goes_through_the_session(database: Database) -> None:
    """The driver would skip a type's conversion (a Boolean's, say): such a statement keeps SQLAlchemy's path."""
    statements: list[str] = []
    converting = DriverStatement(update(jobs).where(jobs.c.job_id == bindparam("which")).values(
        receipt_verified=bindparam("verified", type_=Boolean)))
    with database.transaction() as session:
        session.execute(insert(jobs).values(
            job_id="j2", consumer_id="c", model_id="m", prompt="p", max_tokens=4, temperature=0.0, top_p=0.0,
            seed=0, min_decode_tokens_per_s=0.0, context_tokens=8, status="queued", created_at_ms=1,
            request_id=""))
    event.listen(database.engine, "before_cursor_execute",
                 lambda _c, _k, statement, *_: statements.append(statement))
    with database.transaction() as session:
        assert converting.execute(session, {"which": "j2", "verified": True}) == 1
        assert converting.execute(session, {"which": "nobody", "verified": True}) == 0
        assert session.execute(select(jobs.c.receipt_verified).where(jobs.c.job_id == "j2")).scalar_one() is True
    assert sum(statement.startswith("UPDATE jobs") for statement in statements) == 2


def test_a_select_whose_columns_convert_values_goes_through_the_session(database: Database) -> None:
    """SQLite stores a Boolean as 0 or 1; read through the driver it would come back as an int."""
    flag = DriverStatement(select(jobs.c.receipt_verified).where(jobs.c.job_id == bindparam("which")))
    with database.transaction() as session:
        session.execute(insert(jobs).values(
            job_id="j3", consumer_id="c", model_id="m", prompt="p", max_tokens=4, temperature=0.0, top_p=0.0,
            seed=0, min_decode_tokens_per_s=0.0, context_tokens=8, status="queued", created_at_ms=1,
            request_id="", receipt_verified=True))
        [(verified,)] = flag.rows(session, {"which": "j3"})
    assert verified is True
