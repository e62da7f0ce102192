"""Node sessions as last read, so a heartbeat needs no database read to know who sent it.

An entry is good for `ttl_ms`: a session replaced or ended through another coordinator on the
same database is refused here at most that much later (a caller may pass a longer one to get
while other coordinators' news drops entries at once). Sessions this process replaces or ends
(Register, Leave, expiry) are dropped at once. Bounded: past `entries_max` the oldest goes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from coordinator.model import NodeRecord

ENTRIES_MAX = 200_000


class SessionCache:
    def __init__(self, ttl_ms: int, entries_max: int = ENTRIES_MAX) -> None:
        assert ttl_ms >= 0 and entries_max > 0
        self._ttl_ms = ttl_ms
        self._entries_max = entries_max
        self._entries: OrderedDict[str, tuple[int, NodeRecord]] = OrderedDict()  # token sha -> (read at, node)
        self._by_node: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, token_sha256: str, now_ms: int, ttl_ms: int | None = None) -> NodeRecord | None:
        with self._lock:
            entry = self._entries.get(token_sha256)
            if entry is None or now_ms - entry[0] > (self._ttl_ms if ttl_ms is None else ttl_ms):
                return None
            return entry[1]

    def put(self, token_sha256: str, node: NodeRecord, now_ms: int) -> None:
        if self._ttl_ms == 0:
            return
        with self._lock:
            self._drop(node.node_id)
            self._entries[token_sha256] = (now_ms, node)
            self._by_node[node.node_id] = token_sha256
            while len(self._entries) > self._entries_max:
                _, (_, oldest) = self._entries.popitem(last=False)
                self._by_node.pop(oldest.node_id, None)

    def drop(self, node_id: str) -> None:
        """The node's session was replaced or ended here."""
        with self._lock:
            self._drop(node_id)

    def _drop(self, node_id: str) -> None:
        token = self._by_node.pop(node_id, None)
        if token is not None:
            self._entries.pop(token, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
