"""How a job's end reaches the coordinator: its signed receipt, a failure, or a hand-back.

The one place a receipt is built, signed and reported, for one Mac's jobs and pod jobs
alike. Each report is retried while the coordinator is unreachable (a finished job's
credit must not be lost to a blip), and the operator's hooks hear how the job ended.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

from contracts.benchmarks import CHALLENGE_TEMPERATURE, CHALLENGE_TOP_P
from contracts.ids import JobId, NodeId
from contracts.models import ModelSpec
from contracts.receipts import FinishReason, Receipt, encode_receipt, output_digest, prompt_digest
from node_agent.coordinator_client import (
    Assignment, CallRejected, Challenge, Chunk, CoordinatorUnavailable, SessionExpired,
)
from node_agent.identity import Identity
from node_agent.inference.activations import Decoded
from node_agent.inference.engine import GenerationResult, partial_commitment
from node_agent.job_timeline import JobTimeline

log = logging.getLogger(__name__)

RETRY_DELAY_S_MIN = 0.1  # between attempts at one report, doubling up to the max
RETRY_DELAY_S_MAX = 5.0
REPORT_DEADLINE_S = 600.0  # how long a finished job's result is retried before it is dropped
T = TypeVar("T")


class ReportsClient(Protocol):
    """The CoordinatorClient calls a job's end makes (a fake in tests)."""

    def stream_tokens(self, job_id: str, chunks: Iterator[Chunk]) -> int: ...
    def report_receipt(self, job_id: str, body: bytes, signature: bytes) -> int: ...
    def report_failure(self, job_id: str, reason: str, handed_back: bool = False,
                       prompt_too_long: bool = False) -> None: ...


def job_receipt(assignment: Assignment, result: GenerationResult, node_id: NodeId) -> Receipt:
    """What the node signs for a finished job: the assignment's terms and the result's record."""
    return Receipt(
        job_id=JobId(assignment.job_id), node_id=node_id,
        model_id=assignment.model.model_id, weights_digest=assignment.model.weights_digest,
        prompt_digest=prompt_digest(assignment.prompt), temperature=assignment.temperature,
        top_p=assignment.top_p, seed=assignment.seed, max_tokens=assignment.max_tokens,
        output_digest=output_digest(result.token_ids), prompt_tokens=result.prompt_tokens,
        completion_tokens=len(result.token_ids), started_at_ms=result.started_at_ms,
        finished_at_ms=result.finished_at_ms, finish_reason=result.finish_reason,
        first_token_at_ms=result.first_token_at_ms,
        activation_commitment=result.activation_commitment)


def challenge_receipt(challenge: Challenge, model: ModelSpec, result: GenerationResult,
                      node_id: NodeId) -> Receipt:
    """What the node signs for a challenge benchmark: a job on the reference model whose id is the
    challenge's, so the coordinator replays its tokens and commitment like a checked job's."""
    return Receipt(
        job_id=JobId(challenge.challenge_id), node_id=node_id, model_id=model.model_id,
        weights_digest=model.weights_digest, prompt_digest=prompt_digest(challenge.prompt),
        temperature=CHALLENGE_TEMPERATURE, top_p=CHALLENGE_TOP_P, seed=challenge.seed,
        max_tokens=challenge.decode_tokens, output_digest=output_digest(result.token_ids),
        prompt_tokens=result.prompt_tokens, completion_tokens=len(result.token_ids),
        started_at_ms=result.started_at_ms, finished_at_ms=result.finished_at_ms,
        finish_reason=result.finish_reason, first_token_at_ms=result.first_token_at_ms,
        activation_commitment=result.activation_commitment)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class JobReports:
    def __init__(self, client: ReportsClient, identity: Identity,
                 job_finished: Callable[[str, int | None], None], stopping: threading.Event,
                 deadline_s: float = REPORT_DEADLINE_S) -> None:
        """job_finished: the hooks' record of each end (credited base units, None if unpaid)."""
        self._client = client
        self._identity = identity
        self._job_finished = job_finished
        self._stopping = stopping
        self._deadline_s = deadline_s

    def partial_receipt(self, assignment: Assignment, token_ids: tuple[int, ...], recorded: Decoded,
                        started_at_ms: int, first_token_at_ms: int) -> tuple[bytes, bytes]:
        """Sign a receipt over the job's first tokens (finish reason CUT_OFF), with the
        commitment to their recorded states: if the job is cut off later, these are paid."""
        finished = max(_now_ms(), first_token_at_ms, started_at_ms)
        receipt = Receipt(
            job_id=JobId(assignment.job_id), node_id=self._identity.node_id,
            model_id=assignment.model.model_id, weights_digest=assignment.model.weights_digest,
            prompt_digest=prompt_digest(assignment.prompt), temperature=assignment.temperature,
            top_p=assignment.top_p, seed=assignment.seed, max_tokens=assignment.max_tokens,
            output_digest=output_digest(token_ids), prompt_tokens=recorded.prompt_tokens,
            completion_tokens=len(token_ids), started_at_ms=started_at_ms, finished_at_ms=finished,
            finish_reason=FinishReason.CUT_OFF,
            first_token_at_ms=min(max(first_token_at_ms, started_at_ms), finished),
            activation_commitment=partial_commitment(assignment.job_id, recorded))
        body = encode_receipt(receipt)
        return body, self._identity.sign(body)

    def resend_tokens(self, job_id: str, chunks: list[Chunk]) -> None:
        """The stream broke: send every chunk again (the coordinator stores each index once)."""
        self.retry(lambda: self._client.stream_tokens(job_id, iter(chunks)))

    def receipt(self, assignment: Assignment, result: GenerationResult,
                timeline: JobTimeline | None = None) -> int | None:
        """Sign and report the job's receipt; returns the base units credited, None if refused."""
        body = encode_receipt(job_receipt(assignment, result, self._identity.node_id))
        signature = self._identity.sign(body)
        if timeline is not None:
            timeline.mark("receipt_signed")
        credited = self.retry(lambda: self._client.report_receipt(assignment.job_id, body,
                                                                  signature))
        if timeline is not None:
            timeline.mark("receipt_reported")
        log.info("job %s done: %d tokens, credited %s base units", assignment.job_id,
                 len(result.token_ids), credited)
        self._job_finished(assignment.job_id, credited)
        return credited

    def failure(self, job_id: str, reason: str, prompt_too_long: bool = False) -> None:
        """The job cannot run anywhere as asked: it fails."""
        self.retry(lambda: self._client.report_failure(job_id, reason,
                                                       prompt_too_long=prompt_too_long))
        self._job_finished(job_id, None)

    def hand_back(self, job_id: str, reason: str) -> None:
        """The job is unfinished here: the coordinator places it on another Mac."""
        log.info("handing job %s back: %s", job_id, reason)
        self.retry(lambda: self._client.report_failure(job_id, reason, handed_back=True))
        self._job_finished(job_id, None)

    def retry(self, call: Callable[[], T]) -> T | None:
        """Retry a report while the coordinator is unreachable; give up if it refuses."""
        delay_s = RETRY_DELAY_S_MIN
        waited_s = 0.0
        while waited_s < self._deadline_s and not self._stopping.is_set():
            try:
                return call()
            except CoordinatorUnavailable as error:
                log.warning("report failed (%s); retrying in %.1fs", error, delay_s)
            except (CallRejected, SessionExpired) as error:
                log.warning("coordinator refused the report: %s", error)
                return None
            self._stopping.wait(delay_s)
            waited_s += delay_s
            delay_s = min(delay_s * 2, RETRY_DELAY_S_MAX)
        return None
