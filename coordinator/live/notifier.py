"""In-process wake-ups for streams waiting on the database.

The database stays the source of truth: a notification only says "look
again". Waiters also wake on a timeout, so writes by another coordinator
sharing the database are seen too. A notification wakes only the waiters of
its topics: a token for one job does not wake every other job's stream.
"""

from __future__ import annotations

import threading
from collections import defaultdict


class Notifier:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: defaultdict[str, int] = defaultdict(int)
        self._waiters: dict[str, list[threading.Event]] = {}

    def version(self, topic: str) -> int:
        with self._lock:
            return self._versions.get(topic, 0)

    def notify(self, *topics: str) -> None:
        with self._lock:
            for topic in topics:
                self._versions[topic] += 1
                for waiter in self._waiters.pop(topic, ()):
                    waiter.set()

    def wait(self, topic: str, seen_version: int, timeout_s: float) -> int:
        """Block until `topic` moves past `seen_version` or the timeout; return its version."""
        with self._lock:
            if self._versions.get(topic, 0) != seen_version:
                return self._versions[topic]
            waiter = threading.Event()
            self._waiters.setdefault(topic, []).append(waiter)
        waiter.wait(timeout_s)
        with self._lock:
            waiting = self._waiters.get(topic)
            if waiting is not None and waiter in waiting:  # timed out: notify did not pop it
                waiting.remove(waiter)
                if not waiting:
                    del self._waiters[topic]
            return self._versions.get(topic, 0)


def job_topic(job_id: str) -> str:
    return f"job:{job_id}"


def node_topic(node_id: str) -> str:
    return f"node:{node_id}"
