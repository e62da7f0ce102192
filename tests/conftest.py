"""Fixtures shared by the whole suite: the tiny model and real databases."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

POSTGRES_URL_ENV = "MLXNET_TEST_POSTGRES_URL"
REQUIRE_POSTGRES_ENV = "MLXNET_REQUIRE_POSTGRES"
POSTGRES_URL_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
REQUIRE_COMPILED_ENV = "MLXNET_REQUIRE_COMPILED"


def pytest_sessionstart(session: pytest.Session) -> None:
    """The suite tests the placement planner users run: compiled (setup.py) from the source as it is now."""
    from coordinator.placement.compiled import build_status

    status = build_status()
    if status.stale or (os.environ.get(REQUIRE_COMPILED_ENV) and not status.fully_compiled):
        pytest.exit(f"the placement planner is {status.describe()}", returncode=pytest.ExitCode.USAGE_ERROR)


def postgres_admin_url() -> str | None:
    """The PostgreSQL URL tests may use, or None (skip) when none is reachable here."""
    import psycopg

    url = os.environ.get(POSTGRES_URL_ENV, POSTGRES_URL_DEFAULT)
    try:
        psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"),
                        connect_timeout=3).close()
    except psycopg.OperationalError as error:
        if os.environ.get(REQUIRE_POSTGRES_ENV):
            pytest.fail(f"PostgreSQL is required here but unreachable at {url}: {error}")
        return None
    return url


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from node_agent.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama")


@contextlib.contextmanager
def fresh_postgres_database() -> Iterator[str]:
    """A new, empty PostgreSQL database, dropped afterwards; skips when none is reachable."""
    import psycopg

    admin_url = postgres_admin_url()
    if admin_url is None:
        pytest.skip(f"PostgreSQL unreachable; set {POSTGRES_URL_ENV} to run these tests")
    name = f"mlxnet_test_{uuid.uuid4().hex[:12]}"
    plain = admin_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{admin_url.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(plain, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Each database test runs on the embedded SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'coordinator.db'}"
        return
    with fresh_postgres_database() as url:
        yield url
