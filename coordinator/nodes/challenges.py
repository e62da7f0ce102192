"""Registration nonces: each RegisterChallenge issues one, and one Register redeems it.

Kept in the shared database, so a node may ask one coordinator and register with another,
and a restart forgets none. Redeeming deletes the row: of two coordinators redeeming the
same nonce, one deletes it and the other finds nothing, so a nonce is used at most once.
Only the nonce's hash is stored. Expired rows are purged as new ones are issued, so a
flood of challenges (which the per-address limit already slows) cannot grow the table
beyond what one TTL's issues hold.
"""

from __future__ import annotations

import hashlib
import secrets

from coordinator.storage import nonce_rows
from coordinator.storage.database import Database

NONCE_BYTES = 32
NONCE_TTL_MS = 60_000


def nonce_sha256(nonce: bytes) -> str:
    return hashlib.sha256(nonce).hexdigest()


class ChallengeBook:
    def __init__(self, db: Database, ttl_ms: int = NONCE_TTL_MS) -> None:
        assert ttl_ms > 0
        self._db = db
        self._ttl_ms = ttl_ms

    def issue(self, public_key: bytes, now_ms: int) -> tuple[bytes, int]:
        """A fresh nonce for this key, and when it expires."""
        nonce = secrets.token_bytes(NONCE_BYTES)
        expires_at_ms = now_ms + self._ttl_ms
        with self._db.transaction(durable=False) as session:  # lost in a power cut: the node asks again
            nonce_rows.purge_expired(session, now_ms)
            nonce_rows.add(session, nonce_sha256(nonce), public_key, expires_at_ms)
        return nonce, expires_at_ms

    def redeem(self, public_key: bytes, nonce: bytes, now_ms: int) -> str | None:
        """Use the nonce up, in a transaction of its own (a registration refused later does not
        give it back); None when it was good, else why it is refused."""
        if len(nonce) != NONCE_BYTES:
            return f"the registration nonce must be the {NONCE_BYTES} bytes RegisterChallenge gave"
        with self._db.transaction() as session:
            issued = nonce_rows.take(session, nonce_sha256(nonce))
        if issued is None:
            return ("the registration nonce is unknown or already used; call RegisterChallenge "
                    "for a fresh one (a replayed registration is refused)")
        key, expires_at_ms = issued
        if key != public_key:
            return "the registration nonce was issued for another public key"
        if now_ms > expires_at_ms:
            return "the registration nonce expired; call RegisterChallenge again"
        return None

    def outstanding(self) -> int:
        with self._db.read_transaction() as session:
            return nonce_rows.count(session)
