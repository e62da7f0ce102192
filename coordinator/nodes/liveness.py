"""Node liveness in the coordinator's memory, written to the database in batches and only on change.

A heartbeat only updates this book. What the database holds of it is a lease: a node counts as
online while `now - nodes.last_heartbeat_ms <= node_offline_after_ms`, for every reader (placement,
MLX World, other coordinators). So the book writes a node's row when:
- the node comes online (its stored lease had run out): in the next batch, which the caller wakes
  at once, and which is followed by one scheduling pass for every comeback it carries (a caller
  may also write it at once itself): a coordinator that fell behind sees thousands a second,
  and a transaction and a scheduling pass each cost over ten times a heartbeat (bench.scale);
- its terms change (lending state, warm models): at once too, they change where jobs may go;
- its stored lease is half spent and the node has been heard since: in the next batch (a refresh);
- its reported running jobs changed: in the next batch.
Going offline costs no write at all: the stored lease simply runs out, and never later than this
book's own view (a stored time is never newer than the last heartbeat heard).

Pure over plain values; one lock, since heartbeats arrive on several threads.
"""

from __future__ import annotations

import heapq
import threading
from dataclasses import dataclass, field

from contracts.lending import LendingState
from coordinator.model import LeaseWrite

NODES_MAX = 1_000_000  # a coordinator holding more than this is a bug, not a fleet


@dataclass(frozen=True)
class Beat:
    node_id: str
    at_ms: int  # when the coordinator heard it
    running_jobs: int
    lending: LendingState | None = None  # None: the agent predates lending modes
    warm_models: tuple[str, ...] = ()


@dataclass(frozen=True)
class BeatOutcome:
    came_online: bool  # the stored lease had run out (or this process never heard the node)
    terms_changed: bool  # lending state or warm models differ from what placement has

    @property
    def schedulable(self) -> bool:
        """Whether placement must hear of it now: write the row at once, then one scheduling pass."""
        return self.came_online or self.terms_changed


@dataclass
class _Node:
    heard_ms: int  # the last heartbeat heard
    stored_ms: int  # nodes.last_heartbeat_ms as last written or read
    running_jobs: int
    stored_running_jobs: int
    lending: LendingState | None
    warm_models: frozenset[str]
    refresh_queued: bool = False  # one entry in _refresh_due at most


