"""The coordinator's shared vocabulary: job and node records, job states, error codes.

Every layer (storage, scheduling, jobs, money, the edges) speaks in these values;
this module imports nothing of the coordinator, so any of them may import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from contracts.hardware import HardwareReport
from contracts.ids import JobId, NodeId, OperatorId
from contracts.lending import LendingState
from contracts.logprobs import TokenLogprob
from contracts.models import ModelSpec


class JobStatus(StrEnum):
    QUEUED = "queued"
    ASSIGNED = "assigned"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


TERMINAL_STATUSES = frozenset({JobStatus.COMPLETED, JobStatus.FAILED})
PROMPT_TEXT = "text"
PROMPT_CHAT = "chat"
# jobs.error_code: why a job failed, for callers that map it (the gateway's HTTP codes).
ERROR_PROMPT_TOO_LONG = "prompt_too_long"  # the node found prompt + max_tokens over the context
ERROR_CANCELLED = "cancelled"  # the consumer cancelled it (or went away mid-stream)
ERROR_STOP_SEQUENCE = "stop_sequence"  # ended at a stop sequence the consumer asked for
ERROR_NO_CAPACITY = "no_capacity"  # no Mac took it within the gateway's admission wait
ACTIVE_STATUSES = frozenset({JobStatus.ASSIGNED, JobStatus.RUNNING})
# Failures a retry would only repeat: a retried request id returns them rather than run again.
FINAL_FAILURES = frozenset({ERROR_PROMPT_TOO_LONG, ERROR_STOP_SEQUENCE})


def retry_runs_again(job: JobRecord) -> bool:
    """Whether a retry of the job's request id (an Idempotency-Key) starts a new attempt: the
    job failed (its node died, the network or the database failed, no Mac took it, the client
    went away or cancelled) for a reason a retry need not repeat. A completed, queued or
    running job is returned as it is, and so is a failure a retry would repeat."""
    return job.status is JobStatus.FAILED and job.error_code not in FINAL_FAILURES


@dataclass(frozen=True)
class NodeRecord:
    node_id: NodeId
    public_key: bytes
    operator_id: OperatorId
    display_name: str
    hardware: HardwareReport
    models: tuple[ModelSpec, ...]
    max_concurrent_jobs: int
    registered_at_ms: int
    last_heartbeat_ms: int
    lending: LendingState = LendingState()
    warm_models: tuple[str, ...] = ()
    measured_bandwidth_gb_s: float | None = None  # from the latest self-benchmark
    benchmark_flag: str | None = None  # why that benchmark does not fit the claimed chip
    # (jobs in one batch, their tokens/s in all) from that benchmark; empty until measured
    batch_decode_tokens_per_s: tuple[tuple[int, float], ...] = ()
    left_at_ms: int | None = None  # the node left the network (Leave) and is not placed on
    challenge_flag: str | None = None  # why its latest challenge benchmark failed (spot_benchmarks)
    challenge_passed_at_ms: int | None = None  # its latest challenge passed its replay then

    @property
    def hardware_proven(self) -> bool:
        """Verified, and a challenge's tokens passed the coordinator's replay: the only ground
        for the Ultra-seat bonus (a fast answer alone proves nothing, garbage can be fast)."""
        return self.hardware_verified and self.challenge_passed_at_ms is not None

    def model(self, model_id: str) -> ModelSpec | None:
        return next((m for m in self.models if m.model_id == model_id), None)

    @property
    def hardware_verified(self) -> bool:
        """The node's own benchmark fits the chip it claims (coordinator/nodes/benchmark_check.py),
        and its latest challenge benchmark, if any, fit that benchmark (nodes/spot_benchmarks.py).

        Until then its hardware is only claimed: placement treats it as the slowest Mac and
        the Ultra-seat bonus is not paid on it."""
        return (self.measured_bandwidth_gb_s is not None and self.benchmark_flag is None
                and self.challenge_flag is None)


# How a job's consumer reads its output. A stream (gRPC, an HTTP stream) sees each token as
# it is stored; a whole answer (a non-streaming HTTP request) sees nothing unless the job ends
# well, so a failed whole-answer job delivered nothing and costs nothing.
DELIVERY_STREAM = "stream"
DELIVERY_WHOLE = "whole"


@dataclass(frozen=True)
class JobRecord:
    job_id: JobId
    consumer_id: str
    request_id: str | None
    model_id: str
    prompt: str
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    min_decode_tokens_per_s: float
    context_tokens: int
    status: JobStatus
    created_at_ms: int
    strategy: str | None = None
    layer_split: tuple[int, ...] = ()
    explanation_json: str | None = None
    attempt: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0  # of prompt_tokens, reused from the node's prompt cache
    receipt_body: bytes | None = None
    receipt_signature: bytes | None = None
    receipt_verified: bool = False
    credited_base_units: int = 0
    error: str | None = None
    assigned_at_ms: int | None = None
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    node_ids: tuple[NodeId, ...] = ()  # the current attempt's nodes, from job_assignments
    # The consumer API's fields (coordinator.gateway, coordinator.money.job_money).
    api_key_id: str | None = None
    reserved_base_units: int = 0  # the consumer's reservation; 0 when the network pays
    billing_closed_at_ms: int | None = None
    prompt_format: str = PROMPT_TEXT  # PROMPT_CHAT: prompt is contracts.chat's canonical text
    stop: tuple[str, ...] = ()
    top_logprobs: int = -1  # -1: no logprobs; 0: the chosen token's only; k: and the top k
    error_code: str | None = None
    # A failed job's money (coordinator.jobs.ending): the latest partial receipt its node
    # signed, unchecked until the job ends, and how its consumer reads the output.
    partial_receipt_body: bytes | None = None
    partial_receipt_signature: bytes | None = None
    delivery: str = DELIVERY_STREAM


@dataclass(frozen=True)
class SignedReceipt:
    """A receipt's canonical bytes (contracts.receipts) and the node's signature over them."""

    body: bytes
    signature: bytes


@dataclass(frozen=True)
class TokenChunk:
    first_index: int
    token_ids: tuple[int, ...]
    text: str
    logprobs: tuple[TokenLogprob, ...] = ()  # one per token when the job asked, else none


# --- nodes ---------------------------------------------------------------


# --- liveness (coordinator.nodes.liveness, coordinator.nodes.uptime) ----------------------

@dataclass(frozen=True)
class LeaseWrite:
    """One node's row as a liveness batch writes it: the lease and the jobs it reports running."""

    node_id: str
    last_heartbeat_ms: int
    running_jobs: int
    came_online: bool = False  # a comeback: placement hears of it once written (flush_liveness)


