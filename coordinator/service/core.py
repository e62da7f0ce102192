"""What every use case shares: the database, the clock, the settings, the live index, wake-ups.

The scheduler's pass lives here too: a submit, a heartbeat, a receipt and a check each
end by asking it to place what now fits.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

from sqlalchemy.orm import Session

from coordinator.clock import Clock
from coordinator.config import CoordinatorConfig
from coordinator.live.assignments import ASSIGNMENT_TOPIC_PREFIX, LiveAssignments, assignment_topic, job_of_topic
from coordinator.live.chunks import CHUNK_TOPIC_PREFIX, LiveChunks, chunk_of_topic, chunk_topic
from coordinator.live.health import HealthBoard
from coordinator.live.notifier import Notifier, fleet_changes, job_topic, node_topic
from coordinator.metrics import readings, timing
from coordinator.metrics.recorder import CoordinatorMetrics
from coordinator.model import TERMINAL_STATUSES, JobRecord, JobStatus, TokenChunk
from coordinator.money.credit_due import CreditDue
from coordinator.nodes.catalog import PeerCheckablePairs
from coordinator.scheduling import scheduler
from coordinator.scheduling.live_fleet import LiveFleet
from coordinator.storage import job_rows
from coordinator.storage.database import Database
from coordinator.verification.outcomes import CheckContext

log = logging.getLogger(__name__)

VERIFICATION_TOPIC = "verification"  # a check is waiting for the verifier worker


class ServiceCore:
    def __init__(self, db: Database, clock: Clock, config: CoordinatorConfig,
                 notifier: Notifier | None = None, draws: random.Random | None = None) -> None:
        self.db, self.clock, self.config = db, clock, config
        self.notifier = notifier or Notifier()
        self.live_chunks = LiveChunks()
        self.live_assignments = LiveAssignments()
        self.credit_due = CreditDue()  # when the credits loop next has work (its holds noted here)
        self.completions_queued = threading.Event()  # a receipt queued a posting: wakes the postings loop
        self.fleet = LiveFleet(config)  # the scheduler's placement index, kept across passes
        self.health = HealthBoard()  # the background loops' health (coordinator.background)
        # Heartbeats count from here at the earliest: a node's last one before a restart says
        # nothing about whether it is gone (see NodeSessions.reap_offline).
        self.started_at_ms = clock.now_ms()
        # Which jobs get checked: from the OS's randomness, so no node can predict it.
        self.draws = draws or random.SystemRandom()
        # The (model id, weights digest) pairs this coordinator's verifier replays (service.checks).
        self.replayable: Callable[[], frozenset[tuple[str, str]]] = frozenset
        # The pairs nodes of two or more operators serve, so a peer can check them, read in the
        # receipt's session (nodes.catalog). Sampled jobs of no such pair are held longer.
        self.peer_checkable: Callable[[Session], frozenset[tuple[str, str]]] = PeerCheckablePairs(clock.now_ms)
        self.metrics = CoordinatorMetrics()  # served at /metrics (coordinator.metrics)
        # Told the node ids another coordinator reported (hear_relayed): cached sessions go.
        self.relayed_fleet_listeners: list[Callable[[list[str]], None]] = []
        self.metrics.watch(readings.NetworkCollector(self.read_network))

    def check_context(self) -> CheckContext:
        """What opening a check needs: the trust policy, a fresh draw, and who can replay."""
        return CheckContext(self.config.trust, self.draws.random(), self.replayable(),
                            self.config.peer_checks.enabled, self.peer_checkable)

    def poll_interval_s(self) -> float:
        """How long a stream or a waiter goes without news before it reads the database anyway."""
        return self.notifier.poll_interval_s(self.config.stream_poll_interval_s,
                                             self.config.relayed_poll_interval_s)

    def read_network(self) -> readings.NetworkReading:
        """The network's figures for a metrics scrape, in one read transaction."""
        with self.db.read_transaction() as session:
            return readings.read_network(session, self.clock.now_ms(), self.config.node_offline_after_ms)

    def record_ended(self, job_ids: list[str] | tuple[str, ...]) -> None:
        """After commit: the request metrics of those of these jobs that have ended."""
        if not job_ids:
            return
        with self.db.read_transaction() as session:
            for job_id in job_ids:
                job = job_rows.job_by_id(session, job_id)
                if job is None or job.status not in TERMINAL_STATUSES or job.finished_at_ms is None:
                    continue
                streamed = job_rows.token_count(session, job_id) if job.status is JobStatus.FAILED else 0
                self.metrics.request_finished(timing.finished_request(job, streamed))

    def record_completed(self, job: JobRecord) -> None:
        """After commit: record_ended for a job the caller just completed, without reading it again."""
        assert job.status is JobStatus.COMPLETED and job.finished_at_ms is not None
        self.metrics.request_finished(timing.finished_request(job, 0))

    def hear_relayed(self, *topics: str) -> None:
        """News from another coordinator on the same database (live.pg_relay): wake our
        waiters, and re-read nodes that registered or left there into our placement index,
        so a job submitted here may go to a Mac connected there at once."""
        changed = fleet_changes(topics)
        if changed:
            self.fleet.note_changed(changed, pods=True)
            for listener in list(self.relayed_fleet_listeners):
                listener(changed)
        wake = []
        for topic in topics:  # chunks and jobs first, so the streams the wake-ups wake find them
            if topic.startswith(CHUNK_TOPIC_PREFIX):
                carried = chunk_of_topic(topic)
                if carried is not None:
                    self.live_chunks.publish(carried[0], [carried[1]])
            elif topic.startswith(ASSIGNMENT_TOPIC_PREFIX):
                job = job_of_topic(topic)
                if job is not None:
                    self.live_assignments.publish(job)
            else:
                wake.append(topic)
        self.notifier.notify_local(*wake)

    def job_assigned(self, job: JobRecord) -> None:
        """After the commit that assigned job: its node's stream takes it from the live hand-off
        here, or on another coordinator from the wake-up that carries it (while the relay works)."""
        self.live_assignments.publish(job)
        topic = assignment_topic(job) if self.notifier.relayed else None
        self.notifier.notify(job_topic(job.job_id), *(node_topic(n) for n in job.node_ids),
                             carrying=() if topic is None else (topic,))

    def chunk_stored(self, job_id: str, chunk: TokenChunk | None) -> None:
        """After the commit that stored chunk (None: nothing new was stored): this process's
        readers take it from the live hand-off, and other coordinators' readers with the
        wake-up that carries it."""
        carried: tuple[str, ...] = ()
        if chunk is not None:
            self.live_chunks.publish(job_id, [chunk])
            # Only while the relay works: a stalled one would queue chunks, not just wake-ups.
            topic = chunk_topic(job_id, chunk) if self.notifier.relayed else None
            carried = () if topic is None else (topic,)
        self.notifier.notify(job_topic(job_id), carrying=carried)

    def chunks_stored(self, stored: tuple[tuple[str, TokenChunk], ...], unchanged: tuple[str, ...] = ()) -> None:
        """chunk_stored for a multiplexed message's chunks, in one notification: its readers
        (and those of the jobs whose chunks changed nothing) wake together."""
        carried: list[str] = []
        for job_id, chunk in stored:
            self.live_chunks.publish(job_id, [chunk])
            if self.notifier.relayed:
                carried.append(chunk_topic(job_id, chunk))
        topics = dict.fromkeys(job_topic(job_id) for job_id in (*(j for j, _ in stored), *unchanged))
        if topics:
            self.notifier.notify(*topics, carrying=tuple(carried))

    def wake_jobs(self, job_ids: list[str] | tuple[str, ...], node_ids: tuple[str, ...] | list[str] = ()) -> None:
        """After commit: readers of these jobs, and streams of these nodes, look again."""
        self.notifier.notify(*(job_topic(j) for j in job_ids), *(node_topic(n) for n in node_ids))

    def rebuild_index_aside(self) -> bool:
        """The placement index's safety-net rebuild, when due: read and built without the pass
        lock (seconds at 10,000 Macs, which no submit or registration should wait for); the
        pass it then asks for swaps it in. True when it built one."""
        if not self.fleet.build_aside(self.db.read_transaction, self.clock.now_ms()):
            return False
        self.run_scheduler()
        return True

    def run_scheduler(self) -> scheduler.SchedulingPass:
        """Place the queued jobs that fit now. Every receipt and heartbeat asks; most find no
        job waiting, and then only bring the index up to date (off the next submit's path)."""
        now = self.clock.now_ms()
        # A read transaction first: on SQLite the pass's BEGIN takes the write lock, which
        # each node's heartbeat would otherwise hold for a pass over an empty queue.
        with self.db.read_transaction() as session:
            if not job_rows.any_queued(session):
                with self.fleet.current(session, now):
                    return scheduler.SchedulingPass((), ())
        with self.db.transaction() as session:
            result = scheduler.schedule_queued(session, now, self.config, self.fleet)
        self.metrics.scheduling_pass(len(result.placed), len(result.failed))
        self.record_ended(result.failed)
        for job_id, node_ids in result.placed:
            log.info("job %s assigned to %s", job_id, ", ".join(node_ids))
            self.wake_jobs([job_id], node_ids)
        self.wake_jobs(result.failed)
        return result
