"""Per-key subscriptions for in-process hand-offs (live chunks, live assignments).

A subscriber exists only while its block runs; publishers take a copy of a key's
subscribers under the lock and deliver outside it, so a slow one holds up no other.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

S = TypeVar("S")


class Subscribers(Generic[S]):
    def __init__(self, make: Callable[[], S]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._by_key: dict[str, list[S]] = {}

    @contextlib.contextmanager
    def subscribe(self, key: str) -> Iterator[S]:
        subscriber = self._make()
        with self._lock:
            self._by_key.setdefault(key, []).append(subscriber)
        try:
            yield subscriber
        finally:
            with self._lock:
                subscribers = self._by_key[key]
                subscribers.remove(subscriber)
                if not subscribers:
                    del self._by_key[key]

    def of(self, keys: Iterable[str]) -> tuple[S, ...]:
        """The current subscribers of these keys, in key order."""
        with self._lock:
            return tuple(subscriber for key in keys for subscriber in self._by_key.get(key, ()))
