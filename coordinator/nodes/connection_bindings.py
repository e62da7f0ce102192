"""Which connections each node session may be used on, and the nonces that bind new ones.

A session token works only on a connection where its node registered, or where the node signed
a bind nonce issued on that connection (contracts.signing.session_bind_message). A connection is
named by the gRPC edge (the peer's address and port: one TCP connection, so one TLS session, at a
time). Bindings are this process's alone, in memory: a restarted or other coordinator binds anew.

A binding unused for `idle_ms` lapses (the node re-binds with one more round trip); each session
keeps its `per_session` latest connections. Both tables are bounded, oldest first out.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict

from contracts.signing import BIND_NONCE_BYTES

IDLE_MS = 600_000
CONNECTIONS_PER_SESSION = 4  # an agent failing over may still finish calls on its last channels
SESSIONS_MAX = 200_000
NONCE_TTL_MS = 60_000
NONCES_MAX = 100_000


class ConnectionBindings:
    def __init__(self, idle_ms: int = IDLE_MS, per_session: int = CONNECTIONS_PER_SESSION,
                 sessions_max: int = SESSIONS_MAX, nonce_ttl_ms: int = NONCE_TTL_MS,
                 nonces_max: int = NONCES_MAX) -> None:
        assert idle_ms > 0 and per_session > 0 and sessions_max > 0 and nonce_ttl_ms > 0 and nonces_max > 0
        self._idle_ms = idle_ms
        self._per_session = per_session
        self._sessions_max = sessions_max
        self._nonce_ttl_ms = nonce_ttl_ms
        self._nonces_max = nonces_max
        # token sha -> connection -> last used (ms), most recently used last
        self._bound: OrderedDict[str, OrderedDict[str, int]] = OrderedDict()
        self._nonces: OrderedDict[tuple[str, str], tuple[bytes, int]] = OrderedDict()  # -> (nonce, issued)
        self._lock = threading.Lock()

    def bound(self, token_sha256: str, connection: str, now_ms: int) -> bool:
        """Whether the session may be used on this connection (a use keeps the binding alive)."""
        with self._lock:
            connections = self._bound.get(token_sha256)
            used_ms = connections.get(connection) if connections is not None else None
            if connections is None or used_ms is None:
                return False
            if now_ms - used_ms > self._idle_ms:
                del connections[connection]
                return False
            connections[connection] = now_ms
            connections.move_to_end(connection)
            self._bound.move_to_end(token_sha256)
            return True

    def bind(self, token_sha256: str, connection: str, now_ms: int) -> None:
        with self._lock:
            connections = self._bound.setdefault(token_sha256, OrderedDict())
            connections[connection] = now_ms
            connections.move_to_end(connection)
            self._bound.move_to_end(token_sha256)
            while len(connections) > self._per_session:
                connections.popitem(last=False)
            while len(self._bound) > self._sessions_max:
                self._bound.popitem(last=False)

    def issue_nonce(self, token_sha256: str, connection: str, now_ms: int) -> bytes:
        """A fresh nonce for binding the session to this connection (replacing an earlier one)."""
        nonce = secrets.token_bytes(BIND_NONCE_BYTES)
        with self._lock:
            key = (token_sha256, connection)
            self._nonces.pop(key, None)
            self._nonces[key] = (nonce, now_ms)
            while len(self._nonces) > self._nonces_max:
                self._nonces.popitem(last=False)
        return nonce

    def redeem_nonce(self, token_sha256: str, connection: str, nonce: bytes, now_ms: int) -> bool:
        """Whether nonce is the one issued for this session on this connection, still fresh;
        it is used up either way, so each nonce answers once."""
        with self._lock:
            issued = self._nonces.pop((token_sha256, connection), None)
        return (issued is not None and now_ms - issued[1] <= self._nonce_ttl_ms
                and secrets.compare_digest(issued[0], nonce))

    def forget(self, token_sha256: str) -> None:
        """The session ended here (Leave, expiry, replaced)."""
        with self._lock:
            self._bound.pop(token_sha256, None)

    def __len__(self) -> int:
        """Sessions with a binding (lapsed ones included until next used)."""
        with self._lock:
            return len(self._bound)