@dataclass(frozen=True)
class UptimeSpan:
    """Signed heartbeats of one lending mode with no gap longer than the heartbeat credit."""

    node_id: str
    mode: str  # the lending mode the heartbeats were signed in
    first_received_ms: int  # the coordinator's clock
    last_received_ms: int
    first_sent_at_ms: int  # the node's clock, signed
    last_sent_at_ms: int
    beats: int
    first_signature: bytes
    last_signature: bytes

    def __post_init__(self) -> None:
        assert self.first_received_ms <= self.last_received_ms and self.beats >= 1
        assert self.first_sent_at_ms <= self.last_sent_at_ms

    def proves(self, credit_ms: int) -> tuple[int, int]:
        """The interval this span proves the node online over: [first, last + credit)."""
        return self.first_received_ms, self.last_received_ms + credit_ms

    def credit_times(self, credit_ms: int, since_ms: int, until_ms: int) -> list[int]:
        """Times whose credits [t, t + credit_ms) cover exactly what the span proves within
        [since_ms, until_ms): one per credit_ms from its first heartbeat, and its last. So the
        ledger's per-heartbeat rule (ledger.seats.availability_bps) reads spans unchanged."""
        assert credit_ms > 0
        start = self.first_received_ms
        if start < since_ms - credit_ms:  # skip whole credits that end before the window
            start += (since_ms - credit_ms - start) // credit_ms * credit_ms
        last = min(self.last_received_ms, until_ms)
        times = list(range(start, last, credit_ms))
        if self.last_received_ms < until_ms:
            times.append(self.last_received_ms)
        return times


CHALLENGE_PASSED = "passed"  # a challenge's stored outcome when its replay agreed; otherwise the reason


@dataclass(frozen=True)
class SpotChallenge:
    """A challenge benchmark sent to a verified Mac (coordinator/nodes/spot_benchmarks.py)."""

    challenge_id: str
    node_id: str
    model_id: str  # the reference model the node benchmarked
    prompt: str
    seed: int
    decode_tokens: int
    issued_at_ms: int
    claimed_tokens_per_s: float  # the node's benchmark when issued: what is being checked
    sent_at_ms: int | None = None
