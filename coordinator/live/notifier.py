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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar


@dataclass(frozen=True)
class Wait:
    """A stream's step that asks to wait: for `topic` to move past `seen_version`, at most timeout_s.

    Yielded by the service's stream steps, so a thread waits (Notifier.wait) or an event loop
    does (Notifier.wait_async), and an idle stream need hold no thread.
    """

    topic: str
    seen_version: int
    timeout_s: float | None  # None: until news (a process-wide sweep is then the safety net)


T = TypeVar("T")


def on_this_thread(notifier: Notifier, steps: Iterator[T | Wait],
                   is_active: Callable[[], bool]) -> Iterator[T]:
    """A stream's steps with each Wait waited on this thread, until is_active turns false."""
    for step in steps:
        if not isinstance(step, Wait):
            yield step
        elif not is_active():
            return
        else:
            notifier.wait(step.topic, step.seen_version, step.timeout_s)
            if not is_active():
                return


class Notifier:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: defaultdict[str, int] = defaultdict(int)
        self._waiters: dict[str, list[Callable[[], None]]] = {}  # each wakes one waiter
        self._relay: Callable[[tuple[str, ...]], None] | None = None  # to other coordinators
        self._relayed = threading.Event()  # the relay works: other coordinators' news arrives too
        self._watchers: list[tuple[tuple[str, ...], Callable[[], None]]] = []  # (topic prefixes, call)

    def relay_to(self, publish: Callable[[tuple[str, ...]], None]) -> None:
        """Every notify also goes to publish (e.g. live.pg_relay, to other coordinators)."""
        self._relay = publish

    def set_relayed(self, relayed: bool) -> None:
        """Whether other coordinators' news arrives now; a change wakes every waiter, so each
        looks again and waits with the poll interval that now applies."""
        if relayed:
            self._relayed.set()
        else:
            self._relayed.clear()
        with self._lock:
            topics = tuple(self._waiters)
        self.notify_local(*topics)

    def poll_interval_s(self, polling_s: float, relayed_s: float) -> float:
        """How long a waiter may go without news: polling_s unless a working relay brings
        other coordinators' writes, then relayed_s (a safety net)."""
        return relayed_s if self._relayed.is_set() else polling_s

    @property
    def relayed(self) -> bool:
        """Whether other coordinators' news arrives now (and ours reaches them)."""
        return self._relayed.is_set()

    def wait_relayed(self, timeout_s: float) -> bool:
        """Block until the relay works (for tests and start-up checks); False on the timeout."""
        return self._relayed.wait(timeout_s)

    def version(self, topic: str) -> int:
        with self._lock:
            return self._versions.get(topic, 0)

    def notify(self, *topics: str, carrying: tuple[str, ...] = ()) -> None:
        """Wake this process's waiters of these topics, and relay them to other coordinators,
        after `carrying` (topics that only travel, such as a chunk: nobody here waits on them)."""
        self.notify_local(*topics)
        if self._relay is not None and (topics or carrying):
            self._relay((*carrying, *topics))

    def notify_local(self, *topics: str) -> None:
        with self._lock:
            woken = [wake for topic in topics for wake in self._waiters.pop(topic, ())]
            for topic in topics:
                self._versions[topic] += 1
            woken += [call for prefixes, call in self._watchers
                      if any(topic.startswith(prefixes) for topic in topics)]
        for wake in woken:
            wake()

    def watch(self, prefixes: tuple[str, ...], call: Callable[[], None]) -> Callable[[], None]:
        """Call `call` (from the notifying thread; it must be quick) on every notification of a
        topic starting with one of prefixes, for as long as it watches; returns the unwatch."""
        assert prefixes, "a watcher of nothing"
        entry = (prefixes, call)
        with self._lock:
            self._watchers.append(entry)

        def unwatch() -> None:
            with self._lock:
                if entry in self._watchers:
                    self._watchers.remove(entry)
        return unwatch

    def wait(self, topic: str, seen_version: int, timeout_s: float | None) -> int:
        """Block until `topic` moves past `seen_version` or the timeout; return its version."""
        event = threading.Event()
        wake = event.set
        if not self._enlist(topic, seen_version, wake):
            return self.version(topic)
        event.wait(timeout_s)
        return self._leave(topic, wake)

    async def wait_async(self, topic: str, seen_version: int, timeout_s: float | None) -> int:
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

    def waiting(self, besides: frozenset[str] = frozenset()) -> int:
        """Waiters enlisted now, on every topic but `besides` (for tests and gauges)."""
        with self._lock:
            return sum(len(waiters) for topic, waiters in self._waiters.items() if topic not in besides)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def job_topic(job_id: str) -> str:
    return f"job:{job_id}"


NODE_TOPIC_PREFIX = "node:"


def node_topic(node_id: str) -> str:
    """A node's assignments changed (a job placed on it, or ended there)."""
    return NODE_TOPIC_PREFIX + node_id


def node_checks_topic(node_id: str) -> str:
    """Check jobs were assigned to the node: notified beside node_topic, so its stream reads
    them (live.stream_reads). Not under NODE_TOPIC_PREFIX: watchers of nodes need not wake."""
    return "checks:" + node_id


def node_challenges_topic(node_id: str) -> str:
    """A challenge was issued to the node: as node_checks_topic."""
    return "challenges:" + node_id


FLEET_TOPIC_PREFIX = "fleet:"


def fleet_topic(node_id: str) -> str:
    """A node registered or left: other coordinators re-read it into their placement index."""
    return FLEET_TOPIC_PREFIX + node_id


def fleet_changes(topics: tuple[str, ...]) -> list[str]:
    """The node ids of the fleet topics among these."""
    return [t[len(FLEET_TOPIC_PREFIX):] for t in topics if t.startswith(FLEET_TOPIC_PREFIX)]
