"""A consumer's jobs: authenticate, submit (and place at once when a Mac is free), read, stream, cancel.

Each call is one transaction; wake-ups follow the commit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from contracts import hop_trace
from contracts.ids import JobId
from coordinator.errors import (
    AlreadyDone,
    DatabaseUnavailable,
    InvalidRequest,
    NoCapacityNow,
    NotFound,
    UnknownModel,
    Unplaceable,
)
from coordinator.jobs import ending, submission
from coordinator.live.chunks import LiveReader
from coordinator.live.notifier import Wait, job_topic, node_topic, on_this_thread
from coordinator.metrics.names import STREAM_CONSUMER
from coordinator.model import (
    ERROR_CANCELLED,
    ERROR_NO_CAPACITY,
    ERROR_STOP_SEQUENCE,
    TERMINAL_STATUSES,
    JobRecord,
    JobStatus,
    TokenChunk,
)
from coordinator.money import api_keys, job_money
from coordinator.money.api_keys import Caller
from coordinator.placement.candidates import JobRequest
from coordinator.placement.decision import Placement
from coordinator.placement.decision import Unplaceable as PlacementRefusal
from coordinator.placement.planner import place
from coordinator.scheduling import capacity, scheduler
from coordinator.service.core import ServiceCore
from coordinator.storage import job_rows, node_rows

log = logging.getLogger(__name__)

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


class _RetriedFirst(Exception):
    """A retry of the same request stored its job first: this submit rolls back and answers with it."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id


STREAM_OUTAGE_S_MAX = 120.0  # how long a job's reader waits out a database outage


class _Outage:
    """A stream reader's wait through a database outage: backing off, with a deadline."""

    def __init__(self, delay_s_min: float) -> None:
        self._delay_s_min = max(0.05, delay_s_min)
        self.reset()

    def reset(self) -> None:
        self._delay_s = self._delay_s_min
        self._deadline: float | None = None

    def next_wait_s(self) -> float:
        """How long to wait before reading again; raises once the outage outlasts its limit."""
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + STREAM_OUTAGE_S_MAX
        if now >= self._deadline:
            raise DatabaseUnavailable(
                f"the coordinator's database has been unavailable for {STREAM_OUTAGE_S_MAX:g} s; "
                "read the job again later", retry_after_s=5)
        wait_s = min(self._delay_s, self._deadline - now)
        self._delay_s = min(self._delay_s * 2, 5.0)
        return wait_s


