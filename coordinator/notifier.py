"""In-process wake-ups for streams waiting on the database.

The database stays the source of truth: a notification only says "look
again". Waiters also wake on a timeout, so writes by another coordinator
sharing the database are seen too.
"""

from __future__ import annotations

import threading
from collections import defaultdict


class Notifier:
    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._versions: defaultdict[str, int] = defaultdict(int)

    def version(self, topic: str) -> int:
        with self._condition:
            return self._versions[topic]

    def notify(self, *topics: str) -> None:
        with self._condition:
            for topic in topics:
                self._versions[topic] += 1
            self._condition.notify_all()

    def wait(self, topic: str, seen_version: int, timeout_s: float) -> int:
        """Block until `topic` moves past `seen_version` or the timeout; return its version."""
        with self._condition:
            self._condition.wait_for(lambda: self._versions[topic] != seen_version, timeout_s)
            return self._versions[topic]


def job_topic(job_id: str) -> str:
    return f"job:{job_id}"


def node_topic(node_id: str) -> str:
    return f"node:{node_id}"
