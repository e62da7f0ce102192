"""Registration nonce rows (coordinator/nodes/challenges.py): issued, taken once, purged when expired."""

from __future__ import annotations

from sqlalchemy import delete, func, insert, select
from sqlalchemy.orm import Session

from coordinator.storage.tables import registration_nonces

PURGED_PER_ISSUE_MAX = 100  # expired rows deleted per issue: the purge keeps up and never stalls one


def add(session: Session, nonce_sha256: str, public_key: bytes, expires_at_ms: int) -> None:
    session.execute(insert(registration_nonces).values(
        nonce_sha256=nonce_sha256, public_key=public_key, expires_at_ms=expires_at_ms))


def take(session: Session, nonce_sha256: str) -> tuple[bytes, int] | None:
    """(public key, expiry) of the nonce, deleted in the same step; None when another took it."""
    row = session.execute(select(registration_nonces.c.public_key, registration_nonces.c.expires_at_ms)
                          .where(registration_nonces.c.nonce_sha256 == nonce_sha256)).first()
    if row is None:
        return None
    deleted = session.execute(delete(registration_nonces)
                              .where(registration_nonces.c.nonce_sha256 == nonce_sha256)).rowcount
    return (bytes(row.public_key), row.expires_at_ms) if deleted == 1 else None


def purge_expired(session: Session, now_ms: int) -> int:
    expired = (select(registration_nonces.c.nonce_sha256)
               .where(registration_nonces.c.expires_at_ms < now_ms).limit(PURGED_PER_ISSUE_MAX))
    return session.execute(delete(registration_nonces)
                           .where(registration_nonces.c.nonce_sha256.in_(expired))).rowcount


def count(session: Session) -> int:
    return session.execute(select(func.count()).select_from(registration_nonces)).scalar_one()

