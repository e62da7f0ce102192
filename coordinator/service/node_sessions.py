"""A node's session: register, heartbeats, its assignment stream, its tokens, receipts and failures.

Each call is one transaction; wake-ups follow the commit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

from contracts import hop_trace, pods
from contracts.ids import NodeId
from coordinator.jobs import handback, results
from coordinator.live import stream_reads
from coordinator.live.notifier import (
    Wait, fleet_topic, job_topic, node_challenges_topic, node_checks_topic, node_topic, on_this_thread,
)
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
from contracts.peer_checks import CheckJob
from coordinator.nodes import catalog, registry, reports
from coordinator.nodes.liveness import Beat, LivenessBook
from coordinator.nodes.connection_bindings import ConnectionBindings
from coordinator.nodes.session_cache import SessionCache
from coordinator.nodes.uptime import UptimeBook
from coordinator.errors import RateLimited, SessionUnbound
from coordinator.nodes.admission import TokenBuckets
from coordinator.nodes.challenges import ChallengeBook
from coordinator.service.checks import Checks
from coordinator.service.core import VERIFICATION_TOPIC, ServiceCore
from coordinator.storage import challenge_rows, job_rows, liveness_rows, node_rows
from coordinator.verification import peer_checks, peer_store
from coordinator.verification.peer_store import PeerCheckStatus

log = logging.getLogger(__name__)
NODES_EXPIRED_PER_PASS_MAX = 1_000  # the rest next pass
STREAM_SWEEP_NODES_MAX = 10_000  # nodes woken by one safety-net sweep
# The connection of in-process callers (tests, tools); the gRPC edge names each peer's.
IN_PROCESS = "in-process"

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
        config = core.config
        # Liveness in memory, written in batches and on change (flush_liveness); see nodes.liveness.
        self.liveness = LivenessBook(config.node_offline_after_ms)
        # A node came back on a heartbeat the edge answered from memory: wakes the liveness loop.
        self.comebacks_queued = threading.Event()
        # A signed heartbeat proves the node online until it would count as offline (the
        # epochs' heartbeat credit, server.py), so spans break on longer gaps.
        self.uptime = UptimeBook(config.node_offline_after_ms, config.node_offline_after_ms // 2)
        self.sessions = SessionCache(config.session_cache_ttl_ms)
        core.relayed_fleet_listeners.append(self.sessions.drop_nodes)
        self.bindings = ConnectionBindings()
        self._orphans_swept_at_ms: int | None = None
        self._expiry_due_ms: int | None = None  # no node can expire before (None: look now)

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

    def register(self, registration: registry.Registration,
                 connection: str = IN_PROCESS) -> tuple[NodeId, str]:
        """Register; the new session is bound to the connection it came on."""
        node_id = registry.admit(registration, self._core.clock.now_ms(), self.challenges)
        with self._core.db.transaction() as session:
            node_id, token = registry.register(session, registration, node_id, self._core.clock.now_ms(),
                                               self._core.check_context(), self._operator_buckets)
            node = node_rows.node_by_id(session, node_id)
            assert node is not None, "registered in this transaction"
            operator_id = node.operator_id  # proven by its key, not as claimed
        self.sessions.drop(node_id)
        self.sessions.put(registry.token_sha256(token), node, node.registered_at_ms)
        self.bindings.bind(registry.token_sha256(token), connection, node.registered_at_ms)
        self.liveness.adopt(node_id, node.last_heartbeat_ms, node.lending, node.warm_models)
        self._core.fleet.note_changed([node_id], pods=registration.pod is not None)
        log.info("node %s registered (%s, %s)", node_id, registration.hardware.chip, operator_id)
        if registration.region:  # before the news, so the map that hears of the Mac can place it
            for listener in list(self.region_listeners):
                listener(node_id, operator_id, registration.region)
        self._core.notifier.notify(fleet_topic(node_id))  # other coordinators index it too
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

    def _cache_ttl_ms(self) -> int:
        """Cached sessions last long while other coordinators' news of their nodes arrives
        (or there can be no other: SQLite), briefly while it may not."""
        if self._core.notifier.relayed or self._core.db.engine.dialect.name == "sqlite":
            return self._core.config.session_cache_ttl_ms
        return self._core.config.session_cache_unrelayed_ttl_ms

    def _session_node(self, token: str | None, now_ms: int) -> NodeRecord:
        """The session's node, from the session cache, else one read (then cached)."""
        token_sha256 = registry.token_sha256(token) if token else ""
        node = self.sessions.get(token_sha256, now_ms, self._cache_ttl_ms()) if token else None
        if node is None:
            with self._core.db.read_transaction() as session:
                node = registry.authenticate(session, token)
            self.sessions.put(token_sha256, node, now_ms)
        return node

    def _check_bound(self, token_sha256: str, connection: str, now_ms: int) -> None:
        if not self.bindings.bound(token_sha256, connection, now_ms):
            raise SessionUnbound(
                "this session is not bound to this connection: sign the bind nonce (trailing "
                "metadata x-mlxnet-bind-nonce-bin) with the node's key in BindSession",
                self.bindings.issue_nonce(token_sha256, connection, now_ms))

    def authenticate(self, token: str | None, connection: str = IN_PROCESS) -> NodeRecord:
        """The session's node, when the session is bound to this connection (SessionUnbound,
        with a nonce to bind it, when not)."""
        now = self._core.clock.now_ms()
        node = self._session_node(token, now)
        self._check_bound(registry.token_sha256(token or ""), connection, now)
        return node

    def bind(self, token: str | None, connection: str, nonce: bytes, signature: bytes) -> NodeRecord:
        """Bind the session to this connection, once its node's key signed the nonce issued on
        it (an empty, stale or foreign nonce: SessionUnbound with a fresh one)."""
        now = self._core.clock.now_ms()
        node = self._session_node(token, now)
        token_sha256 = registry.token_sha256(token or "")
        if not nonce or not self.bindings.redeem_nonce(token_sha256, connection, nonce, now):
            raise SessionUnbound("sign this bind nonce (trailing metadata x-mlxnet-bind-nonce-bin) "
                                 "and call BindSession again on this connection",
                                 self.bindings.issue_nonce(token_sha256, connection, now))
        registry.check_bind(node, token or "", nonce, signature)
        self.bindings.bind(token_sha256, connection, now)
        return node

    def heartbeat_in_memory(self, token: str | None, connection: str, report: reports.HeartbeatReport,
                            token_sha256: str | None = None) -> int | None:
        """The heartbeat, when it needs no database at all (the usual case): its time, so the
        gRPC edge answers on its event loop. None: call heartbeat (a session not cached, a
        signed beat of a node whose uptime this process has not read, new terms, a benchmark).
        A node that comes back is answered too: the liveness batch it wakes writes it, with one
        scheduling pass for all the comebacks it carries (see heartbeat).
        A cached session is still refused on a connection it is not bound to.
        token_sha256: the token's hash, when the caller has it (a Heartbeats stream hashes once)."""
        if not token:
            return None
        now = self._core.clock.now_ms()
        token_sha256 = token_sha256 or registry.token_sha256(token)
        node = self.sessions.get(token_sha256, now, self._cache_ttl_ms())
        if node is None:
            return None
        self._check_bound(token_sha256, connection, now)
        if report.benchmark is not None:
            return None
        if report.signature and not self.uptime.knows(node.node_id):
            return None
        beat = Beat(node.node_id, now, report.running_jobs, report.lending, report.warm_models)
        outcome = self.liveness.peek(beat)
        if outcome is None:  # first heard by this process, or back after going offline
            self.liveness.adopt(node.node_id, node.last_heartbeat_ms, node.lending, node.warm_models)
            outcome = self.liveness.peek(beat)
        if outcome is None or outcome.terms_changed:
            return None
        return self.heartbeat(node, report.running_jobs, report, now, comeback_batched=True)

    def heartbeat(self, node: NodeRecord, running_jobs: int,
                  report: reports.HeartbeatReport | None = None, now: int | None = None,
                  comeback_batched: bool = False) -> int:
        """Note the heartbeat in memory. The database hears of it now only when placement must
        (the node came back, or its terms changed), then with one scheduling pass; otherwise the
        next liveness batch writes what changed, and nothing else runs.
        comeback_batched: a comeback is left to the liveness batch, woken now, which writes every
        comeback it finds in one transaction and then runs one scheduling pass (the gRPC edge:
        a coordinator that fell behind sees thousands a second)."""
        now = self._core.clock.now_ms() if now is None else now
        report = report or reports.HeartbeatReport(running_jobs)
        reports.check_report(node, report)
        if report.signature:
            self._note_signed(node, report, now)
        if not self.liveness.knows(node.node_id):
            self.liveness.adopt(node.node_id, node.last_heartbeat_ms, node.lending, node.warm_models)
        outcome = self.liveness.beat(Beat(node.node_id, now, report.running_jobs, report.lending,
                                          report.warm_models))
        self._core.metrics.heartbeat()
        if not outcome.schedulable and report.benchmark is None:
            return now
        if comeback_batched and not outcome.terms_changed and report.benchmark is None:
            self.comebacks_queued.set()
            return now
        write = self.liveness.current_write(node.node_id)
        with self._core.db.transaction() as session:
            node_rows.record_heartbeat(session, node.node_id, write.last_heartbeat_ms,
                                       write.running_jobs, report.lending, report.warm_models)
            if report.benchmark is not None:
                reports.accept_benchmark(session, node, report.benchmark, now)
        self.liveness.stored([write])
        self._core.fleet.note_changed([node.node_id])
        self._core.run_scheduler()
        return now

    def _note_signed(self, node: NodeRecord, report: reports.HeartbeatReport, now_ms: int) -> None:
        """Verify a signed heartbeat and add it to the node's uptime span (a replay is not)."""
        heartbeat = reports.verified_heartbeat(node, report, now_ms)
        if not self.uptime.knows(node.node_id):  # first heard by this process: continue its span
            with self._core.db.read_transaction() as session:
                span, last_sent_at_ms = liveness_rows.latest_span(session, node.node_id)
            self.uptime.resume(node.node_id, span, last_sent_at_ms)
        assert report.lending is not None, "verified_heartbeat refuses a heartbeat without terms"
        if not self.uptime.record(node.node_id, report.lending.mode.value, heartbeat.sent_at_ms,
                                  now_ms, report.signature):
            log.warning("node %s re-sent a heartbeat from %d; not counted", node.node_id,
                        heartbeat.sent_at_ms)

    def sweep_streams(self) -> int:
        """The assignment streams' safety net while the relay works: wake the streams of nodes
        that hold unstarted jobs or unanswered checks, in case a relayed wake-up was lost.
        One read for the process, not one per stream; nodes without a stream here ignore it."""
        if not self._core.notifier.relayed:
            return 0  # no relay: every stream polls on its own
        with self._core.db.read_transaction() as session:
            node_ids = set(liveness_rows.nodes_with_unstarted_jobs(session, STREAM_SWEEP_NODES_MAX))
            checkers = {check.checker_node_id for check in peer_store.with_status(
                session, PeerCheckStatus.ASSIGNED, STREAM_SWEEP_NODES_MAX) if check.checker_node_id}
        node_ids.update(checkers)
        if node_ids:
            # The checks' own topic too: a stream reads check jobs when it moved (live.stream_reads).
            self._core.notifier.notify_local(*(node_checks_topic(n) for n in sorted(checkers)),
                                             *(node_topic(n) for n in sorted(node_ids)))
        return len(node_ids)

    def flush_liveness(self, everything: bool = False) -> int:
        """Write what changed since the last batch, in one transaction; rows written (none: no
        transaction). everything: every span's unwritten end too (a coordinator stopping)."""
        now = self._core.clock.now_ms()
        self.comebacks_queued.clear()  # a comeback noted after this wakes the next batch
        leases = self.liveness.due_writes(now)
        spans = self.uptime.due_writes(now, everything)
        if not leases and not spans:
            return 0
        # Spans are what Ultra seats are paid from: their batch commits durably.
        with self._core.db.transaction(durable=bool(spans)) as session:
            liveness_rows.write_leases(session, leases)
            liveness_rows.save_spans(session, spans)
        self.liveness.stored(leases)
        self.uptime.stored([span for span, _ in spans])
        # The placement index learns the new leases without re-reading the nodes.
        self._core.fleet.note_leases({w.node_id: w.last_heartbeat_ms for w in leases})
        comebacks = [w.node_id for w in leases if w.came_online]
        if comebacks:  # placement hears of them all in one pass (heartbeat, comeback_batched)
            self._core.fleet.note_changed(comebacks)
            self._core.run_scheduler()
        return len(leases) + len(spans)

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
        self.sessions.drop(node.node_id)
        self.liveness.forget(node.node_id)
        self.uptime.forget(node.node_id)
        self._core.fleet.note_changed([node.node_id])
        log.info("node %s left (%s); %d jobs handed back", node.node_id, reason, len(touched))
        self._core.notifier.notify(*(job_topic(j) for j in touched), node_topic(node.node_id),
                                   fleet_topic(node.node_id))
        self._core.run_scheduler()
        return len(touched)

    def pod_assignment(self, job: JobRecord) -> tuple[pods.PodDeclaration, tuple[int, ...]] | None:
        """For a pod job: the pod and each member's layers, in the pod's rank order."""
        if len(job.node_ids) < 2:
            return None
        with self._core.db.transaction() as session:
            return node_rows.pod_assignment(session, job)

    def assignments(self, node: NodeRecord,
                    is_active: Callable[[], bool]) -> Iterator[JobRecord | CheckJob | SpotChallenge]:
        """Jobs assigned to the node and not yet started, check jobs it is to run for its peers
        (prefill-only replays) and challenge benchmarks, each sent once; waits on this thread."""
        return on_this_thread(self._core.notifier, self.assignment_steps(node), is_active)

    def assignment_steps(self, node: NodeRecord) -> Iterator[JobRecord | CheckJob | SpotChallenge | Wait]:
        """assignments' steps, with a Wait wherever it would wait."""
        with self._core.metrics.stream_open(STREAM_NODE):
            yield from self._assignment_steps(node)

    def _assignment_steps(self, node: NodeRecord) -> Iterator[JobRecord | CheckJob | SpotChallenge | Wait]:
        sent: set[str] = set()
        notifier = self._core.notifier
        topic = node_topic(node.node_id)
        kind_topics = node_checks_topic(node.node_id), node_challenges_topic(node.node_id)
        full_read_ms = int(self._core.config.relayed_poll_interval_s * 1000)
        last: stream_reads.LastReads | None = None
        with self._core.live_assignments.subscribe(node.node_id) as inbox:
            while True:
                seen = notifier.version(topic)
                versions = stream_reads.KindVersions(*(notifier.version(t) for t in kind_topics))
                now_ms = self._core.clock.now_ms()
                reads = stream_reads.reads_due(versions, last, notifier.relayed, now_ms, full_read_ms)
                # Jobs just committed go before the read, which finds them again (and any other).
                for job in self._unsent(inbox.take(), sent):
                    yield job
                with self._core.db.read_transaction() as session:
                    jobs = job_rows.active_jobs_for_node(session, node.node_id, skip=sent)
                    checks = peer_checks.check_jobs_for(session, node.node_id, self._core.config.tolerances,
                                                        skip=sent) if reads.checks else []
                    challenges = challenge_rows.unsent_for_node(session, node.node_id) if reads.challenges else []
                last = stream_reads.after_reads(versions, last, reads, now_ms)
                for job in self._unsent(jobs, sent):
                    yield job
                for check in checks:
                    if check.check_id not in sent:
                        sent.add(check.check_id)
                        yield check
                for challenge in challenges:  # its clock starts as it is handed to the stream
                    with self._core.db.transaction(durable=False) as session:
                        taken = challenge_rows.mark_sent(session, challenge.challenge_id, self._core.clock.now_ms())
                    if taken:
                        yield challenge
                # With a working relay a stream waits for news alone (sweep_streams is the
                # safety net, one read a process); without one it polls.
                yield Wait(topic, seen, None if notifier.relayed else self._core.config.stream_poll_interval_s)

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
        if stored and chunk.first_index == 0:
            hop_trace.job_hop(job_id, "first chunk stored")
            log.debug("job %s first chunk stored at %d", job_id, time.time_ns() // 10**6)
        self._core.chunk_stored(job_id, chunk if stored else None)  # committed: readers may have it
        return stored

    def accept_token_batch(self, node: NodeRecord, entries: list[results.JobTokens]) -> results.TokenBatch:
        """A node's multiplexed message: every job's chunk in one transaction (not durable, as
        accept_tokens); a job whose chunk is refused is named in the outcome, the others stored."""
        with self._core.db.transaction(durable=False) as session:
            batch = results.accept_token_batch(session, node, entries, self._core.clock.now_ms())
        for job_id, chunk in batch.stored:
            if chunk.first_index == 0:
                hop_trace.job_hop(job_id, "first chunk stored")
        self._core.chunks_stored(batch.stored, batch.resent)  # committed: readers may have them
        return batch

    def note_cached_prompt(self, node: NodeRecord, job_id: str, cached_prompt_tokens: int, attempt: int = 0) -> None:
        """The node reused part of the job's prompt from its prompt cache: usage reports it."""
        with self._core.db.transaction(durable=False) as session:  # a figure for the consumer, no money
            results.note_cached_prompt(session, node, job_id, cached_prompt_tokens, attempt)

    def accept_receipt(self, node: NodeRecord, job_id: str, body: bytes,
                       signature: bytes, attempt: int = 0) -> results.AcceptedResult:
        context = self._core.check_context()
        with self._core.db.transaction() as session:
            result = results.accept_receipt(session, node, job_id, body, signature,
                                            self._core.clock.now_ms(), context, attempt)
        self._core.completions_queued.set()
        # Only the node's commitment moved: the next pass's read of commitments sets it.
        log.info("job %s completed on %s; %d base units held for its operator (check: %s)",
                 job_id, node.node_id, result.credited_base_units, result.check_status.value)
        self._core.notifier.notify(job_topic(job_id), VERIFICATION_TOPIC)
        assert result.job is not None
        self._core.record_completed(result.job)
        if result.hold_until_ms is not None:
            self._core.credit_due.note(result.hold_until_ms)
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
        the full limit to reconnect, and a node that does keeps its jobs.

        Incremental: the nodes this process heard stop are known from memory, and are handed
        back only if no other coordinator renewed their lease. Nodes nobody hears (a dead
        coordinator's) are swept with one read every orphan_sweep_interval_ms. A pass where
        nothing went offline opens no transaction."""
        now = self._core.clock.now_ms()
        config = self._core.config
        offline_after = config.node_offline_after_ms
        if now - self._core.started_at_ms <= offline_after:
            return []  # the restart grace: nobody can have missed a heartbeat to this process
        gone = self.liveness.gone_offline(now)
        sweep = self._due(self._orphans_swept_at_ms, config.orphan_sweep_interval_ms, now)
        expire = self._expiry_due_ms is None or now >= self._expiry_due_ms
        prune = reports.prune_due(now)
        if not gone and not sweep and not expire and not prune:
            return []
        touched: list[str] = []
        stale_before = now - offline_after
        with self._core.db.transaction() as session:
            # One query either way, however many silent nodes there are (most hold no job); the
            # sweep's finds every silent node holding jobs, those this process heard stop too.
            if sweep:
                # A node back on a beat the next liveness batch writes is silent only on disk.
                back = self.liveness.comebacks_pending()
                stopped = [node_id for node_id in job_rows.silent_nodes_holding_jobs(session, stale_before)
                           if node_id not in back]
            else:
                stopped = liveness_rows.stale_holding_jobs_among(session, gone, stale_before) if gone else []
            for node_id in stopped:
                touched += handback.hand_back_jobs(session, node_id, "heartbeats stopped", now,
                                                  self._core.check_context())
            reports.prune_heartbeats_now_and_then(session, now)
            expired: list[str] = []
            if expire:
                expire_after = config.registration_limits.node_expire_after_ms
                expired = node_rows.expire_silent(session, now - expire_after, NODES_EXPIRED_PER_PASS_MAX)
                oldest = liveness_rows.oldest_lease(session)
                expiry_due = now + expire_after if oldest is None else oldest + expire_after + 1
        if sweep:
            self._orphans_swept_at_ms = now
        if expire:
            self._expiry_due_ms = expiry_due
        for node_id in expired:
            self.liveness.forget(node_id)
            self.sessions.drop(node_id)
        if gone or expired:
            self._core.fleet.note_changed([*gone, *expired])
        if expired:
            log.info("%d silent nodes expired (marked left)", len(expired))
        if touched:
            self._core.notifier.notify(*(job_topic(j) for j in touched))
            self._core.record_ended(touched)
            self._core.run_scheduler()
        return touched

    @staticmethod
    def _due(last_ms: int | None, interval_ms: int, now_ms: int) -> bool:
        return last_ms is None or now_ms - last_ms >= interval_ms
