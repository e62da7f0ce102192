"""Signed heartbeats aggregated into uptime spans: the Ultra-seat bonus's proof, one row per span.

A signed heartbeat received at t proves the node online over [t, t + credit_ms) (ledger.seats).
Consecutive heartbeats of one lending mode whose gaps are at most credit_ms therefore prove
[first, last + credit_ms) together, and one span row (first and last heartbeat, their signatures,
how many) carries exactly what their rows did for availability. A longer gap, or a change of
mode, starts a new span.

The book holds each node's open span in memory. A batch writes a span when it is new, when it
closed, and while open once its stored end is `refresh_after_ms` old: a coordinator that dies
loses at most that much of a span's end, and the node's first heartbeat to the next process
continues the stored span when it comes within credit_ms of its stored end (see the README).

Pure over plain values; one lock, since heartbeats arrive on several threads.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from coordinator.model import UptimeSpan


def extend(span: UptimeSpan, mode: str, sent_at_ms: int, received_at_ms: int, signature: bytes,
           credit_ms: int) -> UptimeSpan | None:
    """The span with this heartbeat added, or None when it must start a new span."""
    if mode != span.mode or received_at_ms - span.last_received_ms > credit_ms:
        return None
    return replace(span, last_received_ms=max(span.last_received_ms, received_at_ms),
                   last_sent_at_ms=sent_at_ms, beats=span.beats + 1, last_signature=signature)


def opened(node_id: str, mode: str, sent_at_ms: int, received_at_ms: int, signature: bytes) -> UptimeSpan:
    return UptimeSpan(node_id, mode, received_at_ms, received_at_ms, sent_at_ms, sent_at_ms, 1,
                      signature, signature)


@dataclass
class _Open:
    span: UptimeSpan
    stored: UptimeSpan | None  # as last written (None: never)


@dataclass
class UptimeBook:
    credit_ms: int
    refresh_after_ms: int
    _open: dict[str, _Open] = field(default_factory=dict)
    # Nodes whose open span differs from its row: a batch looks at these, not at every node
    # (at tens of thousands of nodes, a scan each second was a visible share of a core).
    _unwritten: dict[str, None] = field(default_factory=dict)
    # Closed since the last batch and unwritten, each with whether its row exists already.
    _closed: list[tuple[UptimeSpan, bool]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        assert self.credit_ms > 0 and 0 < self.refresh_after_ms <= self.credit_ms

    def knows(self, node_id: str) -> bool:
        with self._lock:
            return node_id in self._open

    def resume(self, node_id: str, stored: UptimeSpan | None, last_sent_at_ms: int | None) -> None:
        """Take the node's latest stored span (first heartbeat this process hears from it).

        last_sent_at_ms: the newest signed time stored anywhere (older per-beat rows too)."""
        with self._lock:
            if node_id in self._open:
                return
            span = stored
            if span is None:  # a placeholder that only carries the replay floor
                floor = last_sent_at_ms if last_sent_at_ms is not None else -1
                span = UptimeSpan(node_id, "", -(10**15), -(10**15), floor, floor, 1, b"", b"")
            elif last_sent_at_ms is not None and last_sent_at_ms > span.last_sent_at_ms:
                span = replace(span, last_sent_at_ms=last_sent_at_ms)
            self._open[node_id] = _Open(span, span)

    def record(self, node_id: str, mode: str, sent_at_ms: int, received_at_ms: int,
               signature: bytes) -> bool:
        """Add a verified heartbeat of a resumed node; False for a replay (not newer than the last)."""
        with self._lock:
            entry = self._open[node_id]
            if sent_at_ms <= entry.span.last_sent_at_ms:
                return False
            grown = extend(entry.span, mode, sent_at_ms, received_at_ms, signature, self.credit_ms)
            self._unwritten[node_id] = None
            if grown is not None and entry.span.first_signature:
                entry.span = grown
                return True
            if entry.stored != entry.span and entry.span.first_signature:
                self._closed.append((entry.span, entry.stored is not None))
            self._open[node_id] = _Open(opened(node_id, mode, sent_at_ms, received_at_ms, signature), None)
            return True

    def due_writes(self, now_ms: int, everything: bool = False) -> list[tuple[UptimeSpan, bool]]:
        """Spans the next batch writes, each with whether its row exists already.

        everything: every unwritten change, whatever its age (a coordinator stopping)."""
        with self._lock:
            due = list(self._closed)
            for node_id in self._unwritten:
                entry = self._open[node_id]
                span, stored = entry.span, entry.stored
                if stored == span or not span.first_signature:
                    continue
                if stored is None:
                    due.append((span, False))
                elif everything or now_ms - stored.last_received_ms >= self.refresh_after_ms:
                    due.append((span, True))
            return due

    def stored(self, spans: Sequence[UptimeSpan]) -> None:
        """These spans are now written."""
        with self._lock:
            written = {(s.node_id, s.first_received_ms): s for s in spans}
            self._closed = [(s, exists) for s, exists in self._closed
                            if written.get((s.node_id, s.first_received_ms)) != s]
            for (node_id, first_received_ms), span in written.items():
                entry = self._open.get(node_id)
                if entry is not None and entry.span.first_received_ms == first_received_ms:
                    entry.stored = span
                    if entry.span == span:
                        self._unwritten.pop(node_id, None)

    def forget(self, node_id: str) -> None:
        """Keep nothing open for a node that left (its unwritten end goes in the next batch)."""
        with self._lock:
            entry = self._open.pop(node_id, None)
            self._unwritten.pop(node_id, None)
            if entry is not None and entry.stored != entry.span and entry.span.first_signature:
                self._closed.append((entry.span, entry.stored is not None))
