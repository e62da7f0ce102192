"""How many streams one caller may hold open at once, and all callers together.

A stream costs no thread (coordinator.rpc.offload), but each costs memory and a wake-up,
so a stranger's share is bounded: per node session, per API key (or, for anonymous
callers, per address), and in total. A stream over its limit is refused with
RESOURCE_EXHAUSTED before it does any work.

Below these, gRPC's core keeps its own queue: calls a connection has brought in that the
server has not yet taken up (grpc.aio takes them one at a time, so a burst waits there). Past
its default of 1,000 it cancels calls at random with a bare CANCELLED (issues 25 and 27: the
last of ~1,280 held streams, and Macs' assignment streams at 2,000 nodes), and so it does with
a call that waited there 30 s (10,000 Macs opening their streams at once). calls_waiting_max
and call_wait_s_max raise both, so a burst waits its turn and only our limit refuses.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from coordinator.errors import RateLimited

RETRY_AFTER_S = 5


@dataclass(frozen=True)
class StreamLimits:
    assignment_streams_per_node: int = 4  # a node holds one; a reconnect may overlap the old
    token_streams_per_node: int = 72  # one per running job (at most 64), and resends
    heartbeat_streams_per_node: int = 4  # a node holds one; a reconnect may overlap the old
    job_streams_per_consumer: int = 64  # StreamJob per API key, or per address when anonymous
    streams_total: int = 50_000
    calls_waiting_max: int = 60_000  # gRPC's queue of calls not yet taken up: streams and unary calls
    call_wait_s_max: int = 600  # how long one may wait there; a caller's own deadline still ends it sooner

    def __post_init__(self) -> None:
        assert min(self.assignment_streams_per_node, self.token_streams_per_node,
                   self.heartbeat_streams_per_node,
                   self.job_streams_per_consumer) >= 1
        assert self.streams_total >= self.job_streams_per_consumer
        assert self.calls_waiting_max > self.streams_total, "our refusal must come before gRPC's"
        assert self.call_wait_s_max >= 1

    def server_options(self) -> tuple[tuple[str, int], ...]:
        """grpc.aio.server's options: soft and hard limit equal, so no call is dropped at random below it."""
        return (("grpc.server.max_pending_requests", self.calls_waiting_max),
                ("grpc.server.max_pending_requests_hard_limit", self.calls_waiting_max),
                ("grpc.server_max_unrequested_time_in_server", self.call_wait_s_max))


class OpenStreams:
    """Counts open streams by (kind, holder); hold() refuses one over its limit."""

    def __init__(self, limits: StreamLimits = StreamLimits()) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._open: dict[tuple[str, str], int] = {}
        self._total = 0

    @contextlib.contextmanager
    def hold(self, kind: str, holder: str, limit: int) -> Iterator[None]:
        key = (kind, holder)
        with self._lock:
            if self._total >= self.limits.streams_total:
                raise RateLimited(f"the coordinator holds {self._total} streams, its limit; "
                                  "try again later", retry_after_s=RETRY_AFTER_S)
            if self._open.get(key, 0) >= limit:
                raise RateLimited(f"{limit} {kind} streams are open for {holder} already, the "
                                  "most one may hold; close one first", retry_after_s=RETRY_AFTER_S)
            self._open[key] = self._open.get(key, 0) + 1
            self._total += 1
            self._changed.notify_all()
        try:
            yield
        finally:
            with self._lock:
                self._total -= 1
                left = self._open[key] - 1
                if left:
                    self._open[key] = left
                else:
                    del self._open[key]
                self._changed.notify_all()

    def count(self, kind: str | None = None) -> int:
        with self._lock:
            return self._count(kind)

    def _count(self, kind: str | None) -> int:
        if kind is None:
            return self._total
        return sum(n for (k, _), n in self._open.items() if k == kind)

    def wait_for(self, kind: str | None, condition: Callable[[int], bool], timeout_s: float) -> bool:
        """Block until the count of open streams of kind (None: any) meets condition; False on the timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: condition(self._count(kind)), timeout_s)
