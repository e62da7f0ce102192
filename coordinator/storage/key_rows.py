"""Listing and revoking keys, for every table of hashed keys (consumers' API keys, operators').

Such a table names a key by `key_id` and marks its revocation in `revoked_at_ms`; each store
keeps its own row type, key pattern and messages, and passes them in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Column, Table, select, update
from sqlalchemy.orm import Session

from coordinator.errors import NotFound

Key = TypeVar("Key")


def revoke(session: Session, table: Table, key_id: str, now_ms: int,
           key_from_row: Callable[[Any], Key], not_found: str) -> Key:
    """Revoke a key (again is harmless: the first revocation's time stays); NotFound(not_found)
    when no key has the id."""
    session.execute(update(table).where(table.c.key_id == key_id, table.c.revoked_at_ms.is_(None))
                    .values(revoked_at_ms=now_ms))
    row = session.execute(select(table).where(table.c.key_id == key_id)).first()
    if row is None:
        raise NotFound(not_found)
    return key_from_row(row)


def keys_of(session: Session, owner: Column[str], owner_id: str | None,
            key_from_row: Callable[[Any], Key], limit: int | None = None) -> list[Key]:
    """Keys by owner, then age; only owner_id's when given; at most limit (None: every key)."""
    table = owner.table
    query = select(table).order_by(owner, table.c.created_at_ms).limit(limit)
    if owner_id is not None:
        query = query.where(owner == owner_id)
    return [key_from_row(row) for row in session.execute(query)]
