"""Listing and revoking hashed keys, shared by the API-key and operator-key stores. SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import insert

from coordinator.errors import NotFound
from coordinator.storage import key_rows
from coordinator.storage.database import Database
from coordinator.storage.tables import api_keys


def _key(row) -> tuple[str, str, int | None]:  # type: ignore[no-untyped-def]
    return row.key_id, row.consumer_id, row.revoked_at_ms


def _add(database: Database, key_id: str, consumer_id: str, created_at_ms: int) -> None:
    with database.transaction() as session:
        session.execute(insert(api_keys).values(
            key_id=key_id, secret_sha256=key_id * 4, consumer_id=consumer_id, label="",
            created_at_ms=created_at_ms, revoked_at_ms=None, spent_base_units=0))


def test_a_key_is_revoked_once_and_an_unknown_one_is_not_found(database: Database) -> None:
    _add(database, "k1", "acme", 10)
    with database.transaction() as session:
        assert key_rows.revoke(session, api_keys, "k1", 100, _key, "no k1") == ("k1", "acme", 100)
        assert key_rows.revoke(session, api_keys, "k1", 200, _key, "no k1") == ("k1", "acme", 100)
        with pytest.raises(NotFound, match="no such key"):
            key_rows.revoke(session, api_keys, "k2", 300, _key, "no such key")


def test_keys_are_listed_by_owner_then_age_and_limited(database: Database) -> None:
    for key_id, consumer_id, created_at_ms in (("k1", "zed", 1), ("k2", "acme", 3), ("k3", "acme", 2)):
        _add(database, key_id, consumer_id, created_at_ms)
    owner = api_keys.c.consumer_id
    with database.read_transaction() as session:
        assert [k[0] for k in key_rows.keys_of(session, owner, None, _key)] == ["k3", "k2", "k1"]
        assert [k[0] for k in key_rows.keys_of(session, owner, "acme", _key)] == ["k3", "k2"]
        assert [k[0] for k in key_rows.keys_of(session, owner, None, _key, limit=2)] == ["k3", "k2"]
        assert key_rows.keys_of(session, owner, "nobody", _key) == []
