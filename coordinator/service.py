"""The coordinator's use cases, one transaction each, with wake-ups after commit.

The gRPC servicers translate protobuf to these calls and back; nothing here
knows about gRPC.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from contracts.ids import JobId, NodeId
from coordinator import handback, job_results, node_registry, records, scheduler, submission
from coordinator import node_records, node_reports
from coordinator.catalog import model_catalog
from coordinator.clock import Clock
from coordinator.config import CoordinatorConfig
from coordinator.database import Database
from coordinator.errors import AlreadyDone, InvalidRequest, NotFound, Unplaceable
from coordinator.placement.candidates import JobRequest
from coordinator.placement.decision import Placement
from coordinator.placement.decision import Unplaceable as PlacementRefusal
from coordinator.placement.planner import place
from coordinator.notifier import Notifier, job_topic, node_topic
from coordinator.records import JobRecord, JobStatus, NodeRecord, TokenChunk

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobView:
    job: JobRecord
    queue_position: int
    chips: tuple[str, ...]
    text: str
    signer_public_key: bytes


class CoordinatorService:
    def __init__(self, db: Database, clock: Clock, config: CoordinatorConfig,
                 notifier: Notifier | None = None) -> None:
        self.db, self.clock, self.config = db, clock, config
        self.notifier = notifier or Notifier()

    # --- consumers ---------------------------------------------------------

    def submit_job(self, sub: submission.Submission) -> JobView:
        now = self.clock.now_ms()
        with self.db.transaction() as session:
            job, created = submission.submit(session, sub, self.config, now)
            if created:
                catalog = model_catalog(records.all_nodes(session))
                request = scheduler.job_request(job, catalog)
                assert request is not None, "submit checked the model is served"
                reason = scheduler.permanent_refusal(session, request, now, self.config)
                if reason is not None:
                    raise Unplaceable(f"no Mac or pod in the network can run this job: {reason}")
        if created:
            log.info("job %s queued for model %s", job.job_id, job.model_id)
            self.run_scheduler()
        return self.get_job(job.job_id)

    def get_job(self, job_id: str) -> JobView:
        with self.db.transaction() as session:
            job = records.job_by_id(session, job_id)
            if job is None:
                raise NotFound(f"job {job_id} does not exist")
            nodes = [node for node_id in job.node_ids
                     if (node := records.node_by_id(session, node_id)) is not None]
            text = "".join(chunk.text for chunk in records.token_chunks(session, job_id))
            signer = nodes[0].public_key if job.receipt_body is not None and nodes else b""
            return JobView(job, records.queue_position(session, job),
                           tuple(n.hardware.chip for n in nodes), text, signer)

    def cancel_job(self, job_id: str) -> JobView:
        now = self.clock.now_ms()
        with self.db.transaction() as session:
            job = records.job_by_id(session, job_id)
            if job is None:
                raise NotFound(f"job {job_id} does not exist")
            if job.status in records.TERMINAL_STATUSES:
                raise AlreadyDone(f"job {job_id} is already {job.status.value}")
            records.transition_job(session, job_id, frozenset({job.status}), status=JobStatus.FAILED,
                                   error="cancelled by the consumer", finished_at_ms=now)
            freed = records.release_assignments(session, job_id)
        self.notifier.notify(job_topic(job_id), *(node_topic(n) for n in freed))
        self.run_scheduler()
        return self.get_job(job_id)

    def stream_job(self, job_id: str, is_active: Callable[[], bool]) -> Iterator[TokenChunk | JobView]:
        """Every token chunk from the first, as stored, then the final job view."""
        next_index = 0
        topic = job_topic(job_id)
        while is_active():
            seen = self.notifier.version(topic)
            with self.db.transaction() as session:
                job = records.job_by_id(session, job_id)
                if job is None:
                    raise NotFound(f"job {job_id} does not exist")
                chunks = records.token_chunks(session, job_id, next_index)
            for chunk in chunks:
                next_index = chunk.first_index + len(chunk.token_ids)
                yield chunk
            if job.status in records.TERMINAL_STATUSES:
                yield self.get_job(job_id)
                return
            self.notifier.wait(topic, seen, self.config.stream_poll_interval_s)

    def explain_placement(self, model_id: str, context_tokens: int,
                          min_decode_tokens_per_s: float) -> Placement | PlacementRefusal:
        """Where a job would go now and why; nothing is placed or written."""
        if context_tokens <= 0 or min_decode_tokens_per_s < 0:
            raise InvalidRequest("context_tokens must be positive and min_decode_tokens_per_s "
                                 "zero or positive")
        with self.db.transaction() as session:
            fleet, nodes = scheduler.snapshot(session, self.clock.now_ms(), self.config)
        spec = model_catalog(nodes).get(model_id)
        if spec is None:
            raise NotFound(f"model {model_id!r} is not served by any node")
        if context_tokens > spec.max_context_tokens:
            raise InvalidRequest(f"context_tokens {context_tokens} is over {model_id}'s context "
                                 f"of {spec.max_context_tokens}")
        request = JobRequest(job_id=JobId("dry-run"), model=spec, context_tokens=context_tokens,
                             min_decode_tokens_per_s=min_decode_tokens_per_s)
        return place(request, fleet)

    # --- nodes -------------------------------------------------------------

    def register_node(self, registration: node_registry.Registration) -> tuple[NodeId, str]:
        with self.db.transaction() as session:
            node_id, token = node_registry.register(session, registration, self.clock.now_ms())
        log.info("node %s registered (%s, %s)", node_id, registration.hardware.chip,
                 registration.operator_id)
        self.run_scheduler()
        return node_id, token

    def authenticate(self, token: str | None) -> NodeRecord:
        with self.db.transaction() as session:
            return node_registry.authenticate(session, token)

    def heartbeat(self, node: NodeRecord, running_jobs: int,
                  report: node_reports.HeartbeatReport | None = None) -> int:
        now = self.clock.now_ms()
        with self.db.transaction() as session:
            node_reports.accept_heartbeat(
                session, node, report or node_reports.HeartbeatReport(running_jobs), now)
        self.run_scheduler()
        return now

    def hand_back(self, node: NodeRecord, job_id: str, reason: str) -> None:
        """The node gives a job back unfinished (owner returned, leaving): place it elsewhere."""
        with self.db.transaction() as session:
            freed = node_reports.hand_back_job(session, node, job_id, reason, self.clock.now_ms())
        self.notifier.notify(job_topic(job_id), *(node_topic(n) for n in freed))
        self.run_scheduler()

    def leave(self, node: NodeRecord, reason: str) -> int:
        """Deregister: hand back the node's jobs and stop placing on it; returns jobs handed back."""
        with self.db.transaction() as session:
            touched = node_reports.leave(session, node, reason, self.clock.now_ms())
        log.info("node %s left (%s); %d jobs handed back", node.node_id, reason, len(touched))
        self.notifier.notify(*(job_topic(j) for j in touched), node_topic(node.node_id))
        self.run_scheduler()
        return len(touched)

    def pod_assignment(self, job: JobRecord) -> tuple[node_records.PodDeclaration, tuple[int, ...]] | None:
        """For a pod job: the pod and each member's layers, in the pod's rank order."""
        if len(job.node_ids) < 2:
            return None
        with self.db.transaction() as session:
            return node_records.pod_assignment(session, job)

    def assignments(self, node: NodeRecord, is_active: Callable[[], bool]) -> Iterator[JobRecord]:
        """Jobs assigned to the node and not yet started, each sent once per stream."""
        sent: set[str] = set()
        topic = node_topic(node.node_id)
        while is_active():
            seen = self.notifier.version(topic)
            with self.db.transaction() as session:
                jobs = records.active_jobs_for_node(session, node.node_id)
            for job in jobs:
                if job.status is JobStatus.ASSIGNED and job.job_id not in sent:
                    sent.add(job.job_id)
                    yield job
            self.notifier.wait(topic, seen, self.config.stream_poll_interval_s)

    def accept_tokens(self, node: NodeRecord, job_id: str, chunk: TokenChunk) -> bool:
        with self.db.transaction() as session:
            stored = job_results.accept_tokens(session, node, job_id, chunk, self.clock.now_ms())
        self.notifier.notify(job_topic(job_id))
        return stored

    def accept_receipt(self, node: NodeRecord, job_id: str, body: bytes,
                       signature: bytes) -> job_results.AcceptedResult:
        with self.db.transaction() as session:
            result = job_results.accept_receipt(session, node, job_id, body, signature,
                                                self.clock.now_ms())
        log.info("job %s completed on %s; credited %d base units", job_id, node.node_id,
                 result.credited_base_units)
        self.notifier.notify(job_topic(job_id))
        self.run_scheduler()
        return result

    def accept_failure(self, node: NodeRecord, job_id: str, reason: str) -> None:
        with self.db.transaction() as session:
            job_results.accept_failure(session, node, job_id, reason, self.clock.now_ms())
        log.warning("job %s failed on %s: %s", job_id, node.node_id, reason)
        self.notifier.notify(job_topic(job_id))
        self.run_scheduler()

    # --- housekeeping ------------------------------------------------------

    def run_scheduler(self) -> scheduler.SchedulingPass:
        with self.db.transaction() as session:
            result = scheduler.schedule_queued(session, self.clock.now_ms(), self.config)
        for job_id, node_ids in result.placed:
            log.info("job %s assigned to %s", job_id, ", ".join(node_ids))
            self.notifier.notify(job_topic(job_id), *(node_topic(n) for n in node_ids))
        self.notifier.notify(*(job_topic(j) for j in result.failed))
        return result

    def reap_offline_nodes(self) -> list[str]:
        """Hand back the jobs of nodes whose heartbeats stopped."""
        now = self.clock.now_ms()
        touched: list[str] = []
        with self.db.transaction() as session:
            node_reports.prune_heartbeats_now_and_then(session, now)
            for node in records.all_nodes(session):
                if now - node.last_heartbeat_ms > self.config.node_offline_after_ms:
                    touched += handback.hand_back_jobs(session, node.node_id, "heartbeats stopped", now)
        if touched:
            self.notifier.notify(*(job_topic(j) for j in touched))
            self.run_scheduler()
        return touched
