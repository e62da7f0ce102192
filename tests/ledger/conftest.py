"""Every database test runs twice: on SQLite and on PostgreSQL (skipped when unreachable).

PostgreSQL tests each get a fresh schema (via search_path), dropped afterwards, so they
never see another test's rows or another developer's tables.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from ledger.storage.tables import metadata

POSTGRES_URL = os.environ.get(
    "MLXNET_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
CONNECT_TIMEOUT_S = 3


@functools.cache
def postgres_unreachable_reason() -> str | None:
    probe = create_engine(POSTGRES_URL, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
    try:
        with probe.connect():
            return None
    except OperationalError as error:
        first_line = str(error.orig).strip().splitlines()[0] if error.orig else str(error)
        return f"PostgreSQL unreachable at {POSTGRES_URL} (set MLXNET_TEST_POSTGRES_URL): {first_line}"
    finally:
        probe.dispose()


def _enable_sqlite_foreign_keys(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def sqlite_engine(path: Path) -> Engine:
    engine = create_engine(f"sqlite:///{path}")
    event.listen(engine, "connect", _enable_sqlite_foreign_keys)
    return engine


@pytest.fixture
def empty_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An engine on an empty database (SQLite file, or a fresh PostgreSQL schema)."""
    if request.param == "sqlite":
        engine = sqlite_engine(tmp_path / "ledger.db")
        yield engine
        engine.dispose()
        return
    reason = postgres_unreachable_reason()
    if reason is not None:
        pytest.skip(reason)
    schema = f"ledger_test_{uuid.uuid4().hex[:16]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    engine = create_engine(POSTGRES_URL, connect_args={"options": f"-csearch_path={schema}"})
    try:
        yield engine
    finally:
        engine.dispose()
        with admin.connect() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Any test needing a database, directly or through `engine`/`session`, runs on both backends.
    if "empty_engine" in metafunc.fixturenames:
        metafunc.parametrize("empty_engine", BACKENDS, indirect=True)


@pytest.fixture
def engine(empty_engine: Engine) -> Engine:
    metadata.create_all(empty_engine)
    return empty_engine


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    """A session whose work is rolled back at the end: the ledger itself never commits."""
    with Session(engine) as session:
        yield session
        session.rollback()