@dataclass
class LivenessBook:
    offline_after_ms: int
    # A stored lease this old, of a node heard since, is refreshed by the next batch: half the
    # offline limit, so a flush that comes late still renews it before readers call it offline.
    refresh_after_ms: int = 0
    nodes_max: int = NODES_MAX
    _nodes: dict[str, _Node] = field(default_factory=dict)
    _dirty: set[str] = field(default_factory=set)  # running jobs changed since written
    _comebacks: set[str] = field(default_factory=set)  # came online, not yet written
    _refresh_due: list[tuple[int, str]] = field(default_factory=list)  # heap: (when, node)
    _offline_due: list[tuple[int, str]] = field(default_factory=list)  # heap: (when, node)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        assert self.offline_after_ms > 0
        if self.refresh_after_ms <= 0:
            self.refresh_after_ms = max(1, self.offline_after_ms // 2)
        assert self.refresh_after_ms < self.offline_after_ms

    def adopt(self, node_id: str, stored_ms: int, lending: LendingState | None,
              warm_models: tuple[str, ...], heard_ms: int | None = None) -> None:
        """Take a node as the database holds it (just registered, or first heard by this process)."""
        with self._lock:
            self._adopt(node_id, stored_ms, lending, frozenset(warm_models),
                        stored_ms if heard_ms is None else heard_ms)

    def _adopt(self, node_id: str, stored_ms: int, lending: LendingState | None,
               warm_models: frozenset[str], heard_ms: int) -> _Node:
        assert len(self._nodes) < self.nodes_max or node_id in self._nodes, "liveness book is full"
        node = _Node(heard_ms, stored_ms, 0, 0, lending, warm_models)
        self._nodes[node_id] = node
        self._dirty.discard(node_id)
        self._comebacks.discard(node_id)
        self._queue_refresh(node_id, node)
        heapq.heappush(self._offline_due, (heard_ms + self.offline_after_ms + 1, node_id))
        return node

    def _queue_refresh(self, node_id: str, node: _Node) -> None:
        if not node.refresh_queued:
            node.refresh_queued = True
            heapq.heappush(self._refresh_due, (node.stored_ms + self.refresh_after_ms, node_id))

    def knows(self, node_id: str) -> bool:
        with self._lock:
            return node_id in self._nodes

    def peek(self, beat: Beat) -> BeatOutcome | None:
        """What beat() would say of this heartbeat, changing nothing (None: a node not adopted)."""
        with self._lock:
            node = self._nodes.get(beat.node_id)
            return None if node is None else self._outcome(node, beat)

    def _outcome(self, node: _Node, beat: Beat) -> BeatOutcome:
        came_online = beat.at_ms - node.stored_ms > self.offline_after_ms
        terms_changed = beat.lending is not None and (beat.lending != node.lending or
                                                      frozenset(beat.warm_models) != node.warm_models)
        return BeatOutcome(came_online, terms_changed)

    def beat(self, beat: Beat) -> BeatOutcome:
        """Note a heartbeat of a node already adopted; says whether placement must hear of it."""
        with self._lock:
            node = self._nodes[beat.node_id]
            outcome = self._outcome(node, beat)
            if beat.at_ms > node.heard_ms:
                node.heard_ms = beat.at_ms
                heapq.heappush(self._offline_due, (beat.at_ms + self.offline_after_ms + 1, beat.node_id))
                self._queue_refresh(beat.node_id, node)
            if beat.lending is not None:
                node.lending, node.warm_models = beat.lending, frozenset(beat.warm_models)
            node.running_jobs = beat.running_jobs
            if node.running_jobs != node.stored_running_jobs:
                self._dirty.add(beat.node_id)
            if outcome.came_online:
                self._comebacks.add(beat.node_id)
            return outcome

    def stored(self, writes: list[LeaseWrite]) -> None:
        """These rows are now written (by a batch, or at once by the caller)."""
        with self._lock:
            for write in writes:
                node = self._nodes.get(write.node_id)
                if node is None:
                    continue
                if write.last_heartbeat_ms > node.stored_ms:
                    node.stored_ms = write.last_heartbeat_ms
                    self._queue_refresh(write.node_id, node)
                node.stored_running_jobs = write.running_jobs
                if node.running_jobs == write.running_jobs:
                    self._dirty.discard(write.node_id)
                if node.stored_ms + self.offline_after_ms >= node.heard_ms:
                    self._comebacks.discard(write.node_id)  # its lease covers its last beat

    def current_write(self, node_id: str) -> LeaseWrite:
        """The row as it stands now in memory (for a write the caller makes at once)."""
        with self._lock:
            node = self._nodes[node_id]
            return LeaseWrite(node_id, node.heard_ms, node.running_jobs)

    def due_writes(self, now_ms: int) -> list[LeaseWrite]:
        """What the next batch writes: comebacks, changed rows, and leases half spent of nodes
        heard since."""
        with self._lock:
            due = self._dirty | self._comebacks
            while self._refresh_due and self._refresh_due[0][0] <= now_ms:
                _, node_id = heapq.heappop(self._refresh_due)
                node = self._nodes.get(node_id)
                if node is None:
                    continue
                node.refresh_queued = False
                if node.stored_ms + self.refresh_after_ms > now_ms:
                    self._queue_refresh(node_id, node)  # written again since: not due yet
                elif node.heard_ms > node.stored_ms:
                    due.add(node_id)
                # A node not heard since its lease was written needs nothing: its next beat queues it.
            writes = []
            for node_id in sorted(due):
                node = self._nodes.get(node_id)
                if node is not None:
                    writes.append(LeaseWrite(node_id, max(node.heard_ms, node.stored_ms), node.running_jobs,
                                             node_id in self._comebacks))
            return writes

    def comebacks_pending(self) -> frozenset[str]:
        """Nodes that came online and are not yet written: back, though the database still holds
        their lease as run out."""
        with self._lock:
            return frozenset(self._comebacks)

    def comebacks_waiting(self) -> int:
        return len(self.comebacks_pending())

    def gone_offline(self, now_ms: int) -> list[str]:
        """Nodes this process heard whose heartbeats stopped, each once (and forgotten)."""
        gone = []
        with self._lock:
            while self._offline_due and self._offline_due[0][0] <= now_ms:
                at, node_id = heapq.heappop(self._offline_due)
                node = self._nodes.get(node_id)
                if node is not None and node.heard_ms + self.offline_after_ms + 1 == at:
                    del self._nodes[node_id]
                    self._dirty.discard(node_id)
                    self._comebacks.discard(node_id)
                    gone.append(node_id)
        return gone

    def forget(self, node_id: str) -> None:
        """The node left or was expired: nothing more to write for it."""
        with self._lock:
            self._nodes.pop(node_id, None)
            self._dirty.discard(node_id)
            self._comebacks.discard(node_id)

    def __len__(self) -> int:
        with self._lock:
            return len(self._nodes)
