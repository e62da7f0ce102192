"""Making, listing and revoking keys, for every table of hashed keys (consumers' API keys, operators').

Such a table names a key by `key_id` and marks its revocation in `revoked_at_ms`; each store
keeps its own row type, key pattern and messages, and passes them in.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Column, Table, select, update
from sqlalchemy.orm import Session

from coordinator.errors import InvalidRequest, NotFound

Key = TypeVar("Key")
LABEL_CHARS_MAX = 128


def key_sha256(key: str) -> str:
    """What a table stores of a key: its text is shown once and never kept."""
    return hashlib.sha256(key.encode()).hexdigest()


def new_key(prefix: str, key_id_hex_chars: int, pattern: re.Pattern[str], chars_max: int,
            label: str) -> tuple[str, str]:
    """A fresh key id and the key text that carries it: prefix, id, then 32 random bytes."""
    if len(label) > LABEL_CHARS_MAX:
        raise InvalidRequest(f"label is longer than {LABEL_CHARS_MAX} characters", param="label")
    key_id = secrets.token_hex(key_id_hex_chars // 2)
    key = f"{prefix}{key_id}_{secrets.token_urlsafe(32)}"
    assert pattern.match(key) and len(key) <= chars_max
    return key_id, key


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
