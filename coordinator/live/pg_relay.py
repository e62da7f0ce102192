"""Wake-ups across coordinators sharing one PostgreSQL database, through LISTEN/NOTIFY.

Each coordinator relays its notifier's topics to the others: after a commit, `job:ID`
(tokens stored, a job ended) or `node:ID` (a job assigned) goes out as a NOTIFY, and every
other coordinator wakes its own waiters on it, so a consumer on coordinator A gets the
tokens a node streams to coordinator B at once, and a job A assigns reaches the node's
stream on B at once. A committed token chunk rides along as a topic of its own
(live.chunks.chunk_topic), so A's reader need not read it back from the database. A
notification still only says "look again" (or "here is what was committed"): the database
stays the source of truth, so a lost one costs a delay, never a token or a credit.

While the relay is down (PostgreSQL restarting, the connection cut) streams fall back to
polling the database every `stream_poll_interval_s`; while it is up they wait for news,
reading again only every `relayed_poll_interval_s` as a safety net. Its two threads are
supervised: errors are logged, retried with backoff, and `healthy` says whether it works.
A listener that reconnects wakes every waiter (Notifier.set_relayed), so news sent while
it was away is read from the database then: nothing is lost, only delayed.

Each payload carries when its oldest topic was published (`ORIGIN@MICROSECONDS topic ...`):
the receiver reports the lag (on_lag, the `mlxnet:event_bus_lag_seconds` histogram). It is
measured on the wall clock, so across hosts it includes their clocks' skew.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

log = logging.getLogger(__name__)

CHANNEL = "mlxnet_wakeups"
PAYLOAD_CHARS_MAX = 7_000  # PostgreSQL refuses a NOTIFY payload of 8,000 bytes or more
OUTBOX_MAX = 100_000  # topics waiting to go out; past it they are dropped (waiters poll)
RETRY_DELAY_S_MIN = 0.2
RETRY_DELAY_S_MAX = 10.0
LISTEN_TICK_S = 1.0  # how often the listener looks at `stopping`


def libpq_url(sqlalchemy_url: str) -> str:
    """postgresql+psycopg://... as libpq reads it."""
    scheme, separator, rest = sqlalchemy_url.partition("://")
    assert separator and scheme.startswith("postgresql"), sqlalchemy_url
    return f"postgresql://{rest}"


def _now_us() -> int:
    return time.time_ns() // 1_000


class PostgresRelay:
    def __init__(self, database_url: str, wake_local: Callable[..., None],
                 on_health: Callable[[bool], None] = lambda _healthy: None,
                 on_lag: Callable[[float], None] = lambda _seconds: None) -> None:
        """wake_local(*topics) wakes this process's waiters; on_health(up) hears every change;
        on_lag(seconds) hears, for each notification from another coordinator, how long its
        oldest topic took from publish() there to its arrival here."""
        self._url = libpq_url(database_url)
        self._wake_local = wake_local
        self._on_health = on_health
        self._on_lag = on_lag
        self._origin = uuid.uuid4().hex[:12]  # our own notifications come back: skip them
        # (microseconds published, topics), oldest first
        self._outbox: queue.Queue[tuple[int, tuple[str, ...]]] = queue.Queue(OUTBOX_MAX)
        self._listening = threading.Event()
        self._sending = threading.Event()
        self.dropped = 0

    @property
    def healthy(self) -> bool:
        return self._listening.is_set() and self._sending.is_set()

    def start(self, stopping: threading.Event) -> None:
        threading.Thread(target=self._supervise, args=(self._listen, self._listening, stopping),
                         name="relay-listen", daemon=True).start()
        threading.Thread(target=self._supervise, args=(self._send, self._sending, stopping),
                         name="relay-send", daemon=True).start()

    def publish(self, topics: tuple[str, ...]) -> None:
        """From any thread, after a commit: tell the other coordinators."""
        try:
            self._outbox.put_nowait((_now_us(), topics))
        except queue.Full:
            self.dropped += 1  # they read the database on their fallback poll instead

    def _supervise(self, work: Callable[[threading.Event], None], up: threading.Event,
                   stopping: threading.Event) -> None:
        delay_s = RETRY_DELAY_S_MIN
        while not stopping.is_set():
            try:
                work(stopping)
                delay_s = RETRY_DELAY_S_MIN
            except psycopg.Error as error:
                log.warning("cross-coordinator relay: %s; retrying in %.1fs (streams poll "
                            "the database meanwhile)", error, delay_s)
            self._set(up, False)
            stopping.wait(delay_s)
            delay_s = min(delay_s * 2, RETRY_DELAY_S_MAX)

    def _set(self, up: threading.Event, value: bool) -> None:
        was = self.healthy
        if value:
            up.set()
        else:
            up.clear()
        if self.healthy != was:
            self._on_health(self.healthy)

    def _listen(self, stopping: threading.Event) -> None:
        with psycopg.connect(self._url, autocommit=True) as connection:
            connection.execute(f"LISTEN {CHANNEL}")
            self._set(self._listening, True)
            while not stopping.is_set():
                for notification in connection.notifies(timeout=LISTEN_TICK_S):
                    news = parse_payload(notification.payload)
                    if news.origin == self._origin or not news.topics:
                        continue
                    self._wake_local(*news.topics)
                    if news.published_us is not None:
                        self._on_lag(max(0, _now_us() - news.published_us) / 1e6)

    def _send(self, stopping: threading.Event) -> None:
        with psycopg.connect(self._url, autocommit=True) as connection:
            self._set(self._sending, True)
            while not stopping.is_set():
                try:
                    published_us, first = self._outbox.get(timeout=LISTEN_TICK_S)
                except queue.Empty:
                    continue
                topics = dict.fromkeys(first)  # in order: a chunk goes before its wake-up
                while len(topics) < 512:  # what queued meanwhile goes in the same NOTIFY
                    try:
                        topics.update(dict.fromkeys(self._outbox.get_nowait()[1]))
                    except queue.Empty:
                        break
                for payload in payloads(f"{self._origin}@{published_us}", list(topics)):
                    connection.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))


def payloads(origin: str, topics: list[str]) -> list[str]:
    """`ORIGIN topic topic ...`, split so each stays under PostgreSQL's limit."""
    payloads, current = [], origin
    for topic in topics:
        if len(current) + 1 + len(topic) > PAYLOAD_CHARS_MAX:
            payloads.append(current)
            current = origin
        current += " " + topic
    if current != origin:
        payloads.append(current)
    return payloads


@dataclass(frozen=True)
class News:
    origin: str
    published_us: int | None  # None from a coordinator that does not stamp its payloads
    topics: tuple[str, ...]


def parse_payload(payload: str) -> News:
    """`ORIGIN[@MICROSECONDS] topic topic ...` as payloads() writes it."""
    head, _, topics = payload.partition(" ")
    origin, _, stamp = head.partition("@")
    published_us = int(stamp) if stamp.isascii() and stamp.isdigit() else None
    return News(origin, published_us, tuple(topics.split(" ")) if topics else ())
