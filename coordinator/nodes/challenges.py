"""Registration nonces: each RegisterChallenge issues one, and one Register redeems it.

Held in this process only (a restart forgets them; nodes ask again). Bounded: past
NONCES_OUTSTANDING_MAX the oldest are forgotten first, so a flood of challenges costs
memory it cannot grow.
"""

from __future__ import annotations

import collections
import secrets
import threading

NONCE_BYTES = 32
NONCE_TTL_MS = 60_000
NONCES_OUTSTANDING_MAX = 10_000


class ChallengeBook:
    def __init__(self, ttl_ms: int = NONCE_TTL_MS, outstanding_max: int = NONCES_OUTSTANDING_MAX) -> None:
        assert ttl_ms > 0 and outstanding_max > 0
        self._ttl_ms, self._outstanding_max = ttl_ms, outstanding_max
        self._issued: collections.OrderedDict[bytes, tuple[bytes, int]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def issue(self, public_key: bytes, now_ms: int) -> tuple[bytes, int]:
        """A fresh nonce for this key, and when it expires."""
        nonce = secrets.token_bytes(NONCE_BYTES)
        expires_at_ms = now_ms + self._ttl_ms
        with self._lock:
            self._issued[nonce] = (public_key, expires_at_ms)
            while len(self._issued) > self._outstanding_max:
                self._issued.popitem(last=False)
        return nonce, expires_at_ms

    def redeem(self, public_key: bytes, nonce: bytes, now_ms: int) -> str | None:
        """Use the nonce up; None when it was good, else why it is refused."""
        with self._lock:
            issued = self._issued.pop(nonce, None)
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
        with self._lock:
            return len(self._issued)
