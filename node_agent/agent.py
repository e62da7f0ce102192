"""The node agent: joins the network, takes assignments, runs them, proves them.

Four threads: the connection loop (register, then listen for assignments),
heartbeats, one worker that owns all MLX work and runs jobs from a bounded
queue in continuous batches (jobs join at step boundaries and leave as they
end), and the reporter that finishes each generated job (receipt and its
report) while the worker steps the batch. A check of a peer's job (a prefill-only
replay, node_agent/peer_checks.py) runs on the worker between batch steps.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from contracts import hop_trace
from contracts.commitments import CommitmentError
from contracts.hardware import HardwareReport
from contracts.tls import CoordinatorTrust
from contracts.models import ModelSpec
from contracts.peer_checks import CheckJob
from contracts.receipts import encode_receipt
from node_agent.active_jobs import ActiveJobs
from node_agent.coordinator_client import (
    Assignment, CallRejected, Challenge, CoordinatorClient, CoordinatorUnavailable, CoordinatorUntrusted,
    SessionExpired,
)
from node_agent.hooks import AgentHooks
from node_agent.identity import Identity
from node_agent.inference.activations import Decoded
from node_agent.inference.batch import Batches, BatchJob, JobSink
from node_agent.inference.engine import (
    Engine,
    GenerationRequest,
    PromptRefused,
    PromptTooLong,
    with_commitment,
)
from node_agent.job_reporter import Generated, JobReporter
from node_agent.job_reports import JobReports
from node_agent.job_timeline import JobTimeline
from node_agent.metrics import NodeMetrics
from node_agent.peer_checks import run_check
from node_agent.pods.leader import lead_pod_job
from node_agent.token_mux import MuxSender, TokenMux
from node_agent.token_sender import SenderThreads, TokenSender

log = logging.getLogger(__name__)

QUEUED_ASSIGNMENTS_MAX = 64
CHALLENGES_WAITING_MAX = 2  # the coordinator sends one at a time; a resend may overlap
RECONNECT_DELAY_S_MAX = 5.0  # a stream that stayed up longer starts the next backoff afresh
LEAVE_REPORTS_WAIT_S = 60.0  # leaving waits this long for receipts still being reported


@dataclass(frozen=True)
class AgentSettings:
    coordinator: str  # HOST:PORT, or several coordinators sharing one database, comma-separated
    identity: Identity
    hardware: HardwareReport
    models: tuple[tuple[ModelSpec, Path], ...]  # each served model and its directory
    operator_id: str
    display_name: str
    max_concurrent_jobs: int = 1
    operator_key: str = ""  # mlxo_...: proves operator_id to the coordinator
    trust: CoordinatorTrust = CoordinatorTrust()  # how the coordinator's certificate is checked
    # on_first_use(address, fingerprint) remembers a certificate trusted on first use.
    on_first_use: Callable[[str, str], None] | None = None
    region: str = ""  # published on MLX World's map; empty: not shown there
    # Per coordinator address, when they do not share one certificate (trust is for the rest).
    trust_by_address: Mapping[str, CoordinatorTrust] = field(default_factory=dict)


class NodeAgent:
    def __init__(self, settings: AgentSettings, engine: Engine,
                 hooks: AgentHooks | None = None, metrics: NodeMetrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics or NodeMetrics()  # served only with --metrics-port
        self._engine = engine
        self._hooks = hooks or AgentHooks()  # the operator's terms: lending, pods, benchmark
        self._heartbeat_wake = threading.Event()
        # Nodes given the same coordinators start at different ones (by node id): a fleet spreads.
        self._client = CoordinatorClient(settings.coordinator, settings.trust, settings.on_first_use,
                                         settings.trust_by_address,
                                         start_at=int(settings.identity.node_id[-8:], 16))
        self.stopping = threading.Event()
        self._reports = JobReports(self._client, settings.identity, self._hooks.job_finished,
                                   self.stopping)
        self._paths = {spec.model_id: path for spec, path in settings.models}
        self._jobs: queue.Queue[tuple[Assignment | CheckJob, JobTimeline]] = queue.Queue(QUEUED_ASSIGNMENTS_MAX)
        self._challenges: queue.Queue[Challenge] = queue.Queue(CHALLENGES_WAITING_MAX)
        # Up to max_concurrent_jobs jobs of a model decode together in one batch; weights are
        # counted once, each job's KV cache apart, against the GPU budget the node reported.
        budget = settings.hardware.gpu_working_set_bytes or None
        self._batches = Batches(engine, settings.max_concurrent_jobs, budget)
        self._active = ActiveJobs()  # assignments waiting or running here
        self._running = 0  # dequeued and not yet reported; the worker and the reporter count it
        self._running_lock = threading.Lock()
        self._reporter = JobReporter(self._finish_generated)
        self._sender_threads = SenderThreads()  # pod jobs', and every job's if the coordinator lacks the mux
        self._token_mux = TokenMux(self._client)  # the batch's jobs share one token stream
        self._heartbeat_interval_s = 2.0
        self.registered = threading.Event()
        self.untrusted: CoordinatorUntrusted | None = None  # why the agent stopped, if it did

    # --- lifecycle -----------------------------------------------------------

    def run(self) -> None:
        """Run until stop() is called."""
        threading.Thread(target=self._work_forever, name="mlx-worker", daemon=True).start()
        threading.Thread(target=self._heartbeat_forever, name="heartbeat", daemon=True).start()
        while not self.stopping.is_set():
            opened = time.monotonic()
            try:
                if not self.registered.is_set():
                    self._register()
                for assignment in self._client.assignments():
                    self._accept(assignment)
            except SessionExpired:
                self.registered.clear()
            except CoordinatorUntrusted as error:
                log.error("refusing the coordinator: %s", error)
                self.untrusted = error
                self.stop()
            except CoordinatorUnavailable as error:
                if len(self._client.addresses) == 1:
                    # Its channel reconnects by itself, and a changed certificate only shows as
                    # UNAVAILABLE (with several, each new channel checks the certificate).
                    self._check_trust()
                if self.stopping.is_set():
                    break
                # Back off while every try fails at once (coordinators restarting, a cut link
                # that accepts and drops): only a stream that stayed up starts again from the
                # shortest delay, so a fleet does not hammer a coordinator as it comes back.
                if time.monotonic() - opened > RECONNECT_DELAY_S_MAX:
                    self._client.connected()
                failed = self._client.address
                delay_s = self._client.fail_over()
                # The session stays valid at the next coordinator (one shared database), so
                # jobs running here go on and report there; one that refuses it says
                # SessionExpired, and the node registers again.
                log.warning("coordinator %s unavailable (%s); trying %s in %.2fs", failed, error,
                            self._client.address, delay_s)
                self.stopping.wait(delay_s)
        self._client.close()

    def _check_trust(self) -> None:
        try:
            self._client.check_trust()
        except CoordinatorUntrusted as error:
            log.error("refusing the coordinator: %s", error)
            self.untrusted = error
            self.stop()

    def stop(self) -> None:
        self.stopping.set()
        self._heartbeat_wake.set()
        self._client.close()  # ends the assignment stream the main loop is blocked on

    def heartbeat_now(self) -> None:
        """Send a heartbeat at once, e.g. when the owner came back and the node stops taking work."""
        self._heartbeat_wake.set()

    def leave(self) -> int | None:
        """Deregister (after draining): one attempt, since the agent stops either way.

        Returns the number of jobs the coordinator handed back, or None when it
        could not be told (it then hands them back once heartbeats stop).
        """
        if not self._reporter.wait_until_idle(LEAVE_REPORTS_WAIT_S):
            log.warning("leaving with receipts still unreported after %.0fs", LEAVE_REPORTS_WAIT_S)
        try:
            return self._client.leave("the operator ran mlxnet node leave")
        except (CoordinatorUnavailable, CallRejected, SessionExpired) as error:
            log.warning("could not deregister (%s); the coordinator will notice the silence", error)
            return None

    def _warm_model_ids(self) -> tuple[str, ...]:
        by_path = {str(path): model_id for model_id, path in self._paths.items()}
        return tuple(by_path[path] for path in self._engine.warm_models() if path in by_path)

    def _register(self) -> None:
        s = self.settings
        interval_ms = self._client.register(s.identity, s.hardware, tuple(m for m, _ in s.models),
                                            s.operator_id, s.display_name, s.max_concurrent_jobs,
                                            self._hooks.status(self._warm_model_ids()),
                                            self._hooks.pod(), s.operator_key, s.region)
        self._heartbeat_interval_s = interval_ms / 1000
        self._active.clear()  # a new registration hands back everything from before
        self.registered.set()
        log.info("registered as %s (%s, operator %s)", s.identity.node_id, s.hardware.chip,
                 s.operator_id)

    def _heartbeat_forever(self) -> None:
        while not self.stopping.is_set():
            self._heartbeat_wake.wait(self._heartbeat_interval_s)
            self._heartbeat_wake.clear()
            if not self.registered.is_set() or self.stopping.is_set():
                continue
            try:
                self._client.heartbeat(self._running, self._hooks.status(self._warm_model_ids()))
            except SessionExpired:
                self.registered.clear()
            except CoordinatorUnavailable as error:
                log.debug("heartbeat failed: %s", error)

    def _accept(self, assignment: Assignment | CheckJob | Challenge) -> None:
        if isinstance(assignment, Challenge):
            try:
                self._challenges.put_nowait(assignment)
            except queue.Full:
                log.warning("challenge benchmark %s dropped: one is already waiting", assignment.challenge_id)
            return
        work_id = assignment.check_id if isinstance(assignment, CheckJob) else assignment.job_id
        if isinstance(assignment, Assignment):
            hop_trace.adopt(work_id, assignment.traceparent)  # the coordinator's trace
        hop_trace.job_hop(work_id, "node received")
        if not self._active.admit(work_id):
            return
        self._jobs.put((assignment, JobTimeline(work_id)))

    # --- jobs ----------------------------------------------------------------

    def _work_forever(self) -> None:
        """The MLX thread: steps the batches while any job runs, and starts jobs as they arrive."""
        while not self.stopping.is_set():
            self._answer_challenges()
            if self._batches.busy:
                self._start_arrived()
                with self._token_mux.firsts_together():
                    self._batches.step(self._start_arrived)
                continue
            try:
                assignment, timeline = self._jobs.get(timeout=0.5)
            except queue.Empty:
                self._hooks.idle_work()
                continue
            self._start(assignment, timeline)

    def _answer_challenges(self) -> None:
        """A challenge benchmark runs at once, between batch steps: it is timed from its sending."""
        while True:
            try:
                challenge = self._challenges.get_nowait()
            except queue.Empty:
                return
            answer = self._hooks.run_challenge(challenge)
            if answer is None:
                log.warning("challenge benchmark %s not run: this node runs no benchmark", challenge.challenge_id)
                continue
            tokens, rate = answer.token_ids, answer.decode_tokens_per_s
            body = encode_receipt(answer.receipt)
            try:
                refused = self._client.answer_challenge(challenge.challenge_id, tokens, rate,
                                                        (body, self.settings.identity.sign(body)))
            except (CoordinatorUnavailable, CallRejected, SessionExpired) as error:
                log.warning("challenge benchmark %s not answered: %s", challenge.challenge_id, error)
                continue
            if refused:
                log.warning("challenge benchmark %s failed: %s", challenge.challenge_id, refused)
            else:
                log.info("challenge benchmark %s answered in time (%d tokens, %.0f tok/s); the "
                         "coordinator replays it", challenge.challenge_id, len(tokens), rate)

    def _start_arrived(self) -> None:
        """Jobs that arrived during the last step join at this step boundary."""
        while True:
            try:
                assignment, timeline = self._jobs.get_nowait()
            except queue.Empty:
                return
            self._start(assignment, timeline)

    def _start(self, assignment: Assignment | CheckJob, timeline: JobTimeline) -> None:
        if isinstance(assignment, CheckJob):
            self._check(assignment, timeline)
            return
        self._count_running(+1)
        timeline.mark("dequeued")
        started = False
        try:
            started = self._begin(assignment, timeline)
        finally:
            if not started:
                self._done_with(assignment.job_id, timeline)

    def _check(self, check: CheckJob, timeline: JobTimeline) -> None:
        """A peer's job, replayed in one prefill pass on this (the MLX) thread, between batch steps."""
        self._count_running(+1)
        try:
            log.info("checking job %s for the network (check %s, %d tokens)", check.job_id,
                     check.check_id, len(check.output_ids))
            try:
                body, signature = run_check(self._engine, str(self._paths[check.model_id]), check,
                                            self.settings.identity)
            except ValueError as error:  # refused input or an unsupported model: another peer is asked
                self._client.report_check(check.check_id, failure_reason=f"replay failed: {error}"[:1000])
                return
            except Exception as error:  # noqa: BLE001 (an MLX fault in one replay must not end this thread)
                log.exception("check %s crashed its replay", check.check_id)
                self._client.report_check(check.check_id, failure_reason=f"replay crashed: {error}"[:1000])
                return
            timeline.mark("checked")
            self._client.report_check(check.check_id, body, signature)
        except (CoordinatorUnavailable, CallRejected, SessionExpired) as error:
            # The check lapses at its deadline and goes to another peer; nothing is owed here.
            log.warning("could not report check %s: %s", check.check_id, error)
        finally:
            self._done_with(check.check_id, timeline)

    def _done_with(self, job_id: str, timeline: JobTimeline) -> None:
        self.metrics.job_ended(job_id)
        self._active.finish(job_id)
        self._count_running(-1)
        timeline.log()

    def _count_running(self, change: int) -> None:
        with self._running_lock:
            self._running += change

    def _begin(self, assignment: Assignment, timeline: JobTimeline) -> bool:
        """Start one job: True when it joined a batch (it ends in _generated)."""
        refusal = self._hooks.refusal(assignment)
        if refusal is not None:
            self.metrics.handed_back()
            self._reports.hand_back(assignment.job_id, refusal)
            return False
        if assignment.pod_id:  # a pod job runs apart from the batch, on this thread, to its end
            if assignment.pod_leader_node_id == self.settings.identity.node_id:
                self._hooks.job_started(assignment.job_id)
                sender = TokenSender(self._client, assignment.job_id, threads=self._sender_threads)
                lead_pod_job(assignment, sender, self._hooks.run_pod_job, self._reports)
            return False  # a member only lends its memory: the leader starts its rank
        self._hooks.job_started(assignment.job_id)
        self.metrics.job_started(assignment.job_id, assignment.model)
        timeline.mark("started")
        log.info("running job %s (%s, %d tokens max)", assignment.job_id,
                 assignment.model.model_id, assignment.max_tokens)
        request = GenerationRequest(
            model_path=str(self._paths[assignment.model.model_id]), prompt=assignment.prompt,
            max_tokens=assignment.max_tokens, temperature=assignment.temperature,
            top_p=assignment.top_p, seed=assignment.seed, job_id=assignment.job_id,
            top_logprobs=assignment.top_logprobs)
        started_at_ms, first_token_at_ms = time.time_ns() // 1_000_000, [0]

        def prove(token_ids: tuple[int, ...], recorded: Decoded) -> tuple[bytes, bytes]:
            return self._reports.partial_receipt(assignment, token_ids, recorded, started_at_ms,
                                                 first_token_at_ms[0])

        sender: TokenSender | MuxSender = (
            self._token_mux.sender(assignment.job_id, timeline, prove) if self._token_mux.supported
            else TokenSender(self._client, assignment.job_id, timeline=timeline,
                             threads=self._sender_threads, prover=prove))
        keep_going = self._hooks.keep_going
        metrics, job_id = self.metrics, assignment.job_id
        timeline.mark("generating")
        hop_trace.job_hop(assignment.job_id, "node started")

        def on_token(index: int, token_id: int, text: str) -> bool:
            if index == 0:
                timeline.mark("first_token")
                first_token_at_ms[0] = time.time_ns() // 1_000_000
            metrics.token_made(job_id)
            return sender.offer(index, token_id, text) and keep_going(assignment.job_id)

        def on_prompt(tokens: int) -> None:
            metrics.prompt_counted(job_id, tokens)
            sender.note_prompt_tokens(tokens)

        def on_prompt_cache(prompt_tokens: int, reused_tokens: int) -> None:
            metrics.prompt_cache_looked_up(job_id, prompt_tokens, reused_tokens)
            sender.note_cached_prompt_tokens(reused_tokens)

        sink = JobSink(on_token, on_prompt, sender.note_logprob, on_end=sender.finish,
                       on_done=lambda job: self._generated(assignment, timeline, sender, job),
                       on_proven=sender.note_proven, on_prompt_cache=on_prompt_cache)
        try:
            # The commitment is arithmetic over recorded values: the reporter makes it.
            self._batches.add(request, assignment.model.max_context_tokens, sink, commit=False)
        except PromptTooLong as error:
            sender.close()
            self._reports.failure(assignment.job_id, str(error), prompt_too_long=True)
            return False
        except PromptRefused as error:
            sender.close()
            self._reports.failure(assignment.job_id, str(error))
            return False
        return True

    def _generated(self, assignment: Assignment, timeline: JobTimeline, sender: TokenSender | MuxSender,
                   job: BatchJob) -> None:
        """On the MLX thread, as the job leaves its batch: hand it to the reporter, or end it here."""
        handed_over = False
        try:
            if job.error is not None:
                sender.close()
                log.warning("job %s failed: %s", assignment.job_id, job.error)
                self._reports.failure(assignment.job_id, f"generation failed: {job.error}")
                return
            result = job.result
            assert result is not None
            timeline.mark("generated")
            if not result.stopped_early:
                self._reporter.hand_over(Generated(assignment, result, sender, timeline))
                handed_over = True
                return
            sender.close()
            if not sender.rejected and not self._hooks.keep_going(assignment.job_id):
                self.metrics.handed_back()
                self._reports.hand_back(assignment.job_id, self._hooks.hand_back_reason())
            else:
                log.info("job %s stopped: %s", assignment.job_id, sender.error)
        finally:
            if not handed_over:
                self._done_with(assignment.job_id, timeline)

    def _finish_generated(self, job: Generated) -> None:
        """On the reporter's thread: the token stream's end, then the signed receipt."""
        assignment, sender, timeline = job.assignment, job.sender, job.timeline
        try:
            chunks = sender.close()
            timeline.mark("tokens_sent")
            if sender.rejected:  # cancelled after its last token: no receipt is due
                log.info("job %s stopped: %s", assignment.job_id, sender.error)
                return
            if sender.error is not None:  # the stream broke: re-send every chunk, harmlessly
                self._reports.resend_tokens(assignment.job_id, chunks)
            try:
                result = with_commitment(assignment.job_id, job.result)
            except CommitmentError as error:  # NaN or infinity: no honest proof exists
                self._reports.failure(assignment.job_id,
                                      f"cannot commit to the job's hidden states: {error}")
                return
            self._reports.receipt(assignment, result, timeline)
        finally:
            self._done_with(assignment.job_id, timeline)
