"""A small time-bounded cache of public answers, so a thousand open pages cost one query each second.

Keys include the live feed's fleet version, so a page refetching after a `fleet` event
always misses; the time bound covers the changes nobody is watching for.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")
ENTRIES_MAX = 512
TTL_S_DEFAULT = 1.0


class AnswerCache:
    def __init__(self, ttl_s: float = TTL_S_DEFAULT, entries_max: int = ENTRIES_MAX,
                 clock: Callable[[], float] = time.monotonic) -> None:
        assert ttl_s >= 0 and 0 < entries_max <= 100_000
        self.ttl_s = ttl_s
        self._entries_max = entries_max
        self._clock = clock
        self._entries: collections.OrderedDict[Hashable, tuple[float, object]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The cached answer for key if younger than ttl_s; else compute (outside the lock) and keep it."""
        if self.ttl_s == 0:
            return compute()
        now = self._clock()
        with self._lock:
            found = self._entries.get(key)
            if found is not None and now - found[0] < self.ttl_s:
                self._entries.move_to_end(key)
                return found[1]  # type: ignore[return-value]
        value = compute()
        with self._lock:
            self._entries[key] = (now, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._entries_max:
                self._entries.popitem(last=False)
        return value
