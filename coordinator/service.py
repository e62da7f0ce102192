"""The coordinator's use cases, one transaction each, with wake-ups after commit.

The gRPC servicers translate protobuf to these calls and back; nothing here
knows about gRPC.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from contracts import hop_trace, pods
from contracts.ids import JobId, NodeId
from coordinator.clock import Clock
from coordinator.config import CoordinatorConfig
from coordinator.errors import (
    AlreadyDone,
    InvalidRequest,
    NoCapacityNow,
    NotFound,
    UnknownModel,
    Unplaceable,
)
from coordinator.jobs import handback, results, submission
from coordinator.live.assignments import LiveAssignments
from coordinator.live.chunks import LiveChunks, LiveReader
from coordinator.live.notifier import Notifier, job_topic, node_topic
from coordinator.model import (
    ERROR_CANCELLED,
    ERROR_NO_CAPACITY,
    ERROR_STOP_SEQUENCE,
    TERMINAL_STATUSES,
    JobRecord,
    JobStatus,
    NodeRecord,
    TokenChunk,
)
from coordinator.money import api_keys, billing
from coordinator.money.api_keys import Caller
from coordinator.nodes import registry, reports
from coordinator.placement.candidates import JobRequest
from coordinator.placement.decision import Placement
from coordinator.placement.decision import Unplaceable as PlacementRefusal
from coordinator.placement.planner import place
from coordinator.scheduling import capacity, scheduler
from coordinator.scheduling.live_fleet import LiveFleet
from coordinator.storage import job_rows, node_rows
from coordinator.storage.database import Database
from coordinator.verification import outcomes as check_outcomes
from coordinator.verification import store as check_store
from coordinator.verification.replay_check import Replayer
from coordinator.verification.worker import VerifierWorker

log = logging.getLogger(__name__)

VERIFICATION_TOPIC = "verification"  # a check is waiting for the verifier worker


@dataclass(frozen=True)
class JobView:
    job: JobRecord
    queue_position: int
    chips: tuple[str, ...]
    text: str
    signer_public_key: bytes
    streamed_tokens: int = 0


_END_REASONS = {  # why cancel_job ended a job, by its error code
    ERROR_CANCELLED: "cancelled by the consumer",
    ERROR_STOP_SEQUENCE: "stopped at a stop sequence",
    ERROR_NO_CAPACITY: "no Mac could take it within the admission wait",
}


@dataclass
class Watch:
    """A placed job's live chunks, subscribed before the job committed (submit_watched)."""

    job: JobRecord  # as submitted
    live: LiveReader
    version: int  # the job topic's notifier version when it subscribed
    close: Callable[[], None]

    def take(self, next_index: int) -> list[TokenChunk]:
        return self.live.take(next_index)


