"""In-process wake-ups for streams waiting on the database.

The database stays the source of truth: a notification only says "look
again". Waiters also wake on a timeout, so writes by another coordinator
sharing the database are seen too. A notification wakes only the waiters of
its topics: a token for one job does not wake every other job's stream.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Wait:
    """A stream's step that asks to wait: for `topic` to move past `seen_version`, at most timeout_s.

    Yielded by the service's stream steps, so a thread waits (Notifier.wait) or an event loop
    does (Notifier.wait_async), and an idle stream need hold no thread.
    """

    topic: str
    seen_version: int
    timeout_s: float


class Notifier:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: defaultdict[str, int] = defaultdict(int)
        self._waiters: dict[str, list[Callable[[], None]]] = {}  # each wakes one waiter

    def version(self, topic: str) -> int:
        with self._lock:
            return self._versions.get(topic, 0)

    def notify(self, *topics: str) -> None:
        with self._lock:
            woken = [wake for topic in topics for wake in self._waiters.pop(topic, ())]
            for topic in topics:
                self._versions[topic] += 1
        for wake in woken:
            wake()

    def wait(self, topic: str, seen_version: int, timeout_s: float) -> int:
        """Block until `topic` moves past `seen_version` or the timeout; return its version."""
        event = threading.Event()
        wake = event.set
        if not self._enlist(topic, seen_version, wake):
            return self.version(topic)
        event.wait(timeout_s)
        return self._leave(topic, wake)

    async def wait_async(self, topic: str, seen_version: int, timeout_s: float) -> int:
        """As wait, on an event loop: the waiting holds no thread."""
        loop = asyncio.get_running_loop()
        woken = loop.create_future()

        def wake() -> None:  # from any thread
            try:
                loop.call_soon_threadsafe(_resolve, woken)
            except RuntimeError:  # the loop has closed: nobody is waiting any more
                pass

        if not self._enlist(topic, seen_version, wake):
            return self.version(topic)
        try:
            await asyncio.wait_for(woken, timeout_s)
        except TimeoutError:
            pass
        finally:
            version = self._leave(topic, wake)
        return version

    def _enlist(self, topic: str, seen_version: int, wake: Callable[[], None]) -> bool:
        """False when the topic has already moved on: no need to wait."""
        with self._lock:
            if self._versions.get(topic, 0) != seen_version:
                return False
            self._waiters.setdefault(topic, []).append(wake)
            return True

    def _leave(self, topic: str, wake: Callable[[], None]) -> int:
        with self._lock:
            waiting = self._waiters.get(topic)
            if waiting is not None and wake in waiting:  # timed out: notify did not pop it
                waiting.remove(wake)
                if not waiting:
                    del self._waiters[topic]
            return self._versions.get(topic, 0)

    def waiting(self) -> int:
        """Waiters enlisted now, on every topic (for tests and gauges)."""
        with self._lock:
            return sum(len(waiters) for waiters in self._waiters.values())


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def job_topic(job_id: str) -> str:
    return f"job:{job_id}"


def node_topic(node_id: str) -> str:
    return f"node:{node_id}"
