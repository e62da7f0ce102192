"""Live updates for every open MLX World page, from one reader thread.

One thread reads the fleet's fingerprint and the totals (one short transaction
per tick) however many browsers watch, and hands each subscriber the events.
It reads at once when woken (`wake`: the coordinator's notifier calls it when a Mac
joins, leaves or is given a job), else every tick as a safety net. The events:
`fleet` when a Mac joined, left or changed state (pages refetch what they show),
`totals` when the network's figures moved, `epoch` when an epoch closed or its root
reached the chain (operator pages refetch their earnings and proofs). Subscribers are asyncio queues fed
with call_soon_threadsafe; one that falls behind is dropped (its browser
reconnects by itself).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.exc import SQLAlchemyError

from coordinator.errors import DatabaseUnavailable
from coordinator.world.totals import Totals, TotalsHistory

log = logging.getLogger(__name__)

SUBSCRIBERS_MAX = 2_000
QUEUE_EVENTS_MAX = 64
TICK_S_WATCHED = 1.0  # someone is watching: notice changes nobody announced within a second
TICK_GAP_S_MIN = 0.2  # woken ticks: at most five reads a second however fast the fleet changes
KEEPALIVE_S = 15.0  # a comment line this often keeps proxies from closing a quiet stream
STREAM_S_MAX = 600.0  # then the stream ends and EventSource reconnects: no connection lives forever
STREAM_RETRY_MS = 2_000


@dataclass(frozen=True)
class Event:
    name: str
    data: dict[str, object]

    def encode(self) -> str:
        return f"event: {self.name}\ndata: {json.dumps(self.data, separators=(',', ':'))}\n\n"


@dataclass(eq=False)
class Subscriber:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[Event | None] = field(default_factory=lambda: asyncio.Queue(QUEUE_EVENTS_MAX))
    dropped: bool = False


@dataclass(frozen=True)
class FleetState:
    fingerprint: tuple[int, ...]  # changes when the fleet does (queries.fleet_version)
    epochs: tuple[int, int]  # (the newest closed epoch or -1, roots anchored on chain)


@dataclass(frozen=True)
class Snapshot:
    fingerprint: tuple[int, ...]
    totals: Totals
    epochs: tuple[int, int]


class TooManySubscribers(Exception):
    """Every live-update slot is taken; the page retries later."""


class WorldFeed:
    """Reads `read_fleet()` then `read_totals()` each tick and fans the changes out."""

    def __init__(self, read_fleet: Callable[[], FleetState], read_totals: Callable[[], Totals],
                 history: TotalsHistory,
                 tick_s: float = TICK_S_WATCHED, background: bool = True,
                 subscribers_max: int = SUBSCRIBERS_MAX) -> None:
        """background=False: no reader thread; the caller ticks (tests drive it that way)."""
        assert tick_s > 0 and subscribers_max > 0
        self._subscribers_max = subscribers_max
        self._background = background
        self._read_fleet = read_fleet
        self._read_totals = read_totals
        self.history = history
        self._tick_s = tick_s
        self._idle_tick_s = history.interval_ms / 1000
        self._lock = threading.Lock()
        self._subscribers: set[Subscriber] = set()
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._fingerprint: tuple[int, ...] | None = None
        self._totals_json: dict[str, object] | None = None
        self._epochs: tuple[int, int] = (-1, 0)  # what a page opened before the first read was told
        self.version = 0  # counts fleet changes seen by this process

    def start(self) -> None:
        with self._lock:
            if self._background and self._thread is None and not self._stopping.is_set():
                self._thread = threading.Thread(target=self._run, name="world-feed", daemon=True)
                self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """End every stream and the reader thread."""
        self._stopping.set()
        self._wake.set()
        with self._lock:
            subscribers, self._subscribers = list(self._subscribers), set()
            thread = self._thread
        for subscriber in subscribers:
            self._deliver(subscriber, None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    @property
    def stopped(self) -> bool:
        return self._stopping.is_set()

    def subscribe(self, loop: asyncio.AbstractEventLoop) -> Subscriber:
        subscriber = Subscriber(loop)
        with self._lock:
            if self._stopping.is_set() or len(self._subscribers) >= self._subscribers_max:
                raise TooManySubscribers(f"live updates are full ({self._subscribers_max} open); retry shortly")
            self._subscribers.add(subscriber)
        self.start()
        self._wake.set()  # a new watcher gets the fast tick at once
        return subscriber

    def wake(self) -> None:
        """The fleet changed: read now (at most every TICK_GAP_S_MIN) if anyone watches."""
        with self._lock:
            watched = bool(self._subscribers)
        if watched:
            self._wake.set()

    def unsubscribe(self, subscriber: Subscriber) -> None:
        with self._lock:
            self._subscribers.discard(subscriber)

    def current(self) -> list[Event]:
        """What a new subscriber is sent first: the fleet version, the latest totals and epoch."""
        events = [Event("fleet", {"version": self.version})]
        if self._totals_json is not None:
            events.append(Event("totals", self._totals_json))
        events.append(Event("epoch", _epoch_data(self._epochs)))
        return events

    def tick(self) -> list[Event]:
        """Read once; return (and publish) the events this read produced."""
        state = self._read_fleet()
        events: list[Event] = []
        if state.fingerprint != self._fingerprint:
            if self._fingerprint is not None:  # the first read is the baseline, not a change
                self.version += 1
                events.append(Event("fleet", {"version": self.version}))
            self._fingerprint = state.fingerprint
        if state.epochs != self._epochs:
            self._epochs = state.epochs
            events.append(Event("epoch", _epoch_data(state.epochs)))
        self._publish(events)  # before the totals, which take longer to read: a new Mac shows sooner
        totals = self._read_totals()
        self.history.offer(totals)
        totals_json = totals.to_json()
        changed = _changed(self._totals_json, totals_json)
        self._totals_json = totals_json
        if changed:
            self._publish([Event("totals", totals_json)])
            events.append(Event("totals", totals_json))
        return events

    def _publish(self, events: list[Event]) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for event in events:
            for subscriber in subscribers:
                self._deliver(subscriber, event)

    def _deliver(self, subscriber: Subscriber, event: Event | None) -> None:
        def put() -> None:
            try:
                subscriber.queue.put_nowait(event)
            except asyncio.QueueFull:
                subscriber.dropped = True  # a stalled browser: end its stream, it will reconnect
                self.unsubscribe(subscriber)
                subscriber.queue.get_nowait()
                subscriber.queue.put_nowait(None)
        try:
            subscriber.loop.call_soon_threadsafe(put)
        except RuntimeError:  # its event loop has closed
            self.unsubscribe(subscriber)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.tick()
            except (SQLAlchemyError, DatabaseUnavailable):  # a database blip must not end live updates
                log.exception("MLX World could not read the fleet; retrying")
            # A wake-up during the read or the gap is kept for the next read, not lost.
            gap_s = min(TICK_GAP_S_MIN, self._tick_s)
            if self._stopping.wait(gap_s):
                return
            with self._lock:
                watched = bool(self._subscribers)
            self._wake.wait(max(0.0, (self._tick_s if watched else self._idle_tick_s) - gap_s))
            self._wake.clear()


def _epoch_data(epochs: tuple[int, int]) -> dict[str, object]:
    last, anchored = epochs
    return {"last_closed": None if last < 0 else last, "anchored": anchored}


def _changed(before: dict[str, object] | None, after: dict[str, object]) -> bool:
    """Totals changed in anything but their timestamp."""
    if before is None:
        return True
    return {k: v for k, v in before.items() if k != "at_ms"} != {k: v for k, v in after.items() if k != "at_ms"}