class ConsumerJobs:
    """What API consumers ask of the network, behind the gRPC and HTTP edges."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core
        self._known_keys = api_keys.KnownKeys()

    def authenticate_consumer(self, api_key: str | None, anonymous_name: str = "", *,
                              to_submit: bool = False) -> Caller:
        """The caller behind a request: its key's consumer, or anonymous when allowed and keyless.

        to_submit: the caller is about to submit, so a key seen before is known without a
        read (submit_job checks its revocation under the key's lock)."""
        if not api_key and self._core.config.allow_anonymous:
            return api_keys.anonymous_caller(anonymous_name)
        if to_submit:
            key = self._known_keys.authenticate(self._core.db.read_transaction, api_key)
        else:
            with self._core.db.read_transaction() as session:
                key = api_keys.authenticate(session, api_key)
        return Caller(key.consumer_id, key)

    def chat_features(self, model_id: str) -> tuple[str, ...]:
        """What the model's chat template does (tools, thinking), as the last submit's pass read it."""
        spec = self._core.fleet.last_catalog().get(model_id)
        return spec.chat_features if spec is not None else ()

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
                subscribed.append((stack.enter_context(self._core.live_chunks.subscribe(job_id)),
                                   self._core.notifier.version(job_topic(job_id))))

            view = self.submit(sub, caller, on_placed=subscribe, durable=durable)
            if not subscribed:
                return view, None
            close = stack.pop_all().close
        return view, Watch(view.job, *subscribed[0], close)

    def submit(self, sub: submission.Submission, caller: Caller | None = None, *,
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
        now = self._core.clock.now_ms()
        placed = False
        chips: tuple[str, ...] = ()
        # The scheduler's live index, not a read of the whole fleet: a submit's cost must not
        # grow with the number of Macs (60 ms at 1,000 Macs when it read them all).
        try:
            with self._core.db.transaction(durable=durable) as session:
                if key is not None:
                    job_money.lock_before_key(session)
                    api_keys.admit(session, key, now)
                    hop_trace.hop("key admitted")
                with self._core.fleet.current(session, now):
                    job, created = self._prepare(session, sub, now)
                    if created:
                        job, placed = self._store_new(session, job, key, place_now, now)
                        if placed:
                            chips = self._core.fleet.chips(job.node_ids)
                            if on_placed is not None:
                                on_placed(job.job_id)
        except _RetriedFirst as first:
            return self.get(first.job_id)  # nothing of this submit was kept
        hop_trace.bind(job.job_id)
        if placed:
            hop_trace.job_hop(job.job_id, "committed")
            # The node hears first, with no database read on its way: the consumer waits for it.
            self._core.job_assigned(job)
            log.debug("job %s placed at submit, committed at %d", job.job_id, time.time_ns() // 10**6)
            log.info("job %s queued for model %s and assigned to %s", job.job_id, job.model_id,
                     ", ".join(job.node_ids))
            # Known without a read: it just left the queue and has streamed nothing yet.
            return JobView(job, 0, chips, "", b"")
        if created:
            log.info("job %s queued for model %s", job.job_id, job.model_id)
            self._core.run_scheduler()
        return self.get(job.job_id)

    def _prepare(self, session, sub: submission.Submission,  # type: ignore[no-untyped-def]
                 now: int) -> tuple[JobRecord, bool]:
        """submission.prepare over the live catalog; a model it does not know is looked for in
        registrations the index has not read before the job is refused."""
        try:
            return submission.prepare(session, sub, self._core.config, now, self._core.fleet.catalog())
        except UnknownModel:
            if not self._core.fleet.catch_up_on_registrations(session, now):
                raise
        return submission.prepare(session, sub, self._core.config, now, self._core.fleet.catalog())

    def _store_new(self, session, job: JobRecord, key: api_keys.ApiKey | None,  # type: ignore[no-untyped-def]
                   place_now: bool, now: int) -> tuple[JobRecord, bool]:
        """Decide where the new job goes and what it reserves, then write its row once; returns
        (the job as stored, whether it was placed)."""
        request = scheduler.job_request(job, self._core.fleet.catalog())
        assert request is not None, "prepare checked the model is served"
        decision = self._refuse_unrunnable(session, request, place_now, now)
        hop_trace.hop("placed")
        if key is not None:
            job = dataclasses.replace(job, reserved_base_units=job_money.max_charge(job, request.model))
        assigned = None if decision is None else scheduler.assign_new_job(
            session, job, decision, self._core.fleet, now, self._core.config)
        stored = assigned or job
        if not submission.record(session, stored):
            raise _RetriedFirst(job.job_id)
        if key is not None and job.reserved_base_units > 0:
            job_money.reserve(session, stored, key)
            hop_trace.hop("balance reserved")
        if assigned is None or decision is None:
            return stored, False
        scheduler.record_assignment(session, assigned, decision, self._core.fleet)
        return assigned, True

    def _refuse_unrunnable(self, session, request: JobRequest,  # type: ignore[no-untyped-def]
                           place_now: bool, now: int) -> Placement | None:
        """The placement a Mac could take now, None when it must wait; raises if it never can."""
        decision = self._place_over_index(session, request, now)
        self._core.metrics.placement_decided(decision)
        if not isinstance(decision, PlacementRefusal):
            return decision
        if decision.permanent:
            raise Unplaceable(f"no Mac or pod in the network can run this job: {decision.reason}")
        if place_now:
            raise NoCapacityNow(f"no Mac can take this job right now ({decision.reason}); "
                                "retry after the Retry-After seconds",
                                retry_after_s=self._core.config.busy_retry_after_s)
        return None

    def _place_over_index(self, session, request: JobRequest,  # type: ignore[no-untyped-def]
                          now: int) -> Placement | PlacementRefusal:
        """place() over the live index (within fleet.current); before a refusal for good, the
        index reads any registration it has missed and the planner is asked again."""
        decision = place(request, self._core.fleet.index)
        if isinstance(decision, PlacementRefusal) and decision.permanent and \
                self._core.fleet.catch_up_on_registrations(session, now):
            decision = place(request, self._core.fleet.index)
        return decision

    def _own_job(self, session, job_id: str, caller: Caller | None) -> JobRecord:  # type: ignore[no-untyped-def]
        """The job, if the caller may see it: a consumer sees only its own jobs."""
        job = job_rows.job_by_id(session, job_id)
        if job is None or (caller is not None and job.consumer_id != caller.consumer_id):
            raise NotFound(f"job {job_id} does not exist")
        return job

    def get(self, job_id: str, caller: Caller | None = None) -> JobView:
        with self._core.db.read_transaction() as session:
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

    def cancel(self, job_id: str, caller: Caller | None = None, *,
                   code: str = ERROR_CANCELLED) -> JobView:
        """End the job now; the consumer is charged for the tokens it streamed, and no more.

        code says why: the consumer cancelled (or left), a stop sequence, or no Mac in time.
        """
        now = self._core.clock.now_ms()
        error = _END_REASONS[code]
        with self._core.db.transaction() as session:
            job = self._own_job(session, job_id, caller)
            if job.status in TERMINAL_STATUSES:
                raise AlreadyDone(f"job {job_id} is already {job.status.value}")
            if ending.fail_job(session, job_id, now, error=error, error_code=code,
                               context=self._core.check_context()) is None:
                raise AlreadyDone(f"job {job_id} ended meanwhile")
            freed = job_rows.release_assignments(session, job_id)
        self._core.notifier.notify(job_topic(job_id), *(node_topic(n) for n in freed))
        self._core.record_ended([job_id])
        self._core.run_scheduler()
        return self.get(job_id)

    def wait_until_placed(self, job_id: str, caller: Caller | None, timeout_s: float) -> JobView:
        """The job once it leaves the queue, or still queued after timeout_s."""
        deadline = time.monotonic() + timeout_s
        topic = job_topic(job_id)
        while True:
            seen = self._core.notifier.version(topic)
            view = self.get(job_id, caller)
            remaining = deadline - time.monotonic()
            if view.job.status is not JobStatus.QUEUED or remaining <= 0:
                return view
            self._core.notifier.wait(topic, seen, min(remaining, self._core.poll_interval_s()))

    def stream(self, job_id: str, is_active: Callable[[], bool],
               caller: Caller | None = None,
               watch: Watch | None = None) -> Iterator[TokenChunk | JobView]:
        """Every token chunk from the first, as stored, then the final job view; waits on this thread."""
        return on_this_thread(self._core.notifier, self.stream_steps(job_id, caller, watch), is_active)

    def stream_steps(self, job_id: str, caller: Caller | None = None,
                     watch: Watch | None = None) -> Iterator[TokenChunk | JobView | Wait]:
        """stream's steps: chunks and the final view, with a Wait wherever it would wait."""
        with self._core.metrics.stream_open(STREAM_CONSUMER):
            yield from self._stream_steps(job_id, caller, watch)

    def _stream_steps(self, job_id: str, caller: Caller | None,
                      watch: Watch | None) -> Iterator[TokenChunk | JobView | Wait]:
        """Every token chunk from the first, as stored, then the final job view.

        Chunks this process stores come straight from the node's stream once committed;
        the database is read first (it checks the caller), on any gap and for the job's end.
        With the submitter's watch (closed here) nothing can precede it: no first read.
        """
        next_index = delivered_chars = 0
        outage = _Outage(self._core.config.stream_poll_interval_s)
        topic = job_topic(job_id)
        read_database = watch is None
        # Until the first wait, a watch holds all there is: it subscribed before the commit.
        nothing_unread = watch is not None
        job = watch.job if watch is not None else None
        subscription = (contextlib.closing(watch) if watch is not None
                        else self._core.live_chunks.subscribe(job_id))
        with subscription as live:
            while True:
                # A watch's first wait counts from its subscription: a wake-up since is not missed.
                seen = watch.version if nothing_unread and watch else self._core.notifier.version(topic)
                chunks = [] if read_database else live.take(next_index)
                if not chunks and not nothing_unread:
                    try:
                        with self._core.db.read_transaction() as session:
                            job = self._own_job(session, job_id, caller)
                            # Not token_chunks alone: after a mid-stream hand-back chunks may
                            # straddle next_index.
                            chunks = job_rows.chunks_for_reader(session, job_id, next_index,
                                                                delivered_chars)
                    except DatabaseUnavailable:
                        # The reader outlives a database outage (up to its limit): the job runs
                        # on, and its tokens wait in the database or the live hand-off.
                        yield Wait(topic, seen, outage.next_wait_s())
                        read_database = job is None
                        continue
                    outage.reset()
                read_database = nothing_unread = False
                for chunk in chunks:
                    next_index = chunk.first_index + len(chunk.token_ids)
                    delivered_chars += len(chunk.text)
                    yield chunk
                assert job is not None
                if job.status in TERMINAL_STATUSES:
                    yield self.get(job_id, caller)
                    return
                yield Wait(topic, seen, self._core.poll_interval_s())

    def explain_placement(self, model_id: str, context_tokens: int,
                          min_decode_tokens_per_s: float) -> Placement | PlacementRefusal:
        """Where a job would go now and why; nothing is placed or written."""
        if context_tokens <= 0 or min_decode_tokens_per_s < 0:
            raise InvalidRequest("context_tokens must be positive and min_decode_tokens_per_s "
                                 "zero or positive")
        now = self._core.clock.now_ms()
        # Over the live index, as a submit decides: reading and indexing the whole fleet per dry
        # run took 60 ms at 1,000 Macs (the index build alone 4-5 s at 100,000). It writes nothing,
        # so it reads as GET /v1/models does: no write lock, submits go on meanwhile.
        with self._core.db.read_transaction() as session, self._core.fleet.current(session, now):
            spec = self._core.fleet.catalog().get(model_id)
            if spec is None and self._core.fleet.catch_up_on_registrations(session, now):
                spec = self._core.fleet.catalog().get(model_id)
            if spec is None:
                raise NotFound(f"model {model_id!r} is not served by any node")
            if context_tokens > spec.max_context_tokens:
                raise InvalidRequest(f"context_tokens {context_tokens} is over {model_id}'s context "
                                     f"of {spec.max_context_tokens}")
            request = JobRequest(job_id=JobId("dry-run"), model=spec, context_tokens=context_tokens,
                                 min_decode_tokens_per_s=min_decode_tokens_per_s)
            return self._place_over_index(session, request, now)

    def capacity(self) -> list[capacity.ModelCapacity]:
        """Over the live index: no read of the whole fleet per request, and no write lock."""
        with self._core.db.read_transaction() as session, self._core.fleet.current(session, self._core.clock.now_ms()) as index:
            return capacity.model_capacity(index, self._core.fleet.catalog(), self._core.fleet.first_registered_ms())

    def cost(self, job_id: str, caller: Caller | None = None) -> job_money.JobCost:
        with self._core.db.transaction() as session:
            return job_money.job_cost(session, self._own_job(session, job_id, caller))
