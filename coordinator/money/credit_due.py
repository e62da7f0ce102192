"""When the credits loop next has work, so a pass with nothing due opens no transaction.

The holds this process opens (each receipt's check window) are noted here, and a pass runs
once the earliest of them has ended. Every sweep_ms a pass runs anyway, for the holds this
process did not note: another coordinator's, one opened before a restart, one whose status
changed after it was opened. A credit is released at most sweep_ms late that way, against
check windows of hours; the money moved is the same, only sooner or later.
"""

from __future__ import annotations

import heapq
import threading

CREDIT_SWEEP_MS = 60_000
NOTED_HOLDS_MAX = 100_000  # past it, later holds wait for the sweep: memory stays bounded


class CreditDue:
    """Thread-safe: receipts note holds on gRPC threads, the credits loop asks on its own."""

    def __init__(self, sweep_ms: int = CREDIT_SWEEP_MS, noted_max: int = NOTED_HOLDS_MAX) -> None:
        assert sweep_ms > 0 and noted_max > 0
        self._sweep_ms, self._noted_max = sweep_ms, noted_max
        self._lock = threading.Lock()
        self._holds: list[int] = []  # a min-heap of hold ends, in ms
        self._swept_at_ms: int | None = None  # None: no pass yet, so the first one sweeps
        self._more = False  # the last pass stopped at its limit: the next one goes at once

    def note(self, hold_until_ms: int) -> None:
        with self._lock:
            if len(self._holds) < self._noted_max:
                heapq.heappush(self._holds, hold_until_ms)

    def due(self, now_ms: int) -> bool:
        with self._lock:
            return (self._more or self._swept_at_ms is None or now_ms - self._swept_at_ms >= self._sweep_ms
                    or bool(self._holds) and self._holds[0] <= now_ms)

    def passed(self, started_ms: int, released: int, limit: int) -> None:
        """A pass that began at started_ms released this many credits (at most limit)."""
        with self._lock:
            while self._holds and self._holds[0] <= started_ms:
                heapq.heappop(self._holds)
            self._more = released >= limit
            self._swept_at_ms = started_ms  # every pass reads all that is due, noted or not
