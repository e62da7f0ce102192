"""The scheduler's FleetIndex, kept current between passes instead of rebuilt for each one.

Built once from the database, then brought up to date at the start of every pass:
- Macs the service noted as changed (registered, heartbeat, left, checked) are re-read;
- Macs whose last heartbeat has since gone stale are re-read (they now count as offline);
- commitments are compared with the database's, busy Macs only, so a job that ended, or
  work another coordinator on the same PostgreSQL committed, is picked up (a Mac whose
  commitment alone moved takes it from that read, without a re-read of its row);
- every `fleet_rebuild_interval_ms` the index is rebuilt from scratch anyway, a safety net
  for anything else another coordinator changed. That read takes seconds at 10,000 Macs, so
  it is built aside (build_aside, from a background loop) without the pass lock, and the next
  pass swaps it in, re-reading the nodes passes learned of meanwhile. A pass rebuilds in place
  only when it has no index, is told to, or no aside build came for a whole further interval.
The database stays the source of truth: the scheduler re-reads the chosen Macs under row
locks before it commits, and refreshes them here when they differ from the index.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from contracts.ids import NodeId
from contracts.models import ModelSpec
from coordinator.config import CoordinatorConfig
from coordinator.model import NodeRecord
from coordinator.nodes.catalog import model_catalog
from coordinator.placement.config import PlacementConfig
from coordinator.placement.decision import Placement
from coordinator.placement.index import FleetIndex
from coordinator.placement.index_sync import apply_macs, apply_pods
from coordinator.scheduling import fleet_reads
from coordinator.storage import job_rows, node_rows

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Built:
    """A whole-fleet read made into an index."""
    index: FleetIndex
    committed: dict[str, job_rows.Commitment]  # what the index was built with
    nodes: list[NodeRecord]
    read_at_ms: int


@dataclass
class _Aside:
    """An index being built without the pass lock, and what passes learned while it was:
    those nodes are re-read into it when it is swapped in."""
    rebuilds_at_start: int  # a rebuild in a pass meanwhile makes this one stale
    noted: set[str] = field(default_factory=set)
    leases: dict[str, int] = field(default_factory=dict)
    pods: bool = False
    built: _Built | None = None


class LiveFleet:
    def __init__(self, config: CoordinatorConfig, placement_config: PlacementConfig | None = None) -> None:
        self._config = config
        self._placement_config = placement_config or PlacementConfig()
        self._pass_lock = threading.Lock()  # one scheduling pass at a time reads and changes the index
        self._notes_lock = threading.Lock()  # guards the notes only; never held during I/O
        self._noted: set[str] = set()
        self._pods_noted = False
        self._rebuild_noted = False
        self._leases_noted: dict[str, int] = {}  # node -> a lease this process just wrote
        # Owned by the pass that holds _pass_lock:
        self._index: FleetIndex | None = None
        self._rebuilt_this_pass = False
        self._rebuild_at_ms = 0
        self._committed: dict[str, job_rows.Commitment] = {}  # as last read, plus our own commits
        self._heartbeats: dict[str, int] = {}  # indexed node -> the last heartbeat it was read with
        self._offline_due: list[tuple[int, str]] = []  # heap: (first ms the node counts offline, node)
        self._declared: dict[str, NodeRecord] = {}  # every node, quarantined too: the model catalog's input
        self._catalog: dict[str, ModelSpec] | None = None
        self._last_catalog: dict[str, ModelSpec] = {}  # read without the pass lock
        self._first_registered: dict[str, int] = {}  # made with the catalog
        self._commits_this_pass = 0
        self._read_this_pass: set[str] = set()  # nodes re-read in this pass's transaction
        self._index_builds = 0  # rebuilds within a pass
        self._aside_builds = 0
        self._aside: _Aside | None = None  # guarded by _notes_lock; its notes are the passes'

    # -- notes from the service, after its transaction committed ---------------------------

    def note_changed(self, node_ids: Iterable[str], *, pods: bool = False) -> None:
        """These nodes' rows or trust changed (pods: a pod may have been declared)."""
        with self._notes_lock:
            self._noted.update(node_ids)
            self._pods_noted |= pods

    def note_leases(self, leases: dict[str, int]) -> None:
        """These nodes' leases were renewed (a liveness batch): nothing else of them changed, so
        the index keeps them as they are instead of re-reading them when the old lease runs out."""
        if leases:
            with self._notes_lock:
                for node_id, last_heartbeat_ms in leases.items():
                    if last_heartbeat_ms > self._leases_noted.get(node_id, -1):
                        self._leases_noted[node_id] = last_heartbeat_ms

    def note_rebuild(self) -> None:
        with self._notes_lock:
            self._rebuild_noted = True

    # -- within a scheduling pass ----------------------------------------------------------

    @contextmanager
    def current(self, session: Session, now_ms: int) -> Iterator[FleetIndex]:
        """The index, up to date with the database as of this transaction; held for the pass."""
        # The transaction begins first: on SQLite a write transaction's BEGIN takes the write
        # lock, which must come before the pass lock (a submit holding the write lock waits
        # for the pass lock; a pass holding it must not then wait for the write lock).
        session.connection()
        with self._pass_lock:
            finished = False
            try:
                self._rebuilt_this_pass = False
                self._commits_this_pass = 0
                self._read_this_pass = set()
                self._bring_up_to_date(session, now_ms)
                assert self._index is not None
                yield self._index
                finished = True
            finally:
                # What the pass read stays true if its transaction rolls back; what it committed
                # does not. A refused submit (a bad request) so keeps the index: rebuilding it
                # costs seconds at 100,000 Macs.
                if not finished and self._commits_this_pass:
                    self._index = None

    @property
    def rebuilt_this_pass(self) -> bool:
        return self._rebuilt_this_pass

    @property
    def index_builds(self) -> int:
        """Whole-fleet reads into a new index so far: each costs seconds at 100,000 Macs."""
        return self._index_builds + self._aside_builds

    @property
    def index_builds_in_pass(self) -> int:
        """Those made within a pass, under the pass lock: a submit or registration waited for each."""
        return self._index_builds

    def build_aside(self, read: Callable[[], AbstractContextManager[Session]], now_ms: int) -> bool:
        """The safety-net rebuild, once due: read the whole fleet in read()'s transaction and
        build the index, all without the pass lock; the next pass swaps it in. True when it built one."""
        with self._notes_lock:
            if self._index is None or self._aside is not None or now_ms < self._rebuild_at_ms:
                return False
            # Begun before the read: every note a pass takes from here on is re-read at the swap.
            aside = self._aside = _Aside(self._index_builds)
        try:
            with read() as session:
                fleet, nodes, committed = fleet_reads.snapshot_with_commitments(session, now_ms, self._config)
            built = _Built(FleetIndex.build(fleet, self._placement_config), committed, nodes, now_ms)
        except BaseException:
            with self._notes_lock:
                self._aside = None
            raise
        with self._notes_lock:
            aside.built = built
            self._aside_builds += 1
        log.info("placement index built aside: %d Macs, %d pods", built.index.mac_count, built.index.pod_count)
        return True

    def read_this_pass(self, node_ids: Iterable[str]) -> bool:
        """Whether the index holds these nodes as this pass's transaction read them."""
        assert self._pass_lock.locked()
        return self._rebuilt_this_pass or self._read_this_pass.issuperset(node_ids)

    def rebuild(self, session: Session, now_ms: int) -> None:
        """Read the whole fleet again now, within the pass (the index object is replaced)."""
        assert self._pass_lock.locked()
        self._rebuild(session, now_ms)

    @property
    def index(self) -> FleetIndex:
        assert self._pass_lock.locked() and self._index is not None, "use the index within current()"
        return self._index

    def catalog(self) -> dict[str, ModelSpec]:
        assert self._pass_lock.locked()
        if self._catalog is None:
            self._catalog = model_catalog(self._declared.values())
            self._last_catalog = self._catalog
            self._first_registered = {}
            for node in self._declared.values():
                for spec in node.models:
                    earliest = self._first_registered.get(spec.model_id, node.registered_at_ms)
                    self._first_registered[spec.model_id] = min(earliest, node.registered_at_ms)
        return self._catalog

    def last_catalog(self) -> dict[str, ModelSpec]:
        """The catalog as a pass last built it, read without the lock: for what may be a pass
        old (a submit's answer reading the spec its own pass checked)."""
        return self._last_catalog

    def first_registered_ms(self) -> dict[str, int]:
        """Each model in the catalog: when the first node serving it registered (kept with it)."""
        self.catalog()
        return self._first_registered

    def chips(self, node_ids: Iterable[str]) -> tuple[str, ...]:
        """The chips of these nodes, as last read (those read)."""
        assert self._pass_lock.locked()
        return tuple(self._declared[n].hardware.chip for n in node_ids if n in self._declared)

    def catch_up_on_registrations(self, session: Session, now_ms: int) -> bool:
        """Rebuild when a node registered that the index has not read (with another coordinator
        on the same database); True when it did. One cheap read: call it before refusing a job
        for good, not on every decision."""
        assert self._pass_lock.locked()
        if self._rebuilt_this_pass or node_rows.registrations_digest(session) == (
                len(self._declared), sum(node.registered_at_ms for node in self._declared.values())):
            return False
        log.info("a node registered that the placement index has not read; rebuilding it")
        self._rebuild(session, now_ms)
        return True

    def refresh(self, session: Session, node_ids: Iterable[str], now_ms: int, *, pods: bool = False) -> None:
        """Re-read these nodes now (a commit found the index behind the database)."""
        assert self._pass_lock.locked() and self._index is not None
        ids = sorted(set(node_ids))
        fresh = fleet_reads.fresh_macs(session, ids, now_ms, self._config)
        self._read_this_pass.update(ids)
        aside = self._aside
        if aside is not None:  # read here as of now: the index built aside may hold them older
            aside.noted.update(ids)
        self._remember(fresh.nodes, now_ms)
        for node_id in ids:  # the index now holds what the database said, commitments included
            self._committed.pop(node_id, None)
        self._committed.update(fresh.committed)
        if apply_macs(self._index, fresh.macs) or pods:
            self._sync_pods(session)

    def record_commit(self, placement: Placement) -> None:
        """Our own commit, written to the database in this pass: reserve it in the index too."""
        assert self._pass_lock.locked() and self._index is not None
        assert self._index.try_commit(placement), "the commit re-check saw these Macs as the index does"
        self._commits_this_pass += 1
        for node_id in placement.node_ids:  # as the database now reads it (a model's shared memory once)
            self._committed[node_id] = self._index.commitment(node_id)

    # -- keeping up ------------------------------------------------------------------------

    def _bring_up_to_date(self, session: Session, now_ms: int) -> None:
        with self._notes_lock:
            noted, self._noted = self._noted, set()
            pods, self._pods_noted = self._pods_noted, False
            rebuild, self._rebuild_noted = self._rebuild_noted, False
            leases, self._leases_noted = self._leases_noted, {}
            aside = self._aside
            if aside is not None:
                aside.noted |= noted
                aside.pods |= pods
                for node_id, last_heartbeat_ms in leases.items():
                    aside.leases[node_id] = max(last_heartbeat_ms, aside.leases.get(node_id, -1))
                if aside.built is not None:
                    self._aside = None
        # Overdue by a whole further interval: no aside build came (its loop is not running).
        overdue_ms = self._rebuild_at_ms + self._config.fleet_rebuild_interval_ms
        if self._index is None or rebuild or now_ms >= overdue_ms:
            self._rebuild(session, now_ms)
            return
        if aside is not None and aside.built is not None and aside.rebuilds_at_start == self._index_builds:
            self._install(aside.built)
            noted, pods, leases = aside.noted, aside.pods, aside.leases
            log.info("placement index swapped for the one built aside; %d nodes re-read", len(noted))
        self._renew(leases, now_ms)
        noted |= self._gone_offline(now_ms)
        committed = job_rows.committed_by_node(session)
        moved = {node_id for node_id in committed.keys() | self._committed.keys()
                 if committed.get(node_id) != self._committed.get(node_id)}
        noted |= self._set_loads(moved - noted, committed)
        if noted or pods:
            self.refresh(session, noted, now_ms, pods=pods)

    def _set_loads(self, node_ids: set[str], committed: dict[str, job_rows.Commitment]) -> set[str]:
        """Indexed Macs whose commitment alone moved (a job ended, or another coordinator placed
        one) take it from this pass's read: their rows and trust are as the index holds them.
        Returns the nodes the index does not hold, to be re-read."""
        assert self._index is not None
        unindexed = set()
        for node_id in node_ids:
            if not self._index.has_mac(NodeId(node_id)):
                unindexed.add(node_id)
                continue
            memory, running, shared = committed.get(node_id, (0, 0, ()))
            self._index.replace_mac(dataclasses.replace(
                self._index.mac(NodeId(node_id)), committed_memory_bytes=memory, running_jobs=running,
                shared_memory=shared))
            if node_id in committed:
                self._committed[node_id] = committed[node_id]
            else:
                self._committed.pop(node_id, None)
        return unindexed

    def _rebuild(self, session: Session, now_ms: int) -> None:
        fleet, nodes, committed = fleet_reads.snapshot_with_commitments(session, now_ms, self._config)
        self._index_builds += 1
        index = FleetIndex.build(fleet, self._placement_config)
        self._install(_Built(index, committed, nodes, now_ms))
        self._rebuilt_this_pass = True
        log.info("placement index rebuilt: %d Macs, %d pods", index.mac_count, index.pod_count)

    def _install(self, built: _Built) -> None:
        self._index = built.index
        self._committed = dict(built.committed)
        self._declared, self._catalog = {}, None
        self._heartbeats, self._offline_due = {}, []
        self._remember(built.nodes, built.read_at_ms)
        self._rebuild_at_ms = built.read_at_ms + self._config.fleet_rebuild_interval_ms

    def _remember(self, nodes: list[NodeRecord], now_ms: int) -> None:
        """Note what the catalog and the offline clock need from freshly read node records."""
        offline_after = self._config.node_offline_after_ms
        for node in nodes:
            before = self._declared.get(node.node_id)
            if before is None or (before.registered_at_ms, before.models) != (node.registered_at_ms, node.models):
                self._catalog = None
            self._declared[node.node_id] = node
            self._heartbeats[node.node_id] = node.last_heartbeat_ms
            if node.left_at_ms is None and now_ms - node.last_heartbeat_ms <= offline_after:
                heapq.heappush(self._offline_due, (node.last_heartbeat_ms + offline_after + 1, node.node_id))

    def _renew(self, leases: dict[str, int], now_ms: int) -> None:
        """Move the offline clock of indexed nodes whose lease was renewed (no read needed)."""
        offline_after = self._config.node_offline_after_ms
        for node_id, last_heartbeat_ms in leases.items():
            before = self._heartbeats.get(node_id)
            if before is None or last_heartbeat_ms <= before or now_ms - before > offline_after:
                continue  # not indexed, nothing new, or indexed as offline (noted, so re-read)
            self._heartbeats[node_id] = last_heartbeat_ms
            heapq.heappush(self._offline_due, (last_heartbeat_ms + offline_after + 1, node_id))

    def _gone_offline(self, now_ms: int) -> set[str]:
        """Nodes read while online whose heartbeat has since gone stale."""
        due, offline_after = set(), self._config.node_offline_after_ms
        while self._offline_due and self._offline_due[0][0] <= now_ms:
            at, node_id = heapq.heappop(self._offline_due)
            if self._heartbeats.get(node_id, at) + offline_after + 1 == at:  # not heard from since
                due.add(node_id)
        return due

    def _sync_pods(self, session: Session) -> None:
        assert self._index is not None
        declared = node_rows.all_pods(session)
        indexed = {member for pod in declared for member in pod.members if self._index.has_mac(member)}
        apply_pods(self._index, fleet_reads.pod_candidates(declared, indexed))