class CoordinatorService:
    def __init__(self, db: Database, clock: Clock, config: CoordinatorConfig,
                 notifier: Notifier | None = None, draws: random.Random | None = None) -> None:
        self.db, self.clock, self.config = db, clock, config
        self.notifier = notifier or Notifier()
        self.live_chunks = LiveChunks()
        self.live_assignments = LiveAssignments()
        self.verifier: VerifierWorker | None = None
        self.fleet = LiveFleet(config)  # the scheduler's placement index, kept across passes
        self._known_keys = api_keys.KnownKeys()
        # Which jobs get checked: from the OS's randomness, so no node can predict it.
        self._draws = draws or random.SystemRandom()

    # --- consumers ---------------------------------------------------------

    def authenticate_consumer(self, api_key: str | None, anonymous_name: str = "", *,
                              to_submit: bool = False) -> Caller:
        """The caller behind a request: its key's consumer, or anonymous when allowed and keyless.

        to_submit: the caller is about to submit, so a key seen before is known without a
        read (submit_job checks its revocation under the key's lock)."""
        if not api_key and self.config.allow_anonymous:
            return api_keys.anonymous_caller(anonymous_name)
        if to_submit:
            key = self._known_keys.authenticate(self.db.read_transaction, api_key)
        else:
            with self.db.read_transaction() as session:
                key = api_keys.authenticate(session, api_key)
        return Caller(key.consumer_id, key)

    def submit_watched(self, sub: submission.Submission, caller: Caller | None = None, *,
                       durable: bool = True) -> tuple[JobView, Watch | None]:
        """submit_job, with a Watch on the job's chunks when it was placed at once.

        The watch subscribes inside the submit transaction, before any chunk can be
        stored: stream_job then starts without reading the database. Close it (or hand
        it to stream_job, which does) once done.
        """
        with contextlib.ExitStack() as stack:
            subscribed: list[tuple[LiveReader, int]] = []

            def subscribe(job_id: str) -> None:
                subscribed.append((stack.enter_context(self.live_chunks.subscribe(job_id)),
                                   self.notifier.version(job_topic(job_id))))

            view = self.submit_job(sub, caller, on_placed=subscribe, durable=durable)
            if not subscribed:
                return view, None
            close = stack.pop_all().close
        return view, Watch(view.job, *subscribed[0], close)

    def submit_job(self, sub: submission.Submission, caller: Caller | None = None, *,
                   place_now: bool = False,
                   on_placed: Callable[[str], None] | None = None,
                   durable: bool = True) -> JobView:
        """Queue a job; with a keyed caller, check its limits and reserve its maximum charge.

        A new job goes to a Mac in the same transaction when one is free and no older
        job waits. place_now refuses (NoCapacityNow) instead of queueing when no Mac can
        take it now. Any refusal rolls the whole transaction back: no job, no reservation.
        on_placed(job_id) runs in the transaction once the job is placed, before it commits.
        durable=False: the commit does not wait for the disk; the caller calls
        db.make_durable() before anyone hears of the job.
        """
        assert caller is None or sub.consumer_id == caller.consumer_id
        key = caller.key if caller is not None else None
        now = self.clock.now_ms()
        placed = False
        chips: tuple[str, ...] = ()
        # The scheduler's live index, not a read of the whole fleet: a submit's cost must not
        # grow with the number of Macs (60 ms at 1,000 Macs when it read them all).
        with self.db.transaction(durable=durable) as session:
            if key is not None:
                billing.lock_before_key(session)
                api_keys.admit(session, key, now)
                hop_trace.hop("key admitted")
            with self.fleet.current(session, now):
                job, created = self._submit_to_queue(session, sub, now)
                if created:
                    request = scheduler.job_request(job, self.fleet.catalog())
                    assert request is not None, "submit checked the model is served"
                    decision = self._refuse_unrunnable(session, request, place_now, now)
                    hop_trace.hop("placed")
                    if key is not None:
                        job = dataclasses.replace(job, reserved_base_units=billing.reserve(
                            session, job, request.model, key))
                        hop_trace.hop("balance reserved")
                    assigned = None if decision is None else scheduler.place_submitted(
                        session, job, decision, self.fleet, now, self.config)
                    if assigned:
                        job, placed = assigned, True
                        chips = self.fleet.chips(job.node_ids)
                        if on_placed is not None:
                            on_placed(job.job_id)
        hop_trace.bind(job.job_id)
        if placed:
            hop_trace.job_hop(job.job_id, "committed")
            # The node hears first, with no database read on its way: the consumer waits for it.
            self.live_assignments.publish(job)
            self.notifier.notify(job_topic(job.job_id), *(node_topic(n) for n in job.node_ids))
            log.debug("job %s placed at submit, committed at %d", job.job_id, time.time_ns() // 10**6)
            log.info("job %s queued for model %s and assigned to %s", job.job_id, job.model_id,
                     ", ".join(job.node_ids))
            # Known without a read: it just left the queue and has streamed nothing yet.
            return JobView(job, 0, chips, "", b"")
        if created:
            log.info("job %s queued for model %s", job.job_id, job.model_id)
            self.run_scheduler()
        return self.get_job(job.job_id)

    def _submit_to_queue(self, session, sub: submission.Submission,  # type: ignore[no-untyped-def]
                         now: int) -> tuple[JobRecord, bool]:
        """submission.submit over the live catalog; a model it does not know is looked for in
        registrations the index has not read before the job is refused."""
        try:
            return submission.submit(session, sub, self.config, now, self.fleet.catalog())
        except UnknownModel:
            if not self.fleet.catch_up_on_registrations(session, now):
                raise
        return submission.submit(session, sub, self.config, now, self.fleet.catalog())

    def _refuse_unrunnable(self, session, request: JobRequest,  # type: ignore[no-untyped-def]
                           place_now: bool, now: int) -> Placement | None:
        """The placement a Mac could take now, None when it must wait; raises if it never can."""
        decision = self._place_over_index(session, request, now)
        if not isinstance(decision, PlacementRefusal):
            return decision
        if decision.permanent:
            raise Unplaceable(f"no Mac or pod in the network can run this job: {decision.reason}")
        if place_now:
            raise NoCapacityNow(f"no Mac can take this job right now ({decision.reason}); "
                                "retry after the Retry-After seconds",
                                retry_after_s=self.config.busy_retry_after_s)
        return None

    def _place_over_index(self, session, request: JobRequest,  # type: ignore[no-untyped-def]
                          now: int) -> Placement | PlacementRefusal:
        """place() over the live index (within fleet.current); before a refusal for good, the
        index reads any registration it has missed and the planner is asked again."""
        decision = place(request, self.fleet.index)
        if isinstance(decision, PlacementRefusal) and decision.permanent and \
                self.fleet.catch_up_on_registrations(session, now):
            decision = place(request, self.fleet.index)
        return decision

    def _own_job(self, session, job_id: str, caller: Caller | None) -> JobRecord:  # type: ignore[no-untyped-def]
        """The job, if the caller may see it: a consumer sees only its own jobs."""
        job = job_rows.job_by_id(session, job_id)
        if job is None or (caller is not None and job.consumer_id != caller.consumer_id):
            raise NotFound(f"job {job_id} does not exist")
        return job

    def get_job(self, job_id: str, caller: Caller | None = None) -> JobView:
        with self.db.read_transaction() as session:
            return self._view(session, self._own_job(session, job_id, caller))

    def _view(self, session, job: JobRecord | None) -> JobView:  # type: ignore[no-untyped-def]
        assert job is not None
        nodes = [node for node_id in job.node_ids
                 if (node := node_rows.node_by_id(session, node_id)) is not None]
        chunks = job_rows.token_chunks(session, job.job_id)
        text = "".join(chunk.text for chunk in chunks)
        signer = nodes[0].public_key if job.receipt_body is not None and nodes else b""
        return JobView(job, job_rows.queue_position(session, job),
                       tuple(n.hardware.chip for n in nodes), text, signer,
                       sum(len(chunk.token_ids) for chunk in chunks))

    def cancel_job(self, job_id: str, caller: Caller | None = None, *,
                   code: str = ERROR_CANCELLED) -> JobView:
        """End the job now; the consumer is charged for the tokens it streamed, and no more.

        code says why: the consumer cancelled (or left), a stop sequence, or no Mac in time.
        """
        now = self.clock.now_ms()
        error = _END_REASONS[code]
        with self.db.transaction() as session:
            job = self._own_job(session, job_id, caller)
            if job.status in TERMINAL_STATUSES:
                raise AlreadyDone(f"job {job_id} is already {job.status.value}")
            moved = job_rows.transition_job(
                session, job_id, frozenset({job.status}), status=JobStatus.FAILED,
                error=error, error_code=code, finished_at_ms=now)
            freed = job_rows.release_assignments(session, job_id)
            if moved:
                billing.close_job(session, job_rows.job_by_id(session, job_id), now)  # type: ignore[arg-type]
        self.notifier.notify(job_topic(job_id), *(node_topic(n) for n in freed))
        self.run_scheduler()
        return self.get_job(job_id)

    def wait_until_placed(self, job_id: str, caller: Caller | None, timeout_s: float) -> JobView:
        """The job once it leaves the queue, or still queued after timeout_s."""
        deadline = time.monotonic() + timeout_s
        topic = job_topic(job_id)
        while True:
            seen = self.notifier.version(topic)
            view = self.get_job(job_id, caller)
            remaining = deadline - time.monotonic()
            if view.job.status is not JobStatus.QUEUED or remaining <= 0:
                return view
            self.notifier.wait(topic, seen, min(remaining, self.config.stream_poll_interval_s))

    def stream_job(self, job_id: str, is_active: Callable[[], bool],
                   caller: Caller | None = None,
                   watch: Watch | None = None) -> Iterator[TokenChunk | JobView]:
        """Every token chunk from the first, as stored, then the final job view.

        Chunks this process stores come straight from the node's stream once committed;
        the database is read first (it checks the caller), on any gap and for the job's end.
        With the submitter's watch (closed here) nothing can precede it: no first read.
        """
        next_index = delivered_chars = 0
        topic = job_topic(job_id)
        read_database = watch is None
        # Until the first wait, a watch holds all there is: it subscribed before the commit.
        nothing_unread = watch is not None
        job = watch.job if watch is not None else None
        subscription = (contextlib.closing(watch) if watch is not None
                        else self.live_chunks.subscribe(job_id))
        with subscription as live:
            while is_active():
                # A watch's first wait counts from its subscription: a wake-up since is not missed.
                seen = watch.version if nothing_unread and watch else self.notifier.version(topic)
                chunks = [] if read_database else live.take(next_index)
                if not chunks and not nothing_unread:
                    with self.db.read_transaction() as session:
                        job = self._own_job(session, job_id, caller)
                        # Not token_chunks alone: after a mid-stream hand-back chunks may
                        # straddle next_index.
                        chunks = job_rows.chunks_for_reader(session, job_id, next_index,
                                                                delivered_chars)
                read_database = nothing_unread = False
                for chunk in chunks:
                    next_index = chunk.first_index + len(chunk.token_ids)
                    delivered_chars += len(chunk.text)
                    yield chunk
                assert job is not None
                if job.status in TERMINAL_STATUSES:
                    yield self.get_job(job_id, caller)
                    return
                self.notifier.wait(topic, seen, self.config.stream_poll_interval_s)

    def explain_placement(self, model_id: str, context_tokens: int,
                          min_decode_tokens_per_s: float) -> Placement | PlacementRefusal:
        """Where a job would go now and why; nothing is placed or written."""
        if context_tokens <= 0 or min_decode_tokens_per_s < 0:
            raise InvalidRequest("context_tokens must be positive and min_decode_tokens_per_s "
                                 "zero or positive")
        now = self.clock.now_ms()
        # Over the live index, as a submit decides: reading and indexing the whole fleet per dry
        # run took 60 ms at 1,000 Macs (the index build alone 4-5 s at 100,000). It writes nothing,
        # so it reads as GET /v1/models does: no write lock, submits go on meanwhile.
        with self.db.read_transaction() as session, self.fleet.current(session, now):
            spec = self.fleet.catalog().get(model_id)
            if spec is None and self.fleet.catch_up_on_registrations(session, now):
                spec = self.fleet.catalog().get(model_id)
            if spec is None:
                raise NotFound(f"model {model_id!r} is not served by any node")
            if context_tokens > spec.max_context_tokens:
                raise InvalidRequest(f"context_tokens {context_tokens} is over {model_id}'s context "
                                     f"of {spec.max_context_tokens}")
            request = JobRequest(job_id=JobId("dry-run"), model=spec, context_tokens=context_tokens,
                                 min_decode_tokens_per_s=min_decode_tokens_per_s)
            return self._place_over_index(session, request, now)

    # --- nodes -------------------------------------------------------------

    def register_node(self, registration: registry.Registration) -> tuple[NodeId, str]:
        with self.db.transaction() as session:
            node_id, token = registry.register(session, registration, self.clock.now_ms())
        self.fleet.note_changed([node_id], pods=registration.pod is not None)
        log.info("node %s registered (%s, %s)", node_id, registration.hardware.chip,
                 registration.operator_id)
        self.run_scheduler()
        return node_id, token

    def authenticate(self, token: str | None) -> NodeRecord:
        with self.db.read_transaction() as session:
            return registry.authenticate(session, token)

    def heartbeat(self, node: NodeRecord, running_jobs: int,
                  report: reports.HeartbeatReport | None = None) -> int:
        now = self.clock.now_ms()
        with self.db.transaction() as session:
            reports.accept_heartbeat(
                session, node, report or reports.HeartbeatReport(running_jobs), now)
        self.fleet.note_changed([node.node_id])
        self.run_scheduler()
        return now

    def hand_back(self, node: NodeRecord, job_id: str, reason: str) -> None:
        """The node gives a job back unfinished (owner returned, leaving): place it elsewhere."""
        with self.db.transaction() as session:
            freed = reports.hand_back_job(session, node, job_id, reason, self.clock.now_ms())
        self.fleet.note_changed([node.node_id, *freed])
        self.notifier.notify(job_topic(job_id), *(node_topic(n) for n in freed))
        self.run_scheduler()

    def leave(self, node: NodeRecord, reason: str) -> int:
        """Deregister: hand back the node's jobs and stop placing on it; returns jobs handed back."""
        with self.db.transaction() as session:
            touched = reports.leave(session, node, reason, self.clock.now_ms())
        self.fleet.note_changed([node.node_id])
        log.info("node %s left (%s); %d jobs handed back", node.node_id, reason, len(touched))
        self.notifier.notify(*(job_topic(j) for j in touched), node_topic(node.node_id))
        self.run_scheduler()
        return len(touched)

    def pod_assignment(self, job: JobRecord) -> tuple[pods.PodDeclaration, tuple[int, ...]] | None:
        """For a pod job: the pod and each member's layers, in the pod's rank order."""
        if len(job.node_ids) < 2:
            return None
        with self.db.transaction() as session:
            return node_rows.pod_assignment(session, job)

    def assignments(self, node: NodeRecord, is_active: Callable[[], bool]) -> Iterator[JobRecord]:
        """Jobs assigned to the node and not yet started, each sent once per stream."""
        sent: set[str] = set()
        topic = node_topic(node.node_id)
        with self.live_assignments.subscribe(node.node_id) as inbox:
            while is_active():
                seen = self.notifier.version(topic)
                # Jobs just committed go before the read, which finds them again (and any other).
                for job in self._unsent(inbox.take(), sent):
                    yield job
                with self.db.read_transaction() as session:
                    jobs = job_rows.active_jobs_for_node(session, node.node_id)
                for job in self._unsent(jobs, sent):
                    yield job
                self.notifier.wait(topic, seen, self.config.stream_poll_interval_s)

    @staticmethod
    def _unsent(jobs: list[JobRecord], sent: set[str]) -> Iterator[JobRecord]:
        for job in jobs:
            if job.status is JobStatus.ASSIGNED and job.job_id not in sent:
                sent.add(job.job_id)
                log.debug("job %s sent to its node at %d", job.job_id, time.time_ns() // 10**6)
                hop_trace.job_hop(job.job_id, "sent to its node")
                yield job

    def accept_tokens(self, node: NodeRecord, job_id: str, chunk: TokenChunk,
                      prompt_tokens: int = 0) -> bool:
        # Not durable: a chunk lost to a power cut is only charged for less, and every
        # transaction that moves money on its count (cancel, receipt) commits durably.
        with self.db.transaction(durable=False) as session:
            stored = results.accept_tokens(session, node, job_id, chunk, self.clock.now_ms(),
                                               prompt_tokens)
        if stored:  # committed: the job's live readers may have it now
            if chunk.first_index == 0:
                hop_trace.job_hop(job_id, "first chunk stored")
                log.debug("job %s first chunk stored at %d", job_id, time.time_ns() // 10**6)
            self.live_chunks.publish(job_id, [chunk])
        self.notifier.notify(job_topic(job_id))
        return stored

    def accept_receipt(self, node: NodeRecord, job_id: str, body: bytes,
                       signature: bytes) -> results.AcceptedResult:
        context = check_outcomes.CheckContext(
            self.config.trust, self._draws.random(),
            self.verifier.replayer.held_models() if self.verifier is not None else frozenset())
        with self.db.transaction() as session:
            result = results.accept_receipt(session, node, job_id, body, signature,
                                                self.clock.now_ms(), context)
        self.fleet.note_changed([node.node_id])
        log.info("job %s completed on %s; %d base units held for its operator (check: %s)",
                 job_id, node.node_id, result.credited_base_units, result.check_status.value)
        self.notifier.notify(job_topic(job_id), VERIFICATION_TOPIC)
        self.run_scheduler()
        return result

    # --- proof of completion -----------------------------------------------

    def attach_verifier(self, replayer: Replayer, name: str = "coordinator-verifier") -> None:
        """Replay sampled jobs with this replayer (see run_verifications)."""
        self.verifier = VerifierWorker(self.db, self.clock, replayer, self.config.trust,
                                       self.config.tolerances, name)

    def run_verifications(self) -> list[check_outcomes.VerdictOutcome]:
        """Replay the waiting checks; post, or void and re-run, each job's held credit."""
        if self.verifier is None:
            return []
        decided = self.verifier.run_once()
        self.fleet.note_changed(d.node_id for d in decided)  # trust, perhaps quarantine
        self.notifier.notify(*(job_topic(d.job_id) for d in decided))
        if any(d.rerun_job_id for d in decided):
            self.run_scheduler()
        return decided

    def release_due_credits(self) -> list[str]:
        """Post the held credits of unchecked jobs whose check window has closed."""
        with self.db.transaction() as session:
            released = check_outcomes.release_due_credits(
                session, self.clock.now_ms(), self.config.credits_released_per_pass_max)
        self.notifier.notify(*(job_topic(j) for j in released))
        return released

    def job_check(self, job_id: str) -> check_store.CheckRecord | None:
        """Whether a job was checked, how, and what happened to its credit, with the evidence."""
        with self.db.transaction() as session:
            return check_store.check_by_job(session, job_id)

    def node_checks(self, node_id: str, limit: int = 100) -> tuple[check_store.NodeTrust,
                                                                   list[check_store.CheckRecord]]:
        """A node's trust record and its latest checks, newest first."""
        with self.db.transaction() as session:
            return (check_store.node_trust_of(session, node_id),
                    check_store.checks_for_node(session, node_id, min(limit, 1000)))

    def accept_failure(self, node: NodeRecord, job_id: str, reason: str,
                       error_code: str | None = None) -> None:
        with self.db.transaction() as session:
            results.accept_failure(session, node, job_id, reason, self.clock.now_ms(),
                                       error_code)
        self.fleet.note_changed([node.node_id])
        log.warning("job %s failed on %s: %s", job_id, node.node_id, reason)
        self.notifier.notify(job_topic(job_id))
        self.run_scheduler()

    # --- housekeeping ------------------------------------------------------

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
        for job_id, node_ids in result.placed:
            log.info("job %s assigned to %s", job_id, ", ".join(node_ids))
            self.notifier.notify(job_topic(job_id), *(node_topic(n) for n in node_ids))
        self.notifier.notify(*(job_topic(j) for j in result.failed))
        return result

    def close_billing(self, job_id: str) -> bool:
        """Resolve one ended job's reservation now rather than at the next sweep."""
        with self.db.transaction() as session:
            job = job_rows.job_by_id(session, job_id)
            return job is not None and billing.close_job(session, job, self.clock.now_ms())

    def close_ended_billing(self) -> list[JobId]:
        """Resolve the reservations of jobs that ended (see coordinator.money.billing)."""
        with self.db.transaction() as session:
            return billing.close_ended_jobs(session, self.clock.now_ms())

    def model_capacity(self) -> list[capacity.ModelCapacity]:
        """Over the live index: no read of the whole fleet per request, and no write lock."""
        with self.db.read_transaction() as session, self.fleet.current(session, self.clock.now_ms()) as index:
            return capacity.model_capacity(index, self.fleet.catalog(), self.fleet.first_registered_ms())

    def job_cost(self, job_id: str, caller: Caller | None = None) -> billing.JobCost:
        with self.db.transaction() as session:
            return billing.job_cost(session, self._own_job(session, job_id, caller))

    def reap_offline_nodes(self) -> list[str]:
        """Hand back the jobs of nodes whose heartbeats stopped."""
        now = self.clock.now_ms()
        touched: list[str] = []
        with self.db.transaction() as session:
            reports.prune_heartbeats_now_and_then(session, now)
            for node in node_rows.all_nodes(session):
                if now - node.last_heartbeat_ms > self.config.node_offline_after_ms:
                    touched += handback.hand_back_jobs(session, node.node_id, "heartbeats stopped", now)
        if touched:
            self.notifier.notify(*(job_topic(j) for j in touched))
            self.run_scheduler()
        return touched
