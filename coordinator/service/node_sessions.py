"""A node's session: register, heartbeats, its assignment stream, its tokens, receipts and failures.

Each call is one transaction; wake-ups follow the commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

from contracts import hop_trace, pods
from contracts.ids import NodeId
from coordinator.jobs import handback, results
from coordinator.live.notifier import Wait, job_topic, node_topic, on_this_thread
from coordinator.metrics.names import STREAM_NODE
from coordinator.model import (
    JobRecord,
    JobStatus,
    NodeRecord,
    SignedReceipt,
    SpotChallenge,
    TokenChunk,
)
from contracts.models import ModelSpec
from coordinator.nodes import catalog, registry, reports
from coordinator.errors import RateLimited
from coordinator.nodes.admission import TokenBuckets
from coordinator.nodes.challenges import ChallengeBook
from coordinator.service.checks import Checks
from coordinator.service.core import VERIFICATION_TOPIC, ServiceCore
from coordinator.storage import challenge_rows, job_rows, node_rows

log = logging.getLogger(__name__)
NODES_EXPIRED_PER_PASS_MAX = 1_000  # the rest next pass

class NodeSessions:
    """What node agents tell the network, behind the gRPC edge."""

    def __init__(self, core: ServiceCore, checks: Checks) -> None:
        self._core = core
        self._checks = checks  # which models the coordinator's own verifier holds
        # Called after a registration commits, with (node id, operator, the region the node
        # publishes); MLX World stores it for its map (coordinator.world.world).
        self.region_listeners: list[Callable[[NodeId, str, str], None]] = []
        self.challenges = ChallengeBook(core.db)
        limits = core.config.registration_limits
        self._address_buckets = TokenBuckets(limits.per_address_burst, limits.per_address_per_minute,
                                             limits.buckets_max)
        self._operator_buckets = TokenBuckets(limits.per_operator_burst, limits.per_operator_per_minute,
                                              limits.buckets_max)

    def challenge(self, public_key: bytes, source_address: str | None = None) -> tuple[bytes, int]:
        """A single-use nonce the node signs into its next registration, and its expiry.

        Each one spends a token of the source address's bucket (None: in-process callers)."""
        now = self._core.clock.now_ms()
        if source_address is not None and not self._address_buckets.take(source_address, now):
            wait_s = self._address_buckets.seconds_until_next(source_address, now)
            log.warning("registration from %s refused: over its rate", source_address[:64])
            raise RateLimited(f"too many registrations from {source_address[:64]}; try again in "
                              f"{wait_s} s", retry_after_s=wait_s)
        return self.challenges.issue(public_key, now)

    def register(self, registration: registry.Registration) -> tuple[NodeId, str]:
        node_id = registry.admit(registration, self._core.clock.now_ms(), self.challenges)
        with self._core.db.transaction() as session:
            node_id, token = registry.register(session, registration, node_id, self._core.clock.now_ms(),
                                               self._core.check_context(), self._operator_buckets)
            node = node_rows.node_by_id(session, node_id)
            assert node is not None, "registered in this transaction"
            operator_id = node.operator_id  # proven by its key, not as claimed
        self._core.fleet.note_changed([node_id], pods=registration.pod is not None)
        log.info("node %s registered (%s, %s)", node_id, registration.hardware.chip, operator_id)
        if registration.region:
            for listener in list(self.region_listeners):
                listener(node_id, operator_id, registration.region)
        self._core.run_scheduler()
        return node_id, token

    def pin_models(self, specs: tuple[ModelSpec, ...], pinned_by: str) -> None:
        """Bind each model id to these weights; nodes that declare others are refused."""
        with self._core.db.transaction() as session:
            for spec in specs:
                catalog.pin(session, spec, pinned_by, self._core.clock.now_ms())
        for spec in specs:
            log.info("model %s pinned to weights %s by %s", spec.model_id, spec.weights_digest[:16],
                     pinned_by)

    def authenticate(self, token: str | None, proof: str | None) -> NodeRecord:
        """The calling node: its session token, proven by its key (registry.authenticate)."""
        with self._core.db.read_transaction() as session:
            return registry.authenticate(session, token, proof, self._core.clock.now_ms())

    def heartbeat(self, node: NodeRecord, running_jobs: int,
                  report: reports.HeartbeatReport | None = None) -> int:
        now = self._core.clock.now_ms()
        with self._core.db.transaction() as session:
            reports.accept_heartbeat(
                session, node, report or reports.HeartbeatReport(running_jobs), now)
        self._core.fleet.note_changed([node.node_id])
        self._core.metrics.heartbeat()
        self._core.run_scheduler()
        return now

    def hand_back(self, node: NodeRecord, job_id: str, reason: str) -> None:
        """The node gives a job back unfinished (owner returned, leaving): place it elsewhere."""
        with self._core.db.transaction() as session:
            freed = reports.hand_back_job(session, node, job_id, reason, self._core.clock.now_ms())
        self._core.fleet.note_changed([node.node_id, *freed])
        self._core.notifier.notify(job_topic(job_id), *(node_topic(n) for n in freed))
        self._core.run_scheduler()

    def leave(self, node: NodeRecord, reason: str) -> int:
        """Deregister: hand back the node's jobs and stop placing on it; returns jobs handed back."""
        with self._core.db.transaction() as session:
            touched = reports.leave(session, node, reason, self._core.clock.now_ms())
        self._core.fleet.note_changed([node.node_id])
        log.info("node %s left (%s); %d jobs handed back", node.node_id, reason, len(touched))
        self._core.notifier.notify(*(job_topic(j) for j in touched), node_topic(node.node_id))
        self._core.run_scheduler()
        return len(touched)

    def pod_assignment(self, job: JobRecord) -> tuple[pods.PodDeclaration, tuple[int, ...]] | None:
        """For a pod job: the pod and each member's layers, in the pod's rank order."""
        if len(job.node_ids) < 2:
            return None
        with self._core.db.transaction() as session:
            return node_rows.pod_assignment(session, job)

    def assignments(self, node: NodeRecord,
                    is_active: Callable[[], bool]) -> Iterator[JobRecord | SpotChallenge]:
        """Jobs assigned to the node and not yet started, each sent once (and challenge
        benchmarks); waits on this thread."""
        return on_this_thread(self._core.notifier, self.assignment_steps(node), is_active)

    def assignment_steps(self, node: NodeRecord) -> Iterator[JobRecord | SpotChallenge | Wait]:
        """assignments' steps, with a Wait wherever it would wait; challenge benchmarks too."""
        with self._core.metrics.stream_open(STREAM_NODE):
            yield from self._assignment_steps(node)

    def _assignment_steps(self, node: NodeRecord) -> Iterator[JobRecord | SpotChallenge | Wait]:
        sent: set[str] = set()
        topic = node_topic(node.node_id)
        with self._core.live_assignments.subscribe(node.node_id) as inbox:
            while True:
                seen = self._core.notifier.version(topic)
                # Jobs just committed go before the read, which finds them again (and any other).
                for job in self._unsent(inbox.take(), sent):
                    yield job
                with self._core.db.read_transaction() as session:
                    jobs = job_rows.active_jobs_for_node(session, node.node_id)
                    challenges = challenge_rows.unsent_for_node(session, node.node_id)
                for job in self._unsent(jobs, sent):
                    yield job
                for challenge in challenges:  # its clock starts as it is handed to the stream
                    with self._core.db.transaction(durable=False) as session:
                        taken = challenge_rows.mark_sent(session, challenge.challenge_id, self._core.clock.now_ms())
                    if taken:
                        yield challenge
                yield Wait(topic, seen, self._core.poll_interval_s())

    @staticmethod
    def _unsent(jobs: list[JobRecord], sent: set[str]) -> Iterator[JobRecord]:
        for job in jobs:
            if job.status is JobStatus.ASSIGNED and job.job_id not in sent:
                sent.add(job.job_id)
                log.debug("job %s sent to its node at %d", job.job_id, time.time_ns() // 10**6)
                hop_trace.job_hop(job.job_id, "sent to its node")
                yield job

    def accept_tokens(self, node: NodeRecord, job_id: str, chunk: TokenChunk,
                      prompt_tokens: int = 0, partial: SignedReceipt | None = None,
                      attempt: int = 0) -> bool:
        # Not durable: a chunk lost to a power cut is only charged for less, and every
        # transaction that moves money on its count (cancel, receipt) commits durably.
        with self._core.db.transaction(durable=False) as session:
            stored = results.accept_tokens(session, node, job_id, chunk, self._core.clock.now_ms(),
                                           prompt_tokens, partial, attempt)
        if stored:  # committed: the job's live readers may have it now
            if chunk.first_index == 0:
                hop_trace.job_hop(job_id, "first chunk stored")
                log.debug("job %s first chunk stored at %d", job_id, time.time_ns() // 10**6)
            self._core.live_chunks.publish(job_id, [chunk])
        self._core.notifier.notify(job_topic(job_id))
        return stored

    def accept_receipt(self, node: NodeRecord, job_id: str, body: bytes,
                       signature: bytes, attempt: int = 0) -> results.AcceptedResult:
        context = self._core.check_context()
        with self._core.db.transaction() as session:
            result = results.accept_receipt(session, node, job_id, body, signature,
                                            self._core.clock.now_ms(), context, attempt)
        self._core.fleet.note_changed([node.node_id])
        log.info("job %s completed on %s; %d base units held for its operator (check: %s)",
                 job_id, node.node_id, result.credited_base_units, result.check_status.value)
        self._core.notifier.notify(job_topic(job_id), VERIFICATION_TOPIC)
        self._core.record_ended([job_id])
        self._core.run_scheduler()
        return result

    def accept_failure(self, node: NodeRecord, job_id: str, reason: str,
                       error_code: str | None = None, partial: SignedReceipt | None = None,
                       attempt: int = 0) -> None:
        with self._core.db.transaction() as session:
            results.accept_failure(session, node, job_id, reason, self._core.clock.now_ms(),
                                   self._core.check_context(), error_code, partial, attempt)
        self._core.fleet.note_changed([node.node_id])
        log.warning("job %s failed on %s: %s", job_id, node.node_id, reason)
        self._core.notifier.notify(job_topic(job_id))
        self._core.record_ended([job_id])
        self._core.run_scheduler()

    def reap_offline(self) -> list[str]:
        """Hand back the jobs of nodes whose heartbeats stopped.

        A lease, not a guess: a node is gone only once the offline limit has passed since its
        last heartbeat and since this coordinator started, so after a restart every node has
        the full limit to reconnect, and a node that does keeps its jobs."""
        now = self._core.clock.now_ms()
        offline_after = self._core.config.node_offline_after_ms
        if now - self._core.started_at_ms <= offline_after:
            return []  # the restart grace: nobody can have missed a heartbeat to this process
        touched: list[str] = []
        with self._core.db.transaction() as session:
            reports.prune_heartbeats_now_and_then(session, now)
            # Only silent nodes that hold jobs: a silent node is visited once, not every pass, so
            # a stranger's thousand idle sessions do not hold the write lock from honest heartbeats.
            for node_id in job_rows.silent_nodes_holding_jobs(session, now - offline_after):
                touched += handback.hand_back_jobs(session, node_id, "heartbeats stopped", now,
                                                  self._core.check_context())
            expired = node_rows.expire_silent(
                session, now - self._core.config.registration_limits.node_expire_after_ms,
                NODES_EXPIRED_PER_PASS_MAX)
        if expired:
            self._core.fleet.note_changed(expired)
            log.info("%d silent nodes expired (marked left)", len(expired))
        if touched:
            self._core.notifier.notify(*(job_topic(j) for j in touched))
            self._core.record_ended(touched)
            self._core.run_scheduler()
        return touched
