"""A real database outage for one test's PostgreSQL database, on the shared server: its
connections are cut and new ones refused until the outage ends (the server keeps running)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg

from tests.conftest import postgres_admin_url


def _admin() -> str:
    url = postgres_admin_url()
    assert url is not None, "only PostgreSQL tests have an outage to stage"
    return url.replace("postgresql+psycopg://", "postgresql://")


@contextlib.contextmanager
def database_outage(database_url: str) -> Iterator[None]:
    name = database_url.rsplit("/", 1)[1]
    with psycopg.connect(_admin(), autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
    try:
        yield
    finally:
        with psycopg.connect(_admin(), autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
